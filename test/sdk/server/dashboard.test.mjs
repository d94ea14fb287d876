// The web dashboard (/dashboard), driven by Debian's Chromium through
// playwright-core the way an operator uses it: sign in with the API key,
// find a sandbox the SDK created, run a command in its terminal, kill it.
// No page may log an error. Screenshots of the list and the detail page
// are written under SDK_TEST_ARTIFACTS (default: a directory under the
// system's temp dir) and their paths printed.
//
// Without a session, every dashboard route and every API call its pages
// make is refused, and a cross-site form POST is refused even with one.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { chromium } from 'playwright-core'

import { apiFetch, apiKey, apiUrl, createSandbox, killCreated, mode, runTag, waitFor } from './helpers.mjs'

/** Debian's chromium, which scripts/install-deps.sh --test installs. */
const CHROMIUM = process.env.SDK_TEST_CHROMIUM || '/usr/bin/chromium'
const ARTIFACTS = process.env.SDK_TEST_ARTIFACTS || join(tmpdir(), `agent-sandbox-dashboard-${runTag}`)
/** A laptop screen. */
const VIEWPORT = { width: 1366, height: 768 }

/** fetch of a dashboard path, without following redirects. */
function dashFetch(path, init = {}) {
  return fetch(`${apiUrl}${path}`, { redirect: 'manual', signal: AbortSignal.timeout(30_000), ...init })
}

after(killCreated)

