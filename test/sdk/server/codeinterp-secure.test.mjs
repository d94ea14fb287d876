// The access token through the official SDKs: a secure code-interpreter
// sandbox works through @e2b/code-interpreter unchanged, while a raw
// request to its port 49999 without the sandbox's access token gets envd's
// 401, routed by host (<port>-<id>.<domain>) and by the E2b-Sandbox-*
// headers; every create and connect response, v1 and v2, secure or not,
// carries envdAccessToken, and the SDK works with a sandbox created with
// secure: false (it sends the token whenever the response has one).

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import { Sandbox } from 'e2b'

import { RUN_META_KEY, apiFetch, hostScheme, hostUrl, jsonBody, killCreated, mode, runTag, track } from './helpers.mjs'

const TEMPLATE = 'code-interpreter-v1'
const PORT = 49999
const TOKEN_RE = /^[0-9a-f]{64}$/
// What envd answers without its token (spec §3.2).
const UNAUTHORIZED = { code: 401, message: 'unauthorized access, please provide a valid access token or method signing if supported' }

after(killCreated)

/** URL of path on port 49999 of sbx, and the headers that route it, by host or by headers. */
function route(sbx, routing, path) {
  if (routing === 'host') return { url: hostUrl(sbx, PORT, path), headers: {} }
  // sandbox.<domain> is header-routable in both modes (and in the TLS certificate).
  return {
    url: `${hostScheme}://sandbox.${process.env.E2B_DOMAIN}${path}`,
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(PORT) },
  }
}

/** POST /execute {code} on 49999 of sbx; token undefined sends none. Returns { status, body }. */
async function execute(sbx, routing, code, token) {
  const { url, headers } = route(sbx, routing, '/execute')
  if (token !== undefined) headers['X-Access-Token'] = token
  const res = await fetch(url, {
    method: 'POST',
    headers: { ...headers, 'Content-Type': 'application/json' },
    body: JSON.stringify({ code }),
    signal: AbortSignal.timeout(60_000),
  })
  return { status: res.status, type: res.headers.get('content-type'), body: await res.text() }
}

/** The text of the main result in an /execute NDJSON body. */
function resultText(ndjson) {
  const lines = ndjson.split('\n').filter(Boolean).map((l) => JSON.parse(l))
  return lines.find((l) => l.type === 'result')?.text
}

/** A raw v1 or v2 create; returns the parsed 201 body. */
async function rawCreate(path, body) {
  const res = await apiFetch(path, { method: 'POST', body: JSON.stringify({ ...body, metadata: { [RUN_META_KEY]: runTag } }) })
  const sb = await jsonBody(res)
  assert.equal(res.status, 201, JSON.stringify(sb))
  track(sb.sandboxID)
  return sb
}

describe(`secure code interpreter (${mode} mode)`, { timeout: 300_000 }, () => {
  let sbx
  before(async () => {
    sbx = await CodeSandbox.create(TEMPLATE, { metadata: { [RUN_META_KEY]: runTag } })
    track(sbx.sandboxId)
  })

  test('the SDK works unchanged: runCode and the context calls', async () => {
    assert.match(sbx.envdAccessToken ?? '', TOKEN_RE, 'create gave the SDK an access token')
    assert.equal((await sbx.runCode('1+1')).text, '2')
    // The context routes: the SDK sends no X-Access-Token on them.
    const ctx = await sbx.createCodeContext()
    assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
    assert.equal((await sbx.runCode('x = 6 * 7; x', { context: ctx })).text, '42')
    await sbx.restartCodeContext(ctx)
    await sbx.removeCodeContext(ctx)
  })

  for (const routing of ['host', 'headers']) {
    test(`routed by ${routing}: /execute without the token → 401 as envd answers; a wrong one too; the token → runs`, async () => {
      for (const token of [undefined, 'not-the-token', '']) {
        const res = await execute(sbx, routing, '1+1', token)
        assert.equal(res.status, 401, `token ${JSON.stringify(token)}: ${res.status} ${res.body}`)
        assert.match(res.type, /^application\/json/)
        assert.deepEqual(JSON.parse(res.body), UNAUTHORIZED)
      }
      const res = await execute(sbx, routing, '20+22', sbx.envdAccessToken)
      assert.equal(res.status, 200, res.body)
      assert.equal(resultText(res.body), '42')
    })

    test(`routed by ${routing}: an unknown route needs the token; GET /contexts (the SDK sends none) does not`, async () => {
      const unknown = route(sbx, routing, '/no-such-route')
      const res = await fetch(unknown.url, { headers: unknown.headers, signal: AbortSignal.timeout(10_000) })
      assert.equal(res.status, 401)
      assert.deepEqual(await jsonBody(res), UNAUTHORIZED)
      const list = route(sbx, routing, '/contexts')
      const ok = await fetch(list.url, { headers: list.headers, signal: AbortSignal.timeout(10_000) })
      assert.equal(ok.status, 200, await ok.clone().text())
      assert.ok(Array.isArray(await jsonBody(ok)))
    })
  }
})

