// Lifecycle policies through the SDK: onTimeout 'pause' with autoResume (a
// request to a getHost URL, or envd itself, wakes the sandbox), pauses that
// keep the file system only (pause({keepMemory: false}), onTimeout
// {action: 'pause', keepMemory: false}) and connect({onResume: 'reboot'}),
// which resume by booting again over the kept files (a new boot id, no
// processes, files and env kept), the invalid combinations, and what getInfo
// says (state, lifecycle, and our pausedWith, resumedBy and reboots).

import { after, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { InvalidArgumentError, Sandbox } from 'e2b'

import { apiFetch, createSandbox, fetchUntilOk, HOME, hostUrl, jsonBody, killCreated, runTag, RUN_META_KEY, track, waitFor } from './helpers.mjs'

after(killCreated)

const BOOT_ID = '/proc/sys/kernel/random/boot_id'

/** GET /sandboxes/{id} raw, for our extension fields. */
async function rawInfo(id) {
  const res = await apiFetch(`/sandboxes/${id}`)
  assert.equal(res.status, 200)
  return jsonBody(res)
}

async function waitPaused(id) {
  await waitFor(async () => (await Sandbox.getInfo(id)).state === 'paused', { timeoutMs: 15_000, intervalMs: 200, what: `${id} paused` })
}

describe('auto-pause and auto-resume', () => {
  test('onTimeout pause + autoResume: a request to getHost(8000) wakes it, its server process intact', { timeout: 120_000 }, async (t) => {
    const { sbx } = await createSandbox({ timeoutMs: 120_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
    const server = await sbx.commands.run('python3 -m http.server 8000', { background: true, cwd: HOME })
    const url = hostUrl(sbx, 8000)
    await fetchUntilOk(url)
    // The SDK answers a stream cut by the pause with a health check of
    // envd, a request that would wake the sandbox at once (E2B's too):
    // the server runs on without this process watching it.
    await server.disconnect()
    await sbx.setTimeout(2_000)
    await waitPaused(sbx.sandboxId)
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.deepEqual(info.lifecycle, { onTimeout: 'pause', autoResume: true })
    assert.equal((await rawInfo(sbx.sandboxId)).pausedWith.startsWith('memory-'), true)

    const t0 = performance.now()
    const res = await fetch(url, { signal: AbortSignal.timeout(15_000) })
    t.diagnostic(`auto-resume: first response ${(performance.now() - t0).toFixed(0)} ms`)
    assert.equal(res.status, 200, await res.text())
    const after = await rawInfo(sbx.sandboxId)
    assert.equal(after.state, 'running')
    assert.equal(after.resumedBy, 'traffic')
    assert.ok(new Date(after.endAt) - Date.now() > 250_000, `woken for ${(new Date(after.endAt) - Date.now()) / 1000} s, want ≥ 300`)
    const procs = await sbx.commands.list()
    assert.ok(procs.some((p) => p.pid === server.pid), 'the http.server did not survive the pause')
  })

  test('isRunning() itself wakes a paused sandbox with autoResume', { timeout: 120_000 }, async () => {
    const { sbx } = await createSandbox({ lifecycle: { onTimeout: 'pause', autoResume: true } })
    assert.equal(await sbx.pause(), true)
    assert.equal((await sbx.getInfo()).state, 'paused')
    assert.equal(await sbx.isRunning(), true)
    assert.equal((await sbx.getInfo()).state, 'running')
    assert.equal((await sbx.commands.run('echo awake')).stdout, 'awake\n')
  })

  test('without autoResume a request gets 502 and the sandbox stays paused; connect resumes it', { timeout: 120_000 }, async () => {
    const { sbx } = await createSandbox({ lifecycle: { onTimeout: 'pause' } })
    await sbx.commands.run('python3 -m http.server 8000', { background: true, cwd: HOME })
    await fetchUntilOk(hostUrl(sbx, 8000))
    assert.equal(await sbx.pause(), true)
    const res = await fetch(hostUrl(sbx, 8000), { signal: AbortSignal.timeout(15_000) })
    assert.equal(res.status, 502)
    assert.equal((await sbx.getInfo()).state, 'paused')
    await Sandbox.connect(sbx.sandboxId)
    assert.equal((await fetchUntilOk(hostUrl(sbx, 8000))).status, 200)
  })
})

describe('filesystem-only pause', () => {
  /** Starts a sandbox with a file, an env var and a background process; returns its boot id. */
  async function prepared(opts) {
    const { sbx } = await createSandbox({ envs: { KEPT: 'yes' }, ...opts })
    await sbx.files.write(`${HOME}/kept.txt`, 'kept')
    await sbx.commands.run('sleep 3600', { background: true })
    return { sbx, boot: (await sbx.commands.run(`cat ${BOOT_ID}`)).stdout }
  }

  async function assertRebooted(sbx, oldBoot) {
    assert.equal((await sbx.getInfo()).state, 'running')
    assert.notEqual((await sbx.commands.run(`cat ${BOOT_ID}`)).stdout, oldBoot, 'the boot id did not change: no reboot')
    assert.equal(await sbx.files.read(`${HOME}/kept.txt`), 'kept')
    assert.equal((await sbx.commands.run('echo $KEPT')).stdout, 'yes\n', 'env vars are not back after the reboot')
    const procs = await sbx.commands.list()
    assert.ok(!procs.some((p) => [p.cmd, ...p.args].join(' ').includes('sleep 3600')), 'a process survived the reboot')
  }

  test('pause({keepMemory: false}) then connect: rebooted over its files, same token', { timeout: 120_000 }, async (t) => {
    const { sbx, boot } = await prepared()
    let t0 = performance.now()
    assert.equal(await sbx.pause({ keepMemory: false }), true)
    t.diagnostic(`filesystem-only pause ${(performance.now() - t0).toFixed(0)} ms`)
    const paused = await rawInfo(sbx.sandboxId)
    assert.equal(paused.state, 'paused')
    assert.equal(paused.pausedWith, 'filesystem')
    t0 = performance.now()
    const again = await Sandbox.connect(sbx.sandboxId)
    t.diagnostic(`reboot (connect) ${(performance.now() - t0).toFixed(0)} ms`)
    await assertRebooted(again, boot)
    // The old object still works: the access token is the same.
    assert.equal((await sbx.commands.run('echo same')).stdout, 'same\n')
    assert.equal((await rawInfo(sbx.sandboxId)).reboots, 1)
  })

  test("onTimeout {action: 'pause', keepMemory: false}: paused on timeout, connect reboots it", { timeout: 120_000 }, async () => {
    const { sbx, boot } = await prepared({ timeoutMs: 120_000, lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } })
    await sbx.setTimeout(2_000)
    await waitPaused(sbx.sandboxId)
    assert.equal((await rawInfo(sbx.sandboxId)).pausedWith, 'filesystem')
    // Never woken by traffic.
    assert.equal(await sbx.isRunning(), false)
    await Sandbox.connect(sbx.sandboxId)
    await assertRebooted(sbx, boot)
  })

  test("connect({onResume: 'reboot'}) of a sandbox paused with its memory reboots it", { timeout: 120_000 }, async () => {
    const { sbx, boot } = await prepared()
    assert.equal(await sbx.pause(), true)
    await Sandbox.connect(sbx.sandboxId, { onResume: 'reboot' })
    await assertRebooted(sbx, boot)
  })
})

describe('invalid lifecycle combinations', () => {
  const metadata = { [RUN_META_KEY]: runTag }
  test('the SDK refuses them itself (InvalidArgumentError), nothing sent', async () => {
    for (const lifecycle of [
      { onTimeout: { action: 'pause', keepMemory: false }, autoResume: true },
      { onTimeout: 'kill', autoResume: true },
      { onTimeout: { action: 'kill', keepMemory: true } },
    ]) {
      await assert.rejects(Sandbox.create({ lifecycle, metadata }), InvalidArgumentError, JSON.stringify(lifecycle))
    }
  })

  test('the server refuses them to other clients with 400 in E2B’s words', async () => {
    for (const [body, message] of [
      [{ autoPauseMemory: false }, 'autoPauseMemory=false only applies when autoPause is true.'],
      [{ autoPause: true, autoPauseMemory: false, autoResume: { enabled: true } },
        'autoPauseMemory=false (filesystem-only auto-pause) cannot be combined with autoResume: a filesystem-only snapshot cannot be auto-resumed by traffic and must be resumed explicitly.'],
    ]) {
      const res = await apiFetch('/v2/sandboxes', { method: 'POST', body: JSON.stringify({ templateID: 'base', metadata, ...body }) })
      const got = await jsonBody(res)
      if (got.sandboxID) track(got.sandboxID)
      assert.deepEqual({ status: res.status, got }, { status: 400, got: { code: 400, message } })
    }
  })
})
