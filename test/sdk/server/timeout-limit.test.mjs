// The operator's session length: a server started with --max-timeout 2h
// (run.mjs starts one for this file alone) refuses longer timeouts on
// create and setTimeout with the limit in the message, as E2B does, and
// never clamps them.

import assert from 'node:assert/strict'
import { after, describe, test } from 'node:test'

import { createSandbox, killCreated } from './helpers.mjs'

const HOUR = 3600_000
const tooLong = /Timeout cannot be greater than 2 hours/

describe('serve --max-timeout 2h', () => {
  after(killCreated)

  test('Sandbox.create({timeoutMs: 3 h}) fails naming the limit', async () => {
    await assert.rejects(createSandbox({ timeoutMs: 3 * HOUR }), tooLong)
  })

  test('2 h works, endAt 2 h out; setTimeout(3 h) fails naming the limit, setTimeout(2 h) works', async () => {
    const { sbx } = await createSandbox({ timeoutMs: 2 * HOUR })
    const endAt = Date.parse((await sbx.getInfo()).endAt)
    assert.ok(Math.abs(endAt - (Date.now() + 2 * HOUR)) < 60_000, `endAt ${new Date(endAt).toISOString()} is not 2 h out`)
    await assert.rejects(sbx.setTimeout(3 * HOUR), tooLong)
    assert.equal(Date.parse((await sbx.getInfo()).endAt), endAt, 'a refused setTimeout changed endAt')
    await sbx.setTimeout(2 * HOUR)
  })
})
