// Access-token envd: X-Access-Token on every request, and signed
// uploadUrl()/downloadUrl() fetched with plain fetch and no headers.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { AuthenticationError } from 'e2b'

import { jsonBody, scratchPath, sleep, tokenEnvdUrl, tokenSandbox, USER } from './helpers.mjs'

const sbx = tokenSandbox()
const dir = scratchPath('signing')

const UNAUTHORIZED = {
  code: 401,
  message: 'unauthorized access, please provide a valid access token or method signing if supported',
}

before(async () => {
  await sbx.files.makeDir(dir)
})
after(async () => {
  await sbx.files.remove(dir).catch(() => {})
})

/** Replaces the signature query parameter of url with a tampered one. */
function tamper(url) {
  const u = new URL(url)
  const sig = u.searchParams.get('signature')
  assert.ok(sig?.startsWith('v1_'), `url has no v1_ signature: ${url}`)
  const last = sig.at(-1) === 'A' ? 'B' : 'A'
  u.searchParams.set('signature', sig.slice(0, -1) + last)
  return u.toString()
}

describe('access token', () => {
  test('the SDK (sending X-Access-Token) can run commands and use files', async () => {
    const res = await sbx.commands.run('whoami; pwd')
    assert.equal(res.stdout, `${USER}\n/home/user\n`)
    await sbx.files.write(`${dir}/tok.txt`, 'token ok')
    assert.equal(await sbx.files.read(`${dir}/tok.txt`), 'token ok')
  })

  test('GET /health needs no token', async () => {
    const res = await fetch(`${tokenEnvdUrl}/health`)
    assert.equal(res.status, 204)
  })

  test('an RPC without X-Access-Token gets 401 with the exact message', async () => {
    const res = await fetch(`${tokenEnvdUrl}/process.Process/List`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' },
      body: '{}',
    })
    assert.equal(res.status, 401)
    assert.deepEqual(await jsonBody(res), UNAUTHORIZED)
  })

  test('an RPC with a wrong X-Access-Token gets 401', async () => {
    const res = await fetch(`${tokenEnvdUrl}/filesystem.Filesystem/Stat`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1', 'X-Access-Token': 'wrong' },
      body: JSON.stringify({ path: '/tmp' }),
    })
    assert.equal(res.status, 401)
    assert.deepEqual(await jsonBody(res), UNAUTHORIZED)
  })

  test('the SDK with a wrong token gets AuthenticationError', async () => {
    const bad = tokenSandbox({ token: 'not-the-token' })
    await assert.rejects(bad.commands.run('true'), AuthenticationError)
    await assert.rejects(bad.files.list('/tmp'), AuthenticationError)
  })

  test('GET /files without token or signature gets 401 "missing signature query parameter"', async () => {
    const res = await fetch(`${tokenEnvdUrl}/files?path=${encodeURIComponent(`${dir}/tok.txt`)}`)
    assert.equal(res.status, 401)
    assert.deepEqual(await jsonBody(res), { code: 401, message: 'missing signature query parameter' })
  })

  test('GET /files with a wrong X-Access-Token gets 401 "access token present in header but does not match"', async () => {
    const res = await fetch(`${tokenEnvdUrl}/files?path=${encodeURIComponent(`${dir}/tok.txt`)}`, {
      headers: { 'X-Access-Token': 'wrong' },
    })
    assert.equal(res.status, 401)
    assert.deepEqual(await jsonBody(res), { code: 401, message: 'access token present in header but does not match' })
  })
})

