// The DevTools endpoint of `browser` sandboxes: Playwright (playwright-core,
// which downloads no browser when it only connects) drives the sandbox's
// own headless Chromium from outside with connectOverCDP(getHost(9222)),
// through the router — the /json/version answer names the public host, and
// the CDP WebSocket streams through the router.
//
// The suite's server has no test internet: its egress ceiling allows no
// name and no address, so no page off the machine loads. The allowed page
// is one the sandbox serves itself (python3 -m http.server on its
// loopback); the refused ones are a name (example.com: the sandbox's DNS
// filter refuses it, so nothing is asked of anyone else) and a literal
// address (1.1.1.1: the egress proxy answers 403 for it), neither of which
// sends a packet off this machine.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { chromium } from 'playwright-core'
import { Sandbox } from 'e2b'

import { FORM, RUN_META_KEY, apiFetch, hostUrl, killCreated, mode, runTag, serveDir, track } from './helpers.mjs'

const DEVTOOLS_PORT = 9222
const PORT = 8000
const PAGE = `http://127.0.0.1:${PORT}/form.html`
const SITE = '/home/user/site'

after(killCreated)

describe(`DevTools endpoint of a browser sandbox (${mode} mode)`, { timeout: 240_000 }, () => {
  let sbx
  let browser

  before(async () => {
    sbx = await Sandbox.create('browser', { timeoutMs: 300_000, metadata: { [RUN_META_KEY]: runTag } })
    track(sbx.sandboxId)
    await sbx.files.write(`${SITE}/form.html`, FORM)
    await serveDir(sbx, SITE, PORT)
  })

  after(async () => {
    await browser?.close()
  })

  test('/json/version names the public host, ws or wss by the scheme', async () => {
    const res = await fetch(hostUrl(sbx, DEVTOOLS_PORT, '/json/version'), { signal: AbortSignal.timeout(30_000) })
    assert.equal(res.status, 200)
    const v = await res.json()
    const ws = mode === 'tls' ? 'wss' : 'ws'
    assert.match(v.Browser, /^(Headless)?Chrome\//, JSON.stringify(v))
    assert.ok(
      v.webSocketDebuggerUrl.startsWith(`${ws}://${sbx.getHost(DEVTOOLS_PORT)}/devtools/browser/`),
      `webSocketDebuggerUrl ${v.webSocketDebuggerUrl}; want it under ${ws}://${sbx.getHost(DEVTOOLS_PORT)}`
    )
  })

  test('connectOverCDP from outside, then a form filled and submitted in the sandbox', async (t) => {
    const t0 = performance.now()
    browser = await chromium.connectOverCDP(hostUrl(sbx, DEVTOOLS_PORT, ''), { timeout: 60_000 })
    t.diagnostic(`connectOverCDP: ${(performance.now() - t0).toFixed(0)} ms`)
    const context = browser.contexts()[0] ?? (await browser.newContext())
    const page = await context.newPage()
    const word = `w${randomBytes(4).toString('hex')}`
    const res = await page.goto(PAGE)
    assert.equal(res.status(), 200)
    await page.fill('input[name=who]', word)
    await page.selectOption('select[name=color]', 'green')
    await page.click('button[type=submit]')
    await page.waitForFunction(() => document.getElementById('result').textContent !== 'none')
    assert.equal(await page.textContent('#result'), `hello ${word} in green`)
  })

  // Each navigation on a fresh page, so one's error page cannot cut the next.
  async function load(url) {
    const p = await browser.contexts()[0].newPage()
    try {
      return await p.goto(url, { timeout: 30_000 }).then(
        async (res) => ({ status: res.status(), body: await p.textContent('body') }),
        (err) => ({ error: err.message })
      )
    } finally {
      await p.close()
    }
  }

  async function audit() {
    const res = await apiFetch(`/sandboxes/${sbx.sandboxId}/network/audit`)
    assert.equal(res.status, 200)
    return (await res.json()).events
  }

  test('pages off the egress allowlist do not load, the allowed one does; the egress audit saw Chromium', async () => {
    assert.ok(browser, 'no browser: the connect test failed')
    const name = await load('http://example.com/')
    assert.match(name.error ?? '', /net::ERR_NAME_NOT_RESOLVED/, JSON.stringify(name))
    // The egress proxy answers for the literal address itself.
    const addr = await load('http://1.1.1.1/')
    assert.equal(addr.status, 403, JSON.stringify(addr))
    assert.match(addr.body, /egress to 1\.1\.1\.1 denied \(rule ceiling:allowlist\)/)
    const allowed = await load(PAGE)
    assert.equal(allowed.status, 200, JSON.stringify(allowed))
    const events = await audit()
    assert.ok(events.some((e) => e.kind === 'dns' && e.name === 'example.com' && !e.allowed), JSON.stringify(events))
    assert.ok(events.some((e) => e.kind === 'proxy' && e.addrs?.includes('1.1.1.1') && !e.allowed), JSON.stringify(events))
  })
})
