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

describe(`allowPublicTraffic: false (${mode} mode)`, { timeout: 120_000 }, () => {
  let priv
  before(async () => {
    priv = (await createSandbox({ network: { allowPublicTraffic: false } })).sbx
    await priv.commands.run('mkdir -p /tmp/www && echo private > /tmp/www/index.html')
    await priv.commands.run('cd /tmp/www && python3 -m http.server 8000', { background: true })
  })

  test('create returns a traffic access token', () => {
    assert.ok(priv.trafficAccessToken, 'no trafficAccessToken on the sandbox')
  })

  test('a user port needs e2b-traffic-access-token: 403 without, 200 with', async () => {
    const url = hostUrl(priv, 8000, '/index.html')
    const withToken = { 'e2b-traffic-access-token': priv.trafficAccessToken }
    // Wait for the server with the token, then check the refusal.
    const deadline = Date.now() + 10_000
    let res
    for (;;) {
      res = await fetch(url, { headers: withToken, signal: AbortSignal.timeout(5_000) })
      if (res.status === 200 || Date.now() > deadline) break
      await res.body?.cancel()
      await new Promise((r) => setTimeout(r, 250))
    }
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'private\n')
    const denied = await fetch(url, { signal: AbortSignal.timeout(5_000) })
    assert.equal(denied.status, 403)
    const body = await jsonBody(denied)
    assert.equal(body.code, 403)
    assert.equal(body.sandboxId, priv.sandboxId)
  })

  test('envd still works without the traffic token (it has its own)', async () => {
    const r = await priv.commands.run('echo envd-ok')
    assert.equal(r.stdout.trim(), 'envd-ok')
  })
})
