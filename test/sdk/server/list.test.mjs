// Sandbox.list(): metadata filter (with the SDK's layered encoding), order,
// pagination, startedAfter, state. Every query is scoped by a metadata value
// unique to this file so other test files' sandboxes do not interfere.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { Sandbox } from 'e2b'

import { createSandbox, killCreated, listAll, sleep } from './helpers.mjs'

const group = `list-${randomBytes(6).toString('hex')}`
const ODD_KEY = 'key with space & amp'
const ODD_VALUE = 'value with space & more=x'

let a
let b
let infoA
let infoB

before(async () => {
  a = (await createSandbox({ metadata: { group, which: 'a', [ODD_KEY]: ODD_VALUE } })).sbx
  await sleep(50) // distinct startedAt even at ms precision
  b = (await createSandbox({ metadata: { group, which: 'b' } })).sbx
  infoA = await a.getInfo()
  infoB = await b.getInfo()
})
after(killCreated)

const ids = (items) => items.map((s) => s.sandboxId)

describe('Sandbox.list', { timeout: 180_000 }, () => {
  test('metadata filter finds only the matching sandbox', async () => {
    assert.deepEqual(ids(await listAll({ query: { metadata: { group, which: 'a' } } })), [a.sandboxId])
    assert.deepEqual(ids(await listAll({ query: { metadata: { group, which: 'b' } } })), [b.sandboxId])
    assert.deepEqual(ids(await listAll({ query: { metadata: { group, which: 'c' } } })), [])
  })

  test('metadata keys and values with spaces, & and = are matched exactly', async () => {
    const found = await listAll({ query: { metadata: { [ODD_KEY]: ODD_VALUE, group } } })
    assert.deepEqual(ids(found), [a.sandboxId])
    assert.equal(found[0].metadata[ODD_KEY], ODD_VALUE)
    assert.equal(found[0].metadata.which, 'a')
    assert.deepEqual(ids(await listAll({ query: { metadata: { [ODD_KEY]: 'value with space', group } } })), [])
  })

  test('listed fields: template, name, state, dates, metadata', async () => {
    const [item] = await listAll({ query: { metadata: { group, which: 'b' } } })
    assert.equal(item.sandboxId, b.sandboxId)
    assert.equal(item.templateId, infoB.templateId)
    assert.equal(item.name, 'base')
    assert.equal(item.state, 'running')
    assert.equal(item.startedAt.getTime(), infoB.startedAt.getTime())
    assert.ok(item.endAt > item.startedAt)
    assert.deepEqual(item.metadata, infoB.metadata)
  })

  test('default order is newest first; order asc is oldest first', async () => {
    assert.ok(infoB.startedAt > infoA.startedAt, `b started ${infoB.startedAt.toISOString()}, a ${infoA.startedAt.toISOString()}`)
    assert.deepEqual(ids(await listAll({ query: { metadata: { group } } })), [b.sandboxId, a.sandboxId])
    assert.deepEqual(ids(await listAll({ query: { metadata: { group } }, order: 'asc' })), [a.sandboxId, b.sandboxId])
  })

  test('limit 1 pages: newest, then older; hasNext true then false', async () => {
    const paginator = Sandbox.list({ query: { metadata: { group } }, limit: 1 })
    assert.equal(paginator.hasNext, true)
    const page1 = await paginator.nextItems()
    assert.deepEqual(ids(page1), [b.sandboxId])
    assert.equal(paginator.hasNext, true, 'a second page exists')
    const page2 = await paginator.nextItems()
    assert.deepEqual(ids(page2), [a.sandboxId])
    assert.equal(paginator.hasNext, false, 'no token after the last page')
  })

  test('startedAfter is an inclusive lower bound', async () => {
    const q = (startedAfter) => listAll({ query: { metadata: { group }, startedAfter } })
    assert.deepEqual(ids(await q(infoA.startedAt)), [b.sandboxId, a.sandboxId])
    assert.deepEqual(ids(await q(infoB.startedAt)), [b.sandboxId])
    assert.deepEqual(ids(await q(new Date(infoB.startedAt.getTime() + 1_000))), [])
  })

  test('state filter: paused vs running; killed sandboxes disappear', async () => {
    assert.equal(await a.pause(), true)
    const q = (state) => listAll({ query: { metadata: { group }, state } })
    assert.deepEqual(ids(await q(['paused'])), [a.sandboxId])
    assert.deepEqual(ids(await q(['running'])), [b.sandboxId])
    const both = await q(['running', 'paused'])
    assert.deepEqual(ids(both), [b.sandboxId, a.sandboxId])
    assert.equal(both.find((s) => s.sandboxId === a.sandboxId).state, 'paused')
    const byDefault = await listAll({ query: { metadata: { group } } })
    assert.deepEqual(ids(byDefault), [b.sandboxId, a.sandboxId], 'default lists both states')

    assert.equal(await Sandbox.kill(a.sandboxId), true, 'a paused sandbox can be killed')
    assert.deepEqual(ids(await listAll({ query: { metadata: { group } } })), [b.sandboxId])
  })
})
