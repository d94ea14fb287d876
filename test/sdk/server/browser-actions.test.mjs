// The browser action API of `browser` sandboxes: the form flow of
// devtools.test.mjs again, without Playwright — plain fetch to POST
// /sandboxes/{id}/browser/actions with the API key. The form's fields are
// found in extract's accessibility tree and filled and clicked by its
// refs; the page is the one Chromium shows at getHost(9222), shared with
// the DevTools endpoint.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { Sandbox } from 'e2b'

import { FORM, RUN_META_KEY, apiFetch, createSandbox, hostUrl, killCreated, mode, runTag, serveDir, track } from './helpers.mjs'

const PORT = 8000
const PAGE = `http://127.0.0.1:${PORT}/form.html`
const SITE = '/home/user/site'

after(killCreated)

/** POSTs one action to sandbox id and answers the status and JSON body. */
async function act(id, action) {
  const res = await apiFetch(`/sandboxes/${id}/browser/actions`, { method: 'POST', body: JSON.stringify(action) })
  return { status: res.status, body: await res.json() }
}

/** The nodes of tree, depth first. */
function* nodes(tree) {
  yield tree
  for (const c of tree.children ?? []) yield* nodes(c)
}

describe(`browser action API (${mode} mode)`, { timeout: 240_000 }, () => {
  let sbx
  let id

  before(async () => {
    sbx = await Sandbox.create('browser', { timeoutMs: 300_000, metadata: { [RUN_META_KEY]: runTag } })
    id = sbx.sandboxId
    track(id)
    await sbx.files.write(`${SITE}/form.html`, FORM)
    await serveDir(sbx, SITE, PORT)
  })

  async function ok(action) {
    const res = await act(id, action)
    assert.equal(res.status, 200, `${JSON.stringify(action)}: ${JSON.stringify(res.body)}`)
    return res.body
  }

  test('the form filled and submitted by the refs of the accessibility tree', async () => {
    const nav = await ok({ action: 'navigate', url: PAGE })
    assert.equal(nav.url, PAGE)

    const { tree } = await ok({ action: 'extract', format: 'accessibility' })
    const all = [...nodes(tree)]
    const field = all.find((n) => n.role === 'textbox')
    const select = all.find((n) => n.role === 'combobox')
    const send = all.find((n) => n.role === 'button' && n.name === 'Send')
    assert.ok(field?.ref && select?.ref && send?.ref, JSON.stringify(tree))

    const word = `w${randomBytes(4).toString('hex')}`
    await ok({ action: 'fill', ref: field.ref, value: word })
    await ok({ action: 'select', ref: select.ref, value: 'green' })
    await ok({ action: 'click', ref: send.ref })
    await ok({ action: 'wait', for: 'selector', selector: '#result' })
    assert.equal((await ok({ action: 'extract', format: 'text', selector: '#result' })).text, `hello ${word} in green`)

    // The same page is the one the DevTools endpoint lists.
    const res = await fetch(hostUrl(sbx, 9222, '/json/list'), { signal: AbortSignal.timeout(30_000) })
    assert.equal(res.status, 200)
    const pages = (await res.json()).filter((t) => t.type === 'page')
    assert.deepEqual(pages.map((p) => p.url), [PAGE])
  })

  test('selectors, a key press, network idle, links and HTML', async () => {
    await ok({ action: 'navigate', url: PAGE })
    const word = `k${randomBytes(4).toString('hex')}`
    await ok({ action: 'fill', selector: 'input[name=who]', value: word })
    await ok({ action: 'press', key: 'Enter' }) // submits the form, red by default
    await ok({ action: 'wait', for: 'networkIdle' })
    assert.equal((await ok({ action: 'extract', format: 'text', selector: '#result' })).text, `hello ${word} in red`)
    assert.match((await ok({ action: 'extract', format: 'html' })).html, /<form id="f">/)
    assert.deepEqual((await ok({ action: 'extract', format: 'links' })).links ?? [], [])
    await ok({ action: 'scroll', deltaY: 200 })
    await ok({ action: 'click', x: 5, y: 5 })
  })

  test('a screenshot is a PNG, a pdf a PDF', async () => {
    const shot = await ok({ action: 'screenshot' })
    assert.equal(shot.mimeType, 'image/png')
    assert.deepEqual([...Buffer.from(shot.data, 'base64').subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
    const pdf = await ok({ action: 'pdf' })
    assert.equal(pdf.mimeType, 'application/pdf')
    assert.equal(Buffer.from(pdf.data, 'base64').subarray(0, 5).toString(), '%PDF-')
  })

  test('bad input is 400 naming the field; what the page cannot do is 422', async () => {
    for (const [action, field] of [
      [{ action: 'dance' }, 'action'],
      [{ action: 'click' }, 'selector'],
      [{ action: 'click', selector: 'a', ref: 'e1' }, 'selector'],
      [{ action: 'click', ref: 'button-7' }, 'ref'],
      [{ action: 'fill', selector: 'input' }, 'value'],
      [{ action: 'navigate', url: 'file:///etc/passwd' }, 'url'],
      [{ action: 'screenshot', format: 'jpeg' }, 'format'],
      [{ action: 'press', key: 'Hyper' }, 'key'],
      [{ action: 'wait', for: 'selector', selector: 'a', timeoutMs: 0 }, 'timeoutMs'],
      [{ action: 'click', selector: '[[' }, 'selector'],
    ]) {
      const res = await act(id, action)
      assert.equal(res.status, 400, `${JSON.stringify(action)}: ${JSON.stringify(res.body)}`)
      assert.match(res.body.message, new RegExp(`^${field}: `), JSON.stringify(res.body))
    }
    const missing = await act(id, { action: 'click', selector: '#nowhere' })
    assert.equal(missing.status, 422, JSON.stringify(missing.body))
    const late = await act(id, { action: 'wait', for: 'selector', selector: '#nowhere', timeoutMs: 300 })
    assert.equal(late.status, 422, JSON.stringify(late.body))
  })

  test('a sandbox without a browser is 409 saying so', async () => {
    const { sbx: base } = await createSandbox()
    const res = await act(base.sandboxId, { action: 'screenshot' })
    assert.equal(res.status, 409, JSON.stringify(res.body))
    assert.match(res.body.message, /has no browser/)
  })
})
