// No session length limit: a server started with --max-timeout 0 (run.mjs
// starts one for this file alone) takes a 30-day timeout with a real endAt;
// an API key created with its own limit (keys create --max-timeout) is held
// to it there.

import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { after, describe, test } from 'node:test'
import { Sandbox } from 'e2b'

import { RUN_META_KEY, createSandbox, killCreated, runTag, track } from './helpers.mjs'
import { resolveServerBin } from '../server-process.mjs'

const HOUR = 3600_000
const DAY = 24 * HOUR
const dataDir = process.env.SDK_TEST_DATA_DIR

describe('serve --max-timeout 0', () => {
  after(killCreated)

  test('a 30-day timeout is accepted and getInfo().endAt is 30 days out', async () => {
    const { sbx } = await createSandbox({ timeoutMs: 30 * DAY })
    const endAt = Date.parse((await sbx.getInfo()).endAt)
    assert.ok(Math.abs(endAt - (Date.now() + 30 * DAY)) < 60_000, `endAt ${new Date(endAt).toISOString()} is not 30 days out`)
  })

  test('a key with a 1 h limit is held to it on create and setTimeout', async () => {
    assert.ok(dataDir, 'SDK_TEST_DATA_DIR is not set (run through test/sdk/run.mjs)')
    const bin = resolveServerBin()
    const created = execFileSync(bin, ['keys', 'create', '--data-dir', dataDir, '--name', `sdk-1h-${runTag}`, '--max-timeout', '1h'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    const key = created.trim()
    try {
      const opts = { apiKey: key, metadata: { [RUN_META_KEY]: runTag } }
      const limit = /Timeout cannot be greater than 1 hours \(this API key's limit\)/
      await assert.rejects(Sandbox.create({ ...opts, timeoutMs: 2 * HOUR }), limit)
      const sbx = await Sandbox.create({ ...opts, timeoutMs: HOUR })
      track(sbx.sandboxId)
      await assert.rejects(sbx.setTimeout(2 * HOUR), limit)
      await sbx.setTimeout(HOUR)
    } finally {
      const list = JSON.parse(execFileSync(bin, ['keys', 'list', '--data-dir', dataDir, '--json'], { encoding: 'utf8' }))
      const mine = list.find((k) => k.name === `sdk-1h-${runTag}`)
      assert.equal(mine?.maxTimeout, 3600, `keys list --json: ${JSON.stringify(mine)}`)
      execFileSync(bin, ['keys', 'revoke', '--data-dir', dataDir, mine.id])
    }
  })
})