describe(`dashboard (${mode} mode)`, { timeout: 240_000 }, () => {
  let sbx
  let browser

  before(async () => {
    ;({ sbx } = await createSandbox({ timeoutMs: 240_000 }))
    mkdirSync(ARTIFACTS, { recursive: true })
    // The TLS mode's API host is under the suite's domain, which resolves
    // to this machine; its certificate is the suite's own CA's.
    const domain = new URL(`http://${process.env.E2B_DOMAIN}`).hostname
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [`--host-resolver-rules=MAP *.${domain} 127.0.0.1`, '--ignore-certificate-errors'],
    })
  })

  after(async () => {
    await browser?.close()
  })

  test('without a session every page redirects to the sign-in form and every API call is a 401', async () => {
    const id = sbx.sandboxId
    for (const path of ['/dashboard/', `/dashboard/inspect/sandbox/${id}`, '/dashboard/static/sandbox.js', '/dashboard/static/vendor/xterm.js']) {
      const res = await dashFetch(path)
      assert.equal(res.status, 303, path)
      assert.equal(res.headers.get('location'), '/dashboard/sign-in', path)
    }
    const calls = [
      ['GET', '/dashboard/api/v2/sandboxes'],
      ['GET', `/dashboard/api/sandboxes/${id}`],
      ['GET', `/dashboard/api/sandboxes/${id}/metrics`],
      ['GET', `/dashboard/api/sandboxes/${id}/terminal?cols=80&rows=24`],
      ['DELETE', `/dashboard/api/sandboxes/${id}`],
      ['POST', `/dashboard/api/sandboxes/${id}/pause`],
      ['POST', `/dashboard/api/sandboxes/${id}/connect`],
      ['POST', `/dashboard/api/sandboxes/${id}/timeout`],
    ]
    for (const [method, path] of calls) {
      // The API key as a header is no session either.
      for (const headers of [{}, { 'X-API-Key': apiKey }]) {
        const res = await dashFetch(path, { method, headers })
        assert.equal(res.status, 401, `${method} ${path} with headers ${Object.keys(headers)}`)
      }
    }
    const wrong = await dashFetch('/dashboard/api/v2/sandboxes', { headers: { Cookie: 'agent_sandbox_session=e2b_not_a_key' } })
    assert.equal(wrong.status, 401)
    const signIn = await dashFetch('/dashboard/sign-in', { method: 'POST', body: new URLSearchParams({ key: 'e2b_not_a_key' }) })
    assert.equal(signIn.status, 401)
    assert.equal(signIn.headers.get('set-cookie'), null)
    assert.equal(await sbx.isRunning(), true, 'the refused calls left the sandbox running')
  })

  test('a cross-site form POST is refused, even signed in', async () => {
    const context = await browser.newContext({ ignoreHTTPSErrors: true })
    try {
      await signIn(await context.newPage())
      // A page of another site that posts a form to the dashboard's pause.
      const evil = await context.newPage()
      await evil.route('http://evil.test/', (route) =>
        route.fulfill({
          contentType: 'text/html',
          body: `<form method="post" action="${apiUrl}/dashboard/api/sandboxes/${sbx.sandboxId}/pause"><button>go</button></form>`,
        }),
      )
      await evil.goto('http://evil.test/')
      const [res] = await Promise.all([evil.waitForResponse((r) => r.url().includes('/pause')), evil.click('button')])
      assert.equal(res.status(), 403)
      const info = await apiFetch(`/sandboxes/${sbx.sandboxId}`).then((r) => r.json())
      assert.equal(info.state, 'running', 'the cross-site POST paused the sandbox')
    } finally {
      await context.close()
    }
  })

  /** Signs page in through the form; it lands on the sandbox list. */
  async function signIn(page) {
    await page.goto(`${apiUrl}/dashboard/`)
    assert.match(page.url(), /\/dashboard\/sign-in$/)
    await page.fill('#key', apiKey)
    await Promise.all([page.waitForURL(/\/dashboard\/$/), page.click('button[type=submit]')])
  }

  test('sign in, see the sandbox, run a command in its terminal, kill it', async (t) => {
    const context = await browser.newContext({ viewport: VIEWPORT, ignoreHTTPSErrors: true })
    const page = await context.newPage()
    const errors = []
    // Chromium runs on the server's host: when the kill takes the sandbox's
    // network interfaces away, it drops its requests in flight with
    // ERR_NETWORK_CHANGED, which it logs; the page sends the kill again
    // (sandbox.js). That is this host's network changing, not the page.
    const hostNetworkChanged = (text) => text.includes('net::ERR_NETWORK_CHANGED')
    page.on('console', (msg) => msg.type() === 'error' && !hostNetworkChanged(msg.text()) && errors.push(`console: ${msg.text()}`))
    page.on('pageerror', (err) => errors.push(`page error: ${err.message}`))
    page.on('requestfailed', (req) => !hostNetworkChanged(req.failure()?.errorText ?? '') && errors.push(`request failed: ${req.method()} ${req.url()}: ${req.failure()?.errorText}`))
    try {
      await signIn(page)
      const cookie = (await context.cookies()).find((c) => c.name === 'agent_sandbox_session')
      assert.ok(cookie?.httpOnly && cookie.sameSite === 'Strict', JSON.stringify(cookie))
      assert.equal(cookie.secure, mode === 'tls')

      const row = page.locator(`tr[data-sandbox-id="${sbx.sandboxId}"]`)
      await row.waitFor({ timeout: 15_000 })
      assert.match(await row.innerText(), /running/)
      const listShot = join(ARTIFACTS, `dashboard-list-${mode}.png`)
      await page.screenshot({ path: listShot, fullPage: true })
      t.diagnostic(`list screenshot: ${listShot}`)

      await Promise.all([page.waitForURL(/\/dashboard\/inspect\/sandbox\//), row.locator('a').click()])
      await page.locator('#info dd', { hasText: 'running' }).waitFor()
      await page.click('#open-terminal')
      await page.locator('#terminal .xterm-rows').waitFor()
      // The prompt shows when the shell is up.
      await waitFor(async () => /\$\s*$/m.test(await page.locator('#terminal .xterm-rows').innerText()), { timeoutMs: 20_000, what: 'the shell prompt' })
      await page.locator('#terminal .xterm').click()
      await page.keyboard.type('echo dash-ok', { delay: 10 })
      await page.keyboard.press('Enter')
      // The command line echoes "echo dash-ok"; its output is a row of its own.
      await waitFor(
        async () => (await page.locator('#terminal .xterm-rows > div').allInnerTexts()).some((l) => l.trim() === 'dash-ok'),
        { timeoutMs: 15_000, what: 'dash-ok in the terminal' },
      )
      const detailShot = join(ARTIFACTS, `dashboard-detail-${mode}.png`)
      await page.screenshot({ path: detailShot, fullPage: true })
      t.diagnostic(`detail screenshot: ${detailShot}`)

      await page.click('#kill')
      try {
        await page.waitForURL(/\/dashboard\/$/, { waitUntil: 'commit', timeout: 30_000 })
      } catch (err) {
        const shot = join(ARTIFACTS, `dashboard-kill-${mode}.png`)
        await page.screenshot({ path: shot, fullPage: true })
        throw new Error(`the page did not go back to the list after Kill (at ${page.url()}, status ${JSON.stringify(await page.locator('#status').textContent())}, screenshot ${shot}, errors ${JSON.stringify(errors)}): ${err.message}`)
      }
      assert.equal(await sbx.isRunning(), false)
      const gone = await apiFetch(`/sandboxes/${sbx.sandboxId}`)
      assert.equal(gone.status, 404)
      await page.locator(`tr[data-sandbox-id="${sbx.sandboxId}"]`).waitFor({ state: 'detached' })
      assert.deepEqual(errors, [])
    } finally {
      await context.close()
    }
  })
})
