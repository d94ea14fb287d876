// The official @e2b/code-interpreter SDK (2.8.0) against code-interpreter-v1
// sandboxes: the server on port 49999 inside them, reached through the
// router like any getHost port.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

import { RUN_META_KEY, mode, runTag, track, killCreated } from './helpers.mjs'

const TEMPLATE = 'code-interpreter-v1'

async function create(opts = {}) {
  const sbx = await Sandbox.create(TEMPLATE, { ...opts, metadata: { [RUN_META_KEY]: runTag } })
  track(sbx.sandboxId)
  return sbx
}

function percentile(values, p) {
  const s = [...values].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}

after(killCreated)

describe(`code interpreter (${mode} mode)`, { timeout: 600_000 }, () => {
  let sbx
  let createToFirstMs
  before(async () => {
    const t0 = performance.now()
    sbx = await create({ envs: { SANDBOX_WIDE: 'from-create' } })
    const first = await sbx.runCode('1+1')
    assert.equal(first.text, '2')
    createToFirstMs = performance.now() - t0
  })

  test('figures: Sandbox.create → first result, and runCode round trip', async (t) => {
    t.diagnostic(`Sandbox.create → first runCode('1+1') result: ${createToFirstMs.toFixed(0)} ms`)
    const times = []
    for (let i = 0; i < 50; i++) {
      const t0 = performance.now()
      const ex = await sbx.runCode('1+1')
      times.push(performance.now() - t0)
      assert.equal(ex.text, '2')
    }
    t.diagnostic(`runCode('1+1') round trip over 50: p50 ${percentile(times, 50).toFixed(1)} ms, p99 ${percentile(times, 99).toFixed(1)} ms`)
  })

  test('state persists across runCode calls and execution_count increments', async () => {
    await sbx.runCode('counter = 40')
    const a = await sbx.runCode('counter += 1; counter')
    const b = await sbx.runCode('counter += 1; counter')
    assert.equal(a.text, '41')
    assert.equal(b.text, '42')
    assert.equal(b.executionCount, a.executionCount + 1)
  })

  test('onStdout and onStderr stream in order', async () => {
    const seen = []
    // ipykernel batches a stream until it is flushed (or for 0.2 s), as
    // under Jupyter; flushed prints arrive in order. Its flush timer may
    // also split one print ("three", then its "\n") under load, so runs
    // of one stream are compared joined.
    const push = (stream, text) => {
      const last = seen.at(-1)
      if (last?.[0] === stream) last[1] += text
      else seen.push([stream, text])
    }
    const ex = await sbx.runCode('import sys, time\nprint("one", flush=True)\nprint("two", file=sys.stderr, flush=True)\ntime.sleep(0.2)\nprint("three", flush=True)', {
      onStdout: (m) => push('out', m.line),
      onStderr: (m) => push('err', m.line),
    })
    assert.deepEqual(seen, [['out', 'one\n'], ['err', 'two\n'], ['out', 'three\n']])
    assert.equal(ex.logs.stdout.join(''), 'one\nthree\n')
    assert.deepEqual(ex.logs.stderr, ['two\n'])
  })

  test('an exception returns name, value and traceback', async () => {
    const ex = await sbx.runCode('def f():\n    raise ValueError("bad value")\nf()')
    assert.equal(ex.error.name, 'ValueError')
    assert.equal(ex.error.value, 'bad value')
    assert.match(ex.error.traceback, /raise ValueError/)
  })

  test('a matplotlib plot returns a PNG and a line chart with its data', async () => {
    const ex = await sbx.runCode(
      'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [4, 5, 6], label="up")\nplt.title("T")\nplt.xlabel("x")\nplt.show()',
    )
    assert.equal(ex.error, undefined)
    const r = ex.results[0]
    assert.ok(r.png && Buffer.from(r.png, 'base64').subarray(1, 4).toString() === 'PNG')
    assert.equal(r.chart.type, 'line')
    assert.equal(r.chart.title, 'T')
    assert.equal(r.chart.elements.length, 1)
    assert.deepEqual(r.chart.elements[0].points, [[1, 4], [2, 5], [3, 6]])
  })

  test('bar, scatter, pie and box charts have their types', async () => {
    const kinds = {
      bar: 'plt.bar(["a", "b"], [3, 4])',
      scatter: 'plt.scatter([1, 2], [3, 4])',
      pie: 'plt.pie([1, 3], labels=["x", "y"])',
      box_and_whisker: 'plt.boxplot([[1, 2, 3, 4, 5]])',
    }
    for (const [type, code] of Object.entries(kinds)) {
      const ex = await sbx.runCode(`import matplotlib.pyplot as plt\nplt.figure()\n${code}\nplt.show()`)
      assert.equal(ex.results[0]?.chart?.type, type, `${type}: ${JSON.stringify(ex.error ?? ex.results)}`)
    }
    const ex = await sbx.runCode('import matplotlib.pyplot as plt\nfig, ax = plt.subplots(1, 2)\nax[0].plot([1, 2])\nax[1].bar(["a"], [1])\nplt.show()')
    assert.equal(ex.results[0].chart.type, 'superchart')
    assert.equal(ex.results[0].chart.elements.length, 2)
  })

  test('a DataFrame returns data', async () => {
    const ex = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})')
    const r = ex.results.find((x) => x.isMainResult)
    assert.deepEqual(r.data, { a: [1, 2], b: ['x', 'y'] })
    assert.ok(r.html?.includes('<table'))
  })

  test('env vars per call and per sandbox', async () => {
    const per = await sbx.runCode('import os; os.getenv("PER_CALL")', { envs: { PER_CALL: 'yes' } })
    assert.equal(per.text, 'yes')
    const gone = await sbx.runCode('import os; str(os.getenv("PER_CALL"))')
    assert.equal(gone.text, 'None')
    const wide = await sbx.runCode('import os; os.getenv("SANDBOX_WIDE")')
    assert.equal(wide.text, 'from-create')
  })

  test('contexts: create, list, own state and cwd, restart, remove', async () => {
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    assert.equal(ctx.cwd, '/tmp')
    assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, '/tmp')
    await sbx.runCode('own = "mine"', { context: ctx })
    assert.equal((await sbx.runCode('own', { context: ctx })).text, 'mine')
    assert.equal((await sbx.runCode('"own" in globals()')).text, 'False') // default context: separate state
    const listed = await sbx.listCodeContexts()
    assert.equal(listed.at(-1).id, ctx.id)
    await sbx.restartCodeContext(ctx)
    assert.equal((await sbx.runCode('"own" in globals()', { context: ctx })).text, 'False')
    assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, '/tmp')
    await sbx.removeCodeContext(ctx)
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
  })

  test('JavaScript and bash contexts keep state', async () => {
    await sbx.runCode('const base = 20; function twice(x) { return 2 * x }', { language: 'js' })
    assert.equal((await sbx.runCode('twice(base) + 2', { language: 'javascript' })).text, '42')
    await sbx.runCode('GREETING=hello; cd /tmp', { language: 'bash' })
    const b = await sbx.runCode('echo "$GREETING from $(pwd)"', { language: 'bash' })
    assert.deepEqual(b.logs.stdout, ['hello from /tmp\n'])
  })

  test('R contexts keep state', async () => {
    await sbx.runCode('half <- 21', { language: 'r' })
    const ex = await sbx.runCode('half * 2', { language: 'r' })
    assert.equal(ex.error, undefined)
    // IRkernel shows values as display data, not as an execute result.
    assert.equal(ex.results[0]?.text, '[1] 42', JSON.stringify(ex))
  })

  test('with allowPublicTraffic: false the SDK sends the traffic token and runCode works', async () => {
    const priv = await create({ network: { allowPublicTraffic: false } })
    assert.ok(priv.trafficAccessToken)
    assert.equal((await priv.runCode('6 * 7')).text, '42')
  })

  test('a long sleep is interrupted when the client times out, and the next call works', async () => {
    await sbx.runCode('slept = "before"')
    const t0 = performance.now()
    await assert.rejects(sbx.runCode('import time\ntime.sleep(60)\nslept = "after"', { timeoutMs: 2000 }))
    assert.ok(performance.now() - t0 < 10_000)
    const t1 = performance.now()
    const next = await sbx.runCode('slept')
    assert.equal(next.text, 'before')
    assert.ok(performance.now() - t1 < 5000, `next call took ${performance.now() - t1} ms`)
  })

  test('killing the kernel processes does not break the next runCode in a fresh context', async () => {
    const kill = await sbx.commands.run(
      'for p in $(ps -eo pid=,args= | awk \'/ipykernel_launcher/ && !/awk/ {print $1}\'); do kill -9 "$p"; done; echo done',
      { user: 'root' },
    )
    assert.equal(kill.stdout.trim(), 'done')
    const ctx = await sbx.createCodeContext()
    assert.equal((await sbx.runCode('1+1', { context: ctx })).text, '2')
  })
})