describe('signed URLs', () => {
  test('downloadUrl works with plain fetch and no headers', async () => {
    const path = `${dir}/download.txt`
    await sbx.files.write(path, 'downloaded via signed url')
    const url = await sbx.downloadUrl(path)
    const u = new URL(url)
    assert.equal(u.origin, tokenEnvdUrl)
    assert.equal(u.pathname, '/files')
    assert.equal(u.searchParams.get('path'), path)
    assert.equal(u.searchParams.get('signature_expiration'), null)
    const res = await fetch(url)
    assert.equal(res.status, 200, await res.clone().text())
    assert.equal(await res.text(), 'downloaded via signed url')
  })

  test('uploadUrl works with plain fetch (multipart) and no headers', async () => {
    const path = `${dir}/uploaded.txt`
    const url = await sbx.uploadUrl(path)
    const form = new FormData()
    form.append('file', new Blob(['uploaded via signed url']), 'uploaded.txt')
    const res = await fetch(url, { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.clone().text())
    const body = await jsonBody(res)
    assert.ok(Array.isArray(body) && body.length === 1, JSON.stringify(body))
    assert.equal(body[0].path, path)
    assert.equal(body[0].name, 'uploaded.txt')
    assert.equal(body[0].type, 'file')
    assert.equal(await sbx.files.read(path), 'uploaded via signed url')
    assert.equal((await sbx.files.getInfo(path)).owner, USER)
  })

  test('signed URLs with an explicit user: download as user, upload as root', async () => {
    const path = `${dir}/as-root.txt`
    const up = await sbx.uploadUrl(path, { user: 'root' })
    assert.equal(new URL(up).searchParams.get('username'), 'root')
    const form = new FormData()
    form.append('file', new Blob(['root wrote this']), 'as-root.txt')
    const res = await fetch(up, { method: 'POST', body: form })
    assert.equal(res.status, 200, await res.clone().text())
    assert.equal((await sbx.files.getInfo(path)).owner, 'root')

    const down = await sbx.downloadUrl(path, { user: USER })
    const got = await fetch(down)
    assert.equal(got.status, 200)
    assert.equal(await got.text(), 'root wrote this')
  })

  test('a signature with an expiration in the future works', async () => {
    const path = `${dir}/download.txt`
    const url = await sbx.downloadUrl(path, { useSignatureExpiration: 120 })
    assert.ok(new URL(url).searchParams.get('signature_expiration'))
    const res = await fetch(url)
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'downloaded via signed url')
  })

  test('a tampered signature gets 401 "invalid signature"', async () => {
    const path = `${dir}/download.txt`
    const res = await fetch(tamper(await sbx.downloadUrl(path)))
    assert.equal(res.status, 401)
    assert.deepEqual(await jsonBody(res), { code: 401, message: 'invalid signature' })

    const up = await fetch(tamper(await sbx.uploadUrl(`${dir}/tampered.txt`)), {
      method: 'POST',
      body: (() => {
        const f = new FormData()
        f.append('file', new Blob(['x']), 'tampered.txt')
        return f
      })(),
    })
    assert.equal(up.status, 401)
    assert.deepEqual(await jsonBody(up), { code: 401, message: 'invalid signature' })
    assert.equal(await sbx.files.exists(`${dir}/tampered.txt`), false)
  })

  test('a read signature is not valid for a write (operation is signed)', async () => {
    const path = `${dir}/op-bound.txt`
    const readUrl = await sbx.downloadUrl(path)
    const form = new FormData()
    form.append('file', new Blob(['x']), 'op-bound.txt')
    const res = await fetch(readUrl, { method: 'POST', body: form })
    assert.equal(res.status, 401)
    assert.deepEqual(await jsonBody(res), { code: 401, message: 'invalid signature' })
  })

  test('changing the path of a signed URL invalidates it', async () => {
    const u = new URL(await sbx.downloadUrl(`${dir}/download.txt`))
    u.searchParams.set('path', `${dir}/tok.txt`)
    const res = await fetch(u)
    assert.equal(res.status, 401)
    assert.deepEqual(await jsonBody(res), { code: 401, message: 'invalid signature' })
  })

  test('an expired signature gets 401 "signature is already expired"', async () => {
    const path = `${dir}/download.txt`
    const url = await sbx.downloadUrl(path, { useSignatureExpiration: 1 })
    await sleep(2100)
    const res = await fetch(url)
    assert.equal(res.status, 401)
    assert.deepEqual(await jsonBody(res), { code: 401, message: 'signature is already expired' })
  })
})
