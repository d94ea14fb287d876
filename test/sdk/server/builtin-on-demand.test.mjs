// A new user's first `serve`, without --templates, on a fresh data dir
// (the runner's FRESH_FILES: base only, seeded by hard links), then
// Sandbox.create() from @e2b/code-interpreter: the first create starts
// the build of code-interpreter-v1 and is answered at once with 503 (the
// SDK's ServiceBusyError) saying it is being built, with progress and
// Retry-After; a retry loop, as an agent framework has, gets a running
// sandbox once the build is done; sandboxes of base are created
// throughout.

import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { Sandbox as CodeInterpreter } from '@e2b/code-interpreter'
import { Sandbox, ServiceBusyError } from 'e2b'

import { apiFetch, jsonBody, killCreated, runTag, RUN_META_KEY, track } from './helpers.mjs'

after(killCreated)

const TEMPLATE = 'code-interpreter-v1'
const metadata = { [RUN_META_KEY]: runTag }
/** The build's bound: from cached layers it takes seconds, from nothing minutes. */
const BUILD_WAIT_MS = 15 * 60_000

test('the first create of code-interpreter-v1 builds it on demand: 503 at once, a running sandbox after, base served throughout', { timeout: BUILD_WAIT_MS + 60_000 }, async (t) => {
  const before = await jsonBody(await apiFetch('/templates'))
  assert.deepEqual(before.map((x) => x.templateID), ['base'], 'the fresh data dir holds only base')

  const t0 = performance.now()
  const first = await CodeInterpreter.create({ metadata }).then(
    (sbx) => (track(sbx.sandboxId), assert.fail('the first create of a template that is not built succeeded')),
    (e) => e,
  )
  const firstMs = performance.now() - t0
  t.diagnostic(`first create answered in ${firstMs.toFixed(0)} ms: ${first.message}`)
  assert.ok(first instanceof ServiceBusyError, `got ${first}`)
  assert.ok(firstMs < 1000, `the first create took ${firstMs.toFixed(0)} ms`)
  assert.match(first.message, /template 'code-interpreter-v1' is built in and is being built on this server/)

  // The raw answer: E2B's error body, Retry-After, the build's progress.
  const raw = await apiFetch('/v2/sandboxes', { method: 'POST', body: JSON.stringify({ templateID: TEMPLATE, metadata }) })
  const body = await jsonBody(raw)
  assert.equal(raw.status, 503, JSON.stringify(body))
  assert.equal(raw.headers.get('retry-after'), '10')
  assert.deepEqual(Object.keys(body).sort(), ['code', 'message'])
  assert.equal(body.code, 503)
  assert.match(body.message, /being built on this server: started \d+s ago, now .+; retry in 10s$/)
  const listed = await jsonBody(await apiFetch('/templates'))
  assert.equal(listed.find((x) => x.templateID === TEMPLATE)?.buildStatus, 'building')

  // Retry as a framework would, creating base sandboxes in between.
  let sbx
  let baseCreates = 0
  const messages = new Set()
  const deadline = Date.now() + BUILD_WAIT_MS
  while (!sbx) {
    const base = await Sandbox.create({ metadata })
    track(base.sandboxId)
    assert.equal((await base.commands.run('echo base')).stdout, 'base\n')
    await base.kill()
    baseCreates++
    try {
      sbx = await CodeInterpreter.create({ metadata })
      track(sbx.sandboxId)
    } catch (e) {
      assert.ok(e instanceof ServiceBusyError, `a create while building: ${e}`)
      messages.add(e.message.replace(/\d+s ago/, 'Ns ago'))
      assert.ok(Date.now() < deadline, `code-interpreter-v1 not built after ${BUILD_WAIT_MS / 1000} s: ${e.message}`)
      await sleep(2_000)
    }
  }
  const waitedS = (performance.now() - t0) / 1000
  t.diagnostic(`running after ${waitedS.toFixed(1)} s; ${baseCreates} base sandboxes created meanwhile; progress seen: ${[...messages].join(' | ')}`)
  assert.equal((await sbx.runCode('1+1')).text, '2')
  const after = await jsonBody(await apiFetch('/templates'))
  assert.equal(after.find((x) => x.templateID === TEMPLATE)?.buildStatus, 'ready')
})
