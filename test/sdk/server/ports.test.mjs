// User ports through getHost(port): <port>-<id>.<domain>, routed by host.
// Header mode: http://<port>-<id>.localhost:<server port>; TLS mode:
// https://<port>-<id>.sandbox.test:<server port>. The runner's DNS preload
// resolves both to 127.0.0.1.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'

import { createSandbox, fetchUntilOk, hostUrl, jsonBody, killCreated, mode } from './helpers.mjs'

let sbx
before(async () => {
  sbx = (await createSandbox()).sbx
  await sbx.commands.run('mkdir -p /tmp/www && echo served-by-8000 > /tmp/www/index.html')
  await sbx.commands.run('cd /tmp/www && python3 -m http.server 8000', { background: true })
  await sbx.commands.run('cd /tmp/www && python3 -m http.server 8001 --bind 127.0.0.1', { background: true })
})
after(killCreated)

describe(`getHost(port) (${mode} mode)`, { timeout: 120_000 }, () => {
  test('getHost has the form <port>-<id>.<E2B_DOMAIN>', () => {
    assert.equal(sbx.getHost(8000), `8000-${sbx.sandboxId}.${process.env.E2B_DOMAIN}`)
  })

  test('python3 -m http.server 8000 answers 200 through getHost(8000)', async () => {
    const res = await fetchUntilOk(hostUrl(sbx, 8000, '/index.html'))
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'served-by-8000\n')
  })

  test('a server bound only to 127.0.0.1 (port 8001) is reachable too', async () => {
    const res = await fetchUntilOk(hostUrl(sbx, 8001, '/index.html'))
    assert.equal(res.status, 200, `status ${res.status}: ${await res.clone().text()}`)
    assert.equal(await res.text(), 'served-by-8000\n')
  })

  test('a closed port → 502 JSON "port is not open"', async () => {
    const res = await fetch(hostUrl(sbx, 8002), { signal: AbortSignal.timeout(10_000) })
    assert.equal(res.status, 502)
    const body = await jsonBody(res)
    assert.equal(body.code, 502)
    assert.equal(body.sandboxId, sbx.sandboxId)
    assert.match(body.message, /port is not open/)
  })

  test('after kill → 502 JSON {sandboxId, message: "The sandbox was not found", code: 502}', async () => {
    await fetchUntilOk(hostUrl(sbx, 8000))
    assert.equal(await sbx.kill(), true)
    const res = await fetch(hostUrl(sbx, 8000), { signal: AbortSignal.timeout(10_000) })
    assert.equal(res.status, 502)
    const body = await jsonBody(res)
    assert.equal(body.message, 'The sandbox was not found')
    assert.equal(body.code, 502)
    assert.equal(body.sandboxId, sbx.sandboxId)
  })
})
