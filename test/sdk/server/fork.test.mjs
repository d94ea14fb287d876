// Fork through the SDK: sandbox.fork(), Sandbox.fork(id, {count}), the
// children's file system at the fork and their independence afterwards,
// the parent running on, and the errors (count out of range, unknown
// sandbox). What a child keeps of the parent's processes depends on the
// backend: the response's `mode` (our extension) says "full" (processes
// and memory: the vm) or "filesystem" (booted afresh over the parent's
// files: the jail), and the test holds each child to what it says.

import { after, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, SandboxError, SandboxNotFoundError } from 'e2b'

import {
  apiFetch, bootId, createSandbox, HOME, jsonBody, killCreated, readMemoryServer, runsMemoryServer, runTag, RUN_META_KEY, startMemoryServer, track,
} from './helpers.mjs'

after(killCreated)

describe('fork', () => {
  test('sandbox.fork(): the child has the parent’s files as at the fork, diverges, and the parent runs on', { timeout: 120_000 }, async (t) => {
    const { sbx } = await createSandbox({ timeoutMs: 120_000, metadata: { purpose: 'fork' } })
    await sbx.files.write(`${HOME}/state.txt`, 'before')
    await sbx.commands.run(`mkdir -p ${HOME}/tree/a && echo deep > ${HOME}/tree/a/f && rm -f /home/user/.bashrc`)

    const t0 = performance.now()
    const forks = await sbx.fork({ timeoutMs: 60_000 })
    t.diagnostic(`fork ×1 ${(performance.now() - t0).toFixed(0)} ms`)
    assert.equal(forks.length, 1)
    const [child] = forks
    assert.ok(child instanceof Sandbox, `fork result: ${child}`)
    track(child.sandboxId)
    assert.notEqual(child.sandboxId, sbx.sandboxId)

    assert.equal(await child.files.read(`${HOME}/state.txt`), 'before')
    assert.equal(await child.files.read(`${HOME}/tree/a/f`), 'deep\n')
    assert.equal(await child.files.exists(`${HOME}/.bashrc`), false, 'a file deleted before the fork is back in the child')

    await child.files.write(`${HOME}/state.txt`, 'child')
    await sbx.files.write(`${HOME}/state.txt`, 'parent')
    await sbx.files.write(`${HOME}/parent-only.txt`, 'x')
    assert.equal(await child.files.read(`${HOME}/state.txt`), 'child')
    assert.equal(await sbx.files.read(`${HOME}/state.txt`), 'parent')
    assert.equal(await child.files.exists(`${HOME}/parent-only.txt`), false)

    const parentInfo = await sbx.getInfo()
    assert.equal(parentInfo.state, 'running')
    const info = await child.getInfo()
    assert.equal(info.state, 'running')
    assert.equal(info.metadata.purpose, 'fork', 'the child inherits the parent’s metadata')
    const ttl = (info.endAt - info.startedAt) / 1000
    assert.ok(ttl > 50 && ttl < 70, `timeoutMs 60000, got endAt - startedAt = ${ttl} s`)
  })

  test('Sandbox.fork(id, {count: 3}): three distinct running children, each on its own', { timeout: 180_000 }, async (t) => {
    const { sbx } = await createSandbox({ timeoutMs: 120_000 })
    await sbx.files.write(`${HOME}/shared.txt`, 'from the parent')
    const t0 = performance.now()
    const forks = await Sandbox.fork(sbx.sandboxId, { count: 3, timeoutMs: 60_000 })
    t.diagnostic(`fork ×3 ${(performance.now() - t0).toFixed(0)} ms`)
    for (const f of forks) if (f instanceof Sandbox) track(f.sandboxId)
    assert.equal(forks.length, 3)
    for (const f of forks) assert.ok(f instanceof Sandbox, `a fork failed: ${f}`)
    const ids = new Set([sbx.sandboxId, ...forks.map((f) => f.sandboxId)])
    assert.equal(ids.size, 4, 'fork IDs are not distinct')

    await Promise.all(forks.map((f) => f.files.write(`${HOME}/who.txt`, f.sandboxId)))
    for (const f of forks) {
      assert.equal(await f.files.read(`${HOME}/shared.txt`), 'from the parent')
      assert.equal(await f.files.read(`${HOME}/who.txt`), f.sandboxId)
    }
    assert.equal(await sbx.files.exists(`${HOME}/who.txt`), false)
    const listed = await Sandbox.list({ query: { metadata: { [RUN_META_KEY]: runTag }, state: ['running'] } }).nextItems()
    for (const f of forks) assert.ok(listed.some((s) => s.sandboxId === f.sandboxId), `fork ${f.sandboxId} is not listed`)
  })

  test('the response says what the children kept (mode), and every child keeps exactly that', { timeout: 180_000 }, async (t) => {
    const { sbx } = await createSandbox({ timeoutMs: 120_000 })
    const mem = await startMemoryServer(sbx)
    const parentBoot = await bootId(sbx)
    const t0 = performance.now()
    const res = await apiFetch(`/sandboxes/${sbx.sandboxId}/fork`, { method: 'POST', body: JSON.stringify({ timeout: 60, count: 2 }) })
    const body = await jsonBody(res)
    t.diagnostic(`fork ×2 of a sandbox running a server ${(performance.now() - t0).toFixed(0)} ms`)
    for (const e of body) if (e.sandbox) track(e.sandbox.sandboxID)
    assert.equal(res.status, 201, JSON.stringify(body))
    assert.equal(body.length, 2)
    const [{ mode }] = body
    assert.ok(mode === 'filesystem' || mode === 'full', `mode ${mode}`)
    assert.deepEqual(body.map((e) => e.mode), [mode, mode], 'children of one fork differ in what they kept')
    for (const { sandbox } of body) {
      const child = await Sandbox.connect(sandbox.sandboxID)
      const running = await runsMemoryServer(child, mem.pid)
      const childBoot = await bootId(child)
      if (mode === 'filesystem') {
        assert.equal(running, false, 'a filesystem fork runs the parent’s processes')
        assert.notEqual(childBoot, parentBoot, 'a filesystem fork boots afresh: its boot id must differ')
        continue
      }
      // The parent's process, with the parent's memory as at the fork
      // (its secret, its count), going on in the child alone: each
      // child's first request is the one after the parent's last.
      assert.equal(running, true, `a full fork lost the parent’s server (pid ${mem.pid})`)
      assert.deepEqual(await readMemoryServer(child), { secret: mem.secret, count: mem.count + 1 }, 'the child’s server has not the parent’s memory')
      assert.equal(childBoot, parentBoot, 'a full fork goes on in the parent’s boot')
    }
    assert.deepEqual(await readMemoryServer(sbx), { secret: mem.secret, count: mem.count + 1 }, 'the parent’s server after the fork')
  })

  test('count outside 1..100 → 400 from the server, nothing forked', { timeout: 120_000 }, async () => {
    const { sbx } = await createSandbox()
    // 2.51 does not check count itself: the server's 400 surfaces as a SandboxError.
    for (const [count, msg] of [[0, 'Count must be at least 1'], [101, 'Count cannot be greater than 100']]) {
      await assert.rejects(Sandbox.fork(sbx.sandboxId, { count }), (err) => {
        assert.ok(err instanceof SandboxError, `${err.name}: ${err.message}`)
        assert.equal(err.message, `400: ${msg}`)
        return true
      })
    }
  })

  test('fork of a killed sandbox → SandboxNotFoundError', { timeout: 120_000 }, async () => {
    const { sbx } = await createSandbox()
    await sbx.kill()
    await assert.rejects(sbx.fork(), SandboxNotFoundError)
  })
})