describe(`envdAccessToken in every create and connect response (${mode} mode)`, { timeout: 300_000 }, () => {
  test('v1 secure: false, v1 secure: true and v2 creates each get a token of their own; connect returns it unchanged', async () => {
    const bodies = {
      'v1 secure false': await rawCreate('/sandboxes', { templateID: 'base', timeout: 120, secure: false }),
      'v1 secure absent': await rawCreate('/sandboxes', { templateID: 'base', timeout: 120 }),
      'v1 secure true': await rawCreate('/sandboxes', { templateID: 'base', timeout: 120, secure: true }),
      v2: await rawCreate('/v2/sandboxes', { templateID: 'base', timeout: 120 }),
    }
    const tokens = new Set()
    for (const [name, sb] of Object.entries(bodies)) {
      assert.match(sb.envdAccessToken ?? '', TOKEN_RE, `${name}: ${JSON.stringify(sb)}`)
      tokens.add(sb.envdAccessToken)
      for (const [path, body] of [
        [`/sandboxes/${sb.sandboxID}/connect`, { timeout: 120 }],
        [`/v2/sandboxes/${sb.sandboxID}/connect`, {}],
      ]) {
        const res = await apiFetch(path, { method: 'POST', body: JSON.stringify(body) })
        const got = await jsonBody(res)
        assert.equal(res.status, 200, `${name} ${path}: ${JSON.stringify(got)}`)
        assert.equal(got.envdAccessToken, sb.envdAccessToken, `${name} ${path}`)
      }
    }
    assert.equal(tokens.size, Object.keys(bodies).length, 'every sandbox has a token of its own')
  })

  test('a secure: false sandbox works through the SDK, which sends the token: commands, files, signed URLs', async () => {
    const raw = await rawCreate('/sandboxes', { templateID: 'base', timeout: 120, secure: false })
    const sbx = await Sandbox.connect(raw.sandboxID)
    assert.equal(sbx.envdAccessToken, raw.envdAccessToken)
    assert.equal((await sbx.commands.run('echo hi')).stdout, 'hi\n')
    await sbx.files.write('/home/user/plain.txt', 'plain')
    assert.equal(await sbx.files.read('/home/user/plain.txt'), 'plain')
    // Signed, no X-Access-Token. In header mode the URL is E2B_SANDBOX_URL's,
    // which routes by the E2b-Sandbox-* headers only.
    const routing = mode === 'header' ? { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' } : {}
    const down = await fetch(await sbx.downloadUrl('/home/user/plain.txt'), { headers: routing, signal: AbortSignal.timeout(10_000) })
    assert.equal(down.status, 200)
    assert.equal(await down.text(), 'plain')
    // Without the token envd refuses, secure or not.
    const envd = await fetch(hostUrl(sbx, 49983, '/envs'), { signal: AbortSignal.timeout(10_000) })
    assert.equal(envd.status, 401)
    assert.deepEqual(await jsonBody(envd), UNAUTHORIZED)
  })

  test('a secure: false code-interpreter sandbox: 49999 needs no token (as E2B), the SDK works', async () => {
    const raw = await rawCreate('/sandboxes', { templateID: TEMPLATE, timeout: 120, secure: false })
    const sbx = await CodeSandbox.connect(raw.sandboxID)
    assert.equal((await sbx.runCode('1+1')).text, '2')
    const res = await execute(sbx, 'host', '2+3', undefined)
    assert.equal(res.status, 200, res.body)
    assert.equal(resultText(res.body), '5')
  })
})
