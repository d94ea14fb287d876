// Snapshots through the SDK: createSnapshot (unnamed and named),
// Sandbox.create(snapshotId) for several sandboxes that get the snapshot's
// files (and, where its mode is full, the vm's, its processes and memory)
// and diverge, listSnapshots (by sandbox, by name, paginated) with
// IDs identical to createSnapshot's, and deleteSnapshot (refused while a
// sandbox runs from it, true, then false).

import { after, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'

import {
  apiFetch, bootId, createSandbox, HOME, jsonBody, killCreated, readMemoryServer, runsMemoryServer, runTag, RUN_META_KEY, startMemoryServer, track,
} from './helpers.mjs'

const snapshots = new Set()
after(async () => {
  await killCreated()
  await Promise.all([...snapshots].map((id) => Sandbox.deleteSnapshot(id).catch(() => {})))
})

/** Sandbox.create from a snapshot, tagged and tracked like createSandbox's. */
async function fromSnapshot(snapshotId, opts = {}) {
  const t0 = performance.now()
  const sbx = await Sandbox.create(snapshotId, { ...opts, metadata: { [RUN_META_KEY]: runTag } })
  track(sbx.sandboxId)
  return { sbx, ms: performance.now() - t0 }
}

async function listAllSnapshots(opts) {
  const paginator = Sandbox.listSnapshots(opts)
  const out = []
  while (paginator.hasNext) out.push(...(await paginator.nextItems()))
  return out
}

describe('snapshots', () => {
  test('createSnapshot; two sandboxes from it have its files as they were, and what its mode says of its processes, and diverge; the source runs on', { timeout: 180_000 }, async (t) => {
    const { sbx } = await createSandbox({ timeoutMs: 120_000 })
    await sbx.commands.run(`mkdir -p ${HOME}/proj/src && echo 'print(1)' > ${HOME}/proj/src/main.py && echo v1 > ${HOME}/proj/VERSION`)
    const mem = await startMemoryServer(sbx)
    const sourceBoot = await bootId(sbx)

    let t0 = performance.now()
    const snap = await sbx.createSnapshot()
    t.diagnostic(`snapshot create ${(performance.now() - t0).toFixed(0)} ms`)
    snapshots.add(snap.snapshotId)
    assert.match(snap.snapshotId, /^[a-z0-9]+:default$/)
    assert.deepEqual(snap.names, [])
    assert.equal((await sbx.getInfo()).state, 'running')
    await sbx.files.write(`${HOME}/proj/VERSION`, 'v2')
    // What the snapshot holds: the SDK does not show it; our listing does.
    const listed = await jsonBody(await apiFetch(`/snapshots?sandboxID=${sbx.sandboxId}`))
    const { mode } = listed.find((s) => s.snapshotID === snap.snapshotId)
    assert.ok(mode === 'full' || mode === 'filesystem', `mode ${mode}`)

    const { sbx: a, ms } = await fromSnapshot(snap.snapshotId)
    t.diagnostic(`create from snapshot (${mode}) ${ms.toFixed(0)} ms`)
    const { sbx: b } = await fromSnapshot(snap.snapshotId)
    for (const s of [a, b]) {
      assert.equal((await s.commands.run(`python3 ${HOME}/proj/src/main.py`)).stdout, '1\n')
      assert.equal(await s.files.read(`${HOME}/proj/VERSION`), 'v1\n')
      if (mode === 'full') {
        // The source's server with its memory as at the snapshot, in each
        // on its own: both answer the request after the source's last.
        assert.equal(await runsMemoryServer(s, mem.pid), true, `a full snapshot lost the source’s server (pid ${mem.pid})`)
        assert.deepEqual(await readMemoryServer(s), { secret: mem.secret, count: mem.count + 1 })
        assert.equal(await bootId(s), sourceBoot, 'a full snapshot goes on in the source’s boot')
      } else {
        assert.equal(await runsMemoryServer(s, mem.pid), false, 'a filesystem snapshot runs the source’s processes')
        assert.notEqual(await bootId(s), sourceBoot, 'a filesystem snapshot boots afresh')
      }
    }
    await a.files.write(`${HOME}/proj/VERSION`, 'a')
    assert.equal(await b.files.read(`${HOME}/proj/VERSION`), 'v1\n')
    assert.equal(await sbx.files.read(`${HOME}/proj/VERSION`), 'v2')
    assert.equal((await a.getInfo()).name, 'base', 'a sandbox from a snapshot runs its template')
  })

  test('named snapshot; listSnapshots by sandbox, by name and paginated; deleteSnapshot', { timeout: 180_000 }, async () => {
    const { sbx } = await createSandbox({ timeoutMs: 120_000 })
    const name = `sdk-${runTag}-${process.env.SDK_TEST_MODE}`
    const unnamed = await sbx.createSnapshot()
    snapshots.add(unnamed.snapshotId)
    const named = await Sandbox.createSnapshot(sbx.sandboxId, { name })
    snapshots.add(named.snapshotId)
    assert.equal(named.snapshotId, `${name}:default`)
    assert.ok(named.names.some((n) => n.includes(name)), `names ${named.names}`)

    const bySandbox = await listAllSnapshots({ sandboxId: sbx.sandboxId })
    assert.deepEqual(bySandbox.map((s) => s.snapshotId), [named.snapshotId, unnamed.snapshotId], 'newest first, IDs as createSnapshot gave them')
    assert.deepEqual((await sbx.listSnapshots().nextItems()).map((s) => s.snapshotId), [named.snapshotId, unnamed.snapshotId])
    const paginator = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId, limit: 1 })
    assert.deepEqual((await paginator.nextItems()).map((s) => s.snapshotId), [named.snapshotId])
    assert.equal(paginator.hasNext, true)
    assert.deepEqual((await paginator.nextItems()).map((s) => s.snapshotId), [unnamed.snapshotId])
    assert.equal(paginator.hasNext, false)
    assert.deepEqual((await listAllSnapshots({ name })).map((s) => s.snapshotId), [named.snapshotId])
    assert.deepEqual(await listAllSnapshots({ name: `no-such-${runTag}` }), [])

    // By name, as Sandbox.create takes it; not deletable while it runs.
    const { sbx: user } = await fromSnapshot(name)
    await assert.rejects(Sandbox.deleteSnapshot(named.snapshotId), (err) => {
      assert.ok(err instanceof SandboxError)
      assert.match(err.message, /^400: cannot delete template '.*' because there are running sandboxes using it$/)
      return true
    })
    await user.kill()
    assert.equal(await Sandbox.deleteSnapshot(named.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(named.snapshotId), false)
    assert.deepEqual(await listAllSnapshots({ name }), [])
    await assert.rejects(Sandbox.create(named.snapshotId, { metadata: { [RUN_META_KEY]: runTag } }), /400: template '.*' not found/)
    assert.equal(await Sandbox.deleteSnapshot(unnamed.snapshotId), true)
  })

  test('createSnapshot of a paused sandbox → 409; of a killed one → SandboxNotFoundError', { timeout: 120_000 }, async () => {
    const { sbx } = await createSandbox()
    assert.equal(await sbx.pause(), true)
    await assert.rejects(sbx.createSnapshot(), /409: Sandbox '.*' cannot be snapshotted while in 'paused' state/)
    await sbx.kill()
    await assert.rejects(sbx.createSnapshot(), SandboxNotFoundError)
  })
})
