// The official E2B CLI (@e2b/cli, a test dependency) against the server, in
// the runner's routing mode, with nothing but the environment the server
// prints (E2B_* and, under TLS, NODE_EXTRA_CA_CERTS): a template from a
// Dockerfile with a start and a ready command, listed and deleted; a
// sandbox of it created and connected to in a pseudo-terminal (util-linux
// `script`), exec, logs (the exec's process, the kill, --follow), metrics,
// pause and resume, snapshots, kill — each checked by what the CLI prints.
// The steps run in order, on one template and one sandbox.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Sandbox } from 'e2b'

import { apiFetch, mode, runTag, sleep } from './helpers.mjs'

const CLI = join(dirname(fileURLToPath(import.meta.url)), '..', 'node_modules', '@e2b', 'cli', 'dist', 'index.js')
const name = `sdk-test-cli-${mode}-${runTag}`
const work = mkdtempSync(join(tmpdir(), 'sdk-cli-'))
const created = new Set()

// The CLI's own: its config under a HOME of its own, and no update check
// (it would ask npm's registry).
const cliEnv = { ...process.env, HOME: work, NO_UPDATE_NOTIFIER: '1', NO_COLOR: '1', FORCE_COLOR: '0' }

// eslint-disable-next-line no-control-regex
const plain = (s) => s.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '').replace(/\r/g, '')

/**
 * Runs the CLI with args (stdin closed, or input written to it) and
 * returns { code, out, err }, the output without colours.
 */
function cli(args, { timeoutMs = 120_000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: work, env: cliEnv, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    let err = ''
    child.stdout.on('data', (d) => (out += d))
    child.stderr.on('data', (d) => (err += d))
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`e2b ${args.join(' ')}: no exit after ${timeoutMs} ms\nstdout: ${out}\nstderr: ${err}`))
    }, timeoutMs)
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ code, out: plain(out), err: plain(err) })
    })
  })
}

/** cli that must exit 0; returns its stdout. */
async function ok(args, opts) {
  const r = await cli(args, opts)
  assert.equal(r.code, 0, `e2b ${args.join(' ')} exited ${r.code}\nstdout: ${r.out}\nstderr: ${r.err}`)
  return r.out
}

/**
 * Runs the CLI with args in a pseudo-terminal (util-linux `script`), types
 * each of lines once the output so far matches its `after` and returns
 * the whole output when the CLI exits.
 */
function inTerminal(args, steps, { timeoutMs = 90_000 } = {}) {
  const command = [process.execPath, CLI, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ')
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qfec', command, '/dev/null'], { cwd: work, env: { ...cliEnv, TERM: 'dumb' }, stdio: ['pipe', 'pipe', 'pipe'] })
    let out = ''
    let next = 0
    const feed = () => {
      while (next < steps.length && steps[next].after.test(plain(out))) child.stdin.write(steps[next++].type)
    }
    child.stdout.on('data', (d) => {
      out += d
      feed()
    })
    child.stderr.on('data', (d) => (out += d))
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`e2b ${args.join(' ')} in a terminal: no exit after ${timeoutMs} ms (${next} of ${steps.length} lines typed)\n${plain(out)}`))
    }, timeoutMs)
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ code, out: plain(out), typed: next })
    })
  })
}

/** The sandbox ID a CLI output names after "sandbox ID" or "sandbox". */
function sandboxIdIn(out) {
  const m = out.match(/sandbox(?: ID)? (i[a-z0-9]{10,})/i)
  assert.ok(m, `no sandbox ID in:\n${out}`)
  created.add(m[1])
  return m[1]
}

before(() => {
  writeFileSync(join(work, 'Dockerfile'), 'FROM e2bdev/base\nRUN echo built-by-the-cli > /home/user/marker\n')
})

after(async () => {
  await Promise.all([...created].map((id) => Sandbox.kill(id).catch(() => {})))
  const res = await apiFetch(`/templates/${name}`, { method: 'DELETE' })
  assert.ok(res.status === 204 || res.status === 404, `DELETE /templates/${name}: ${res.status} ${await res.text()}`)
  rmSync(work, { recursive: true, force: true })
})

