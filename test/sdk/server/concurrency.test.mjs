// Many sandboxes at once: 20 concurrent Sandbox.create() all succeed, are
// distinct and usable, and all die on kill.

import { after, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

import { createSandbox, killCreated } from './helpers.mjs'

const N = 20

after(killCreated)

test(`${N} concurrent Sandbox.create() all succeed`, { timeout: 240_000 }, async (t) => {
  const t0 = performance.now()
  const results = await Promise.allSettled(Array.from({ length: N }, () => createSandbox()))
  const wall = performance.now() - t0
  const failed = results.filter((r) => r.status === 'rejected').map((r) => String(r.reason?.message ?? r.reason))
  const ok = results.filter((r) => r.status === 'fulfilled').map((r) => r.value)
  const lat = ok.map((r) => r.ms).sort((x, y) => x - y)
  t.diagnostic(
    `${ok.length}/${N} created in ${wall.toFixed(0)} ms wall; per-create min ${lat[0]?.toFixed(0)} ` +
      `median ${lat[Math.floor(lat.length / 2)]?.toFixed(0)} max ${lat.at(-1)?.toFixed(0)} ms`
  )
  assert.deepEqual(failed, [], `${failed.length} of ${N} creates failed`)

  const ids = ok.map((r) => r.sbx.sandboxId)
  assert.equal(new Set(ids).size, N, 'sandbox IDs are distinct')

  const outs = await Promise.all(ok.map((r, i) => r.sbx.commands.run(`echo sbx-${i}`)))
  assert.deepEqual(
    outs.map((o) => o.stdout),
    ok.map((_, i) => `sbx-${i}\n`)
  )

  const killed = await Promise.all(ids.map((id) => Sandbox.kill(id)))
  assert.deepEqual(killed, ids.map(() => true))
  const running = await Promise.all(ok.map((r) => r.sbx.isRunning()))
  assert.deepEqual(running, ids.map(() => false))
})
