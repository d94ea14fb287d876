// Pauses that keep memory on a server that moves them to disk at once
// (run.mjs starts it alone with --pause-in-ram 0). Where the backend saves
// memory (a snapshot's mode is full: the vm), a paused sandbox is saved
// with its processes and memory and stopped, so that nothing of it runs on
// the host any more (no process there names it; while it ran, its VM's
// QEMU did); connect, or traffic with autoResume, restores it where it was:
// the same process with the same memory, in the same boot, files kept,
// its volumes too (a VM's, which nothing else mounts meanwhile). Elsewhere
// (the jail) it stays frozen in RAM and resumes from there.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { Sandbox, Volume, VolumeError } from 'e2b'

import {
  apiFetch, backend, bootId, createSandbox, HOME, hostUrl, jsonBody, killCreated, MEMORY_PORT, readMemoryServer, runsMemoryServer, runTag, startMemoryServer,
  waitFor,
} from './helpers.mjs'

after(killCreated)

/** GET /sandboxes/{id} raw, for our extension fields. */
async function rawInfo(id) {
  const res = await apiFetch(`/sandboxes/${id}`)
  assert.equal(res.status, 200)
  return jsonBody(res)
}

/** The pids of the host's processes whose command line names id. */
function hostProcessesNaming(id) {
  const pids = []
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'latin1').includes(id)) pids.push(Number(pid))
    } catch {
      // gone meanwhile
    }
  }
  return pids
}

/** Whether the backend saves memory: what a snapshot's mode says (the snapshot is deleted again). */
async function savesMemory() {
  const { sbx } = await createSandbox()
  const res = await apiFetch(`/sandboxes/${sbx.sandboxId}/snapshots`, { method: 'POST', body: '{}' })
  const snap = await jsonBody(res)
  assert.equal(res.status, 201, JSON.stringify(snap))
  await sbx.kill()
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotID), true)
  return snap.mode === 'full'
}

/** Waits until sandbox id is paused as pausedWith says, and returns its raw info. */
async function waitPausedWith(id, pausedWith) {
  return waitFor(async () => {
    const info = await rawInfo(id)
    return info.state === 'paused' && info.pausedWith === pausedWith && info
  }, { timeoutMs: 30_000, intervalMs: 250, what: `${id} paused ${pausedWith}` })
}

describe('pause with --pause-in-ram 0', () => {
  let toDisk
  before(async () => {
    toDisk = await savesMemory()
  })

  /** A sandbox with a file and the memory server; its boot id and the server's state. */
  async function prepared(opts) {
    const { sbx } = await createSandbox({ timeoutMs: 120_000, ...opts })
    await sbx.files.write(`${HOME}/kept.txt`, 'kept')
    const mem = await startMemoryServer(sbx)
    const boot = await bootId(sbx)
    if (toDisk) {
      // The positive control of the check below: while it runs, a host
      // process (its QEMU, -name agent-sandbox-<id>) names it.
      assert.notDeepEqual(hostProcessesNaming(sbx.sandboxId), [], 'no host process names the running sandbox')
    }
    return { sbx, mem, boot }
  }

  /** Waits for the pause to land where the backend keeps memory; checks it. */
  async function assertParked(sbx) {
    if (!toDisk) {
      // Give the manager's ticks a chance to move it anyway.
      await new Promise((r) => setTimeout(r, 3_000))
      assert.equal((await rawInfo(sbx.sandboxId)).pausedWith, 'memory-in-ram')
      return
    }
    await waitPausedWith(sbx.sandboxId, 'memory-on-disk')
    assert.deepEqual(hostProcessesNaming(sbx.sandboxId), [], 'a sandbox paused to disk still runs on the host')
  }

  /** After the resume: the same process with its memory, in the same boot, files kept. */
  async function assertRestored(sbx, { mem, boot }, resumedBy) {
    const info = await rawInfo(sbx.sandboxId)
    assert.equal(info.state, 'running')
    assert.equal(info.resumedBy, resumedBy)
    assert.equal(info.pausedWith, undefined)
    assert.equal(await runsMemoryServer(sbx, mem.pid), true, `the server (pid ${mem.pid}) did not survive the pause`)
    assert.deepEqual(await readMemoryServer(sbx), { secret: mem.secret, count: mem.count + 1 }, 'the server lost its memory')
    assert.equal(await bootId(sbx), boot, 'a resume that keeps memory goes on in the same boot')
    assert.equal(await sbx.files.read(`${HOME}/kept.txt`), 'kept')
  }

  test('pause(): saved with its memory and stopped where the backend can; connect restores it', { timeout: 180_000 }, async (t) => {
    const state = await prepared()
    const { sbx } = state
    assert.equal(await sbx.pause(), true)
    await assertParked(sbx)
    const t0 = performance.now()
    await Sandbox.connect(sbx.sandboxId)
    t.diagnostic(`resume (connect) from ${toDisk ? 'disk' : 'RAM'} ${(performance.now() - t0).toFixed(0)} ms`)
    await assertRestored(sbx, state, 'connect')
  })

  test('onTimeout pause + autoResume: paused on timeout (to disk where the backend can), a request to getHost wakes it', { timeout: 180_000 }, async (t) => {
    const state = await prepared({ lifecycle: { onTimeout: 'pause', autoResume: true } })
    const { sbx, mem } = state
    await sbx.setTimeout(2_000)
    await assertParked(sbx)
    const t0 = performance.now()
    const res = await fetch(hostUrl(sbx, MEMORY_PORT), { signal: AbortSignal.timeout(60_000) })
    const text = await res.text()
    t.diagnostic(`auto-resume from ${toDisk ? 'disk' : 'RAM'}: first response ${(performance.now() - t0).toFixed(0)} ms`)
    assert.equal(res.status, 200, text)
    assert.equal(text, `${mem.secret} ${mem.count + 1}`, 'the waking request did not reach the server’s memory')
    // assertRestored's request is the next one.
    await assertRestored(sbx, { ...state, mem: { ...mem, count: mem.count + 1 } }, 'traffic')
  })

  test('a sandbox with a volume keeps it through the pause: what it wrote last is there after the resume', { timeout: 180_000 }, async () => {
    const v = await Volume.create(`sdk-${runTag}-pause-disk`)
    try {
      const state = await prepared({ volumeMounts: { '/data': v } })
      const { sbx } = state
      // Written just before the pause: in the guest's page cache, if it
      // has one, not yet on the volume's disk.
      await sbx.commands.run('echo before the pause > /data/last.txt')
      assert.equal(await sbx.pause(), true)
      await assertParked(sbx)
      if (backend === 'vm') {
        // Its saved memory has the volume mounted: nothing else may, until
        // it is killed.
        await assert.rejects(v.readFile('/last.txt'), (err) => err instanceof VolumeError && /^409: /.test(err.message))
      }
      await Sandbox.connect(sbx.sandboxId)
      await assertRestored(sbx, state, 'connect')
      assert.equal(await sbx.files.read('/data/last.txt'), 'before the pause\n')
      await sbx.kill()
      assert.equal(await v.readFile('/last.txt'), 'before the pause\n')
    } finally {
      await Volume.destroy(v.volumeId)
    }
  })
})