describe('the e2b CLI', { concurrency: 1 }, () => {
  let id

  test('template create: a Dockerfile with --cmd and --ready-cmd', { timeout: 300_000 }, async () => {
    const out = await ok([
      'template', 'create', name, '--dockerfile', 'Dockerfile',
      '--cmd', 'echo started > /tmp/started && sleep infinity',
      '--ready-cmd', 'test -f /tmp/started',
    ], { timeoutMs: 300_000 })
    assert.match(out, new RegExp(name), `the output does not name the template:\n${out}`)
  })

  test('template list shows it', async () => {
    const out = await ok(['template', 'list'])
    assert.match(out, new RegExp(name), `the list lacks ${name}:\n${out}`)
    const listed = JSON.parse(await ok(['template', 'list', '--format', 'json']))
    const mine = listed.find((t) => t.aliases?.includes(name) || t.names?.includes(name))
    assert.ok(mine, `the JSON list lacks ${name}: ${JSON.stringify(listed)}`)
    assert.equal(mine.buildStatus, 'ready')
  })

  test('sandbox create in a terminal: a command typed, its output read; the start command ran before', { timeout: 120_000 }, async () => {
    const r = await inTerminal(['sandbox', 'create', name], [
      { after: /Terminal connecting/, type: 'cat /tmp/started /home/user/marker; echo "$((6 * 7))-typed"\r' },
      { after: /42-typed/, type: 'exit\r' },
    ])
    assert.equal(r.typed, 2, `not every line typed:\n${r.out}`)
    assert.match(r.out, /started\s+built-by-the-cli\s+42-typed/, r.out)
    assert.equal(r.code, 0, r.out)
    sandboxIdIn(r.out)
  })

  test('sandbox create --detach, then connect in a terminal', { timeout: 120_000 }, async () => {
    id = (await ok(['sandbox', 'create', '--detach', name])).trim().split('\n').pop().trim()
    assert.match(id, /^i[a-z0-9]+$/, `not a sandbox ID: ${id}`)
    created.add(id)
    const r = await inTerminal(['sandbox', 'connect', id], [
      { after: /Terminal connecting/, type: 'echo "$((7 * 6))-connected"\r' },
      { after: /42-connected/, type: 'exit\r' },
    ])
    assert.equal(r.typed, 2, `not every line typed:\n${r.out}`)
    assert.equal(r.code, 0, r.out)
    assert.match(r.out, /Closing terminal connection/, r.out)
  })

  test('sandbox exec: output and exit code', async () => {
    const r = await cli(['sandbox', 'exec', id, 'sh', '-c', 'echo exec-out; echo exec-err >&2; exit 3'])
    assert.equal(r.code, 3, `exit code ${r.code}\n${r.out}\n${r.err}`)
    assert.match(r.out, /exec-out/)
    assert.match(r.err, /exec-err/)
  })

  test('sandbox logs: the exec process, started and ended with its exit code', async () => {
    const out = await ok(['sandbox', 'logs', id])
    assert.match(out, /creating sandbox/, out)
    // Each line's fields sorted by name: cmd and exit_code before message.
    assert.match(out, /cmd: [^\n]*exec-out[^\n]*process started/, `no start of the exec's process:\n${out}`)
    assert.match(out, /exit_code: '3'[^\n]*process ended/, `no end of the exec's process with its exit code:\n${out}`)
    const json = (await ok(['sandbox', 'logs', '--format', 'json', id])).trim().split('\n').map((l) => JSON.parse(l))
    assert.ok(json.some((l) => l.logger === 'envd' && l.message === 'process ended' && l.exit_code === '3'), JSON.stringify(json))
  })

  test('sandbox metrics', { timeout: 60_000 }, async () => {
    // Sampled every 5 s: the first sample may be a little while away.
    let out
    for (let i = 0; i < 20; i++) {
      out = await ok(['sandbox', 'metrics', id])
      if (/CPU/i.test(out)) break
      await sleep(1_000)
    }
    assert.match(out, new RegExp(`Metrics for sandbox ${id}`), out)
    assert.match(out, /CPU/i, `no sample:\n${out}`)
  })

  test('sandbox pause and resume', { timeout: 120_000 }, async () => {
    assert.match(await ok(['sandbox', 'pause', id]), /paused/i)
    const info = JSON.parse(await ok(['sandbox', 'info', '--format', 'json', id]))
    assert.equal(info.state, 'paused')
    assert.match(await ok(['sandbox', 'resume', id]), /resumed/i)
    assert.match(await ok(['sandbox', 'exec', id, 'cat', '/tmp/started']), /started/)
  })

  test('sandbox snapshot create, list, delete', { timeout: 180_000 }, async () => {
    const created = await ok(['sandbox', 'snapshot', 'create', id], { timeoutMs: 180_000 })
    const m = created.match(/Created snapshot (\S+) from sandbox/)
    assert.ok(m, created)
    const snapshot = m[1]
    assert.match(await ok(['sandbox', 'snapshot', 'list', id]), new RegExp(snapshot))
    assert.match(await ok(['sandbox', 'snapshot', 'delete', snapshot]), new RegExp(`Snapshot ${snapshot} has been deleted`))
    assert.doesNotMatch(await ok(['sandbox', 'snapshot', 'list', id]), new RegExp(snapshot))
  })

  test('sandbox kill, seen by logs --follow and by logs after', { timeout: 60_000 }, async () => {
    const follow = cli(['sandbox', 'logs', '--follow', id], { timeoutMs: 60_000 })
    await sleep(1_500) // it polls every 400 ms
    assert.match(await ok(['sandbox', 'kill', id]), /killed/i)
    const f = await follow
    assert.equal(f.code, 0, `${f.out}\n${f.err}`)
    // It fetches lines, then asks whether the sandbox runs: a kill between
    // the two ends it before the kill's own line, which `logs` shows after.
    assert.match(f.out, /exit_code: '3'[^\n]*process ended/, f.out)
    assert.match(f.out, /Stopped printing logs — sandbox is closed/, f.out)
    const out = await ok(['sandbox', 'logs', id])
    assert.match(out, /exit_code: '3'[^\n]*process ended/, out)
    assert.match(out, /sandbox ended[^\n]*reason: 'killed'/, `the kill is not in the log after it:\n${out}`)
  })

  test('template delete', async () => {
    await ok(['template', 'delete', '--yes', name])
    assert.doesNotMatch(await ok(['template', 'list']), new RegExp(name))
  })
})
