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
import { Template } from 'e2b'

import { apiFetch, apiKey, apiUrl, createSandbox, killCreated, launchChromium, mode, runTag, waitFor } from './helpers.mjs'

const ARTIFACTS = process.env.SDK_TEST_ARTIFACTS || join(tmpdir(), `agent-sandbox-dashboard-${runTag}`)
/** A laptop screen. */
const VIEWPORT = { width: 1366, height: 768 }

/** fetch of a dashboard path, without following redirects. */
function dashFetch(path, init = {}) {
  return fetch(`${apiUrl}${path}`, { redirect: 'manual', signal: AbortSignal.timeout(30_000), ...init })
}

after(killCreated)

/** The metadata key of this file's own two sandboxes. */
const LIST_META_KEY = 'sdkTestDashboard'

/** Collects what page logs as an error, fails to load or throws. */
function watchErrors(page) {
  const errors = []
  // Leaving a page cancels its requests in flight (the list's metrics
  // calls when the test goes to another page): ERR_ABORTED, no console
  // error.
  const leftPage = (text) => text === 'net::ERR_ABORTED'
  page.on('console', (msg) => msg.type() === 'error' && errors.push(`console: ${msg.text()}`))
  page.on('pageerror', (err) => errors.push(`page error: ${err.message}`))
  // The console's "Failed to load resource" names no URL: this does.
  page.on('response', (res) => res.status() >= 400 && errors.push(`response: ${res.status()} ${res.request().method()} ${res.url()}`))
  page.on('requestfailed', (req) => {
    const text = req.failure()?.errorText ?? ''
    if (!leftPage(text)) errors.push(`request failed: ${req.method()} ${req.url()}: ${text}`)
  })
  return errors
}

/** Writes a full-page screenshot of page as artefact name and reports its path. */
async function screenshot(t, page, name) {
  const file = join(ARTIFACTS, `dashboard-${name}-${mode}.png`)
  await page.screenshot({ path: file, fullPage: true })
  t.diagnostic(`${name} screenshot: ${file}`)
}

describe(`dashboard (${mode} mode)`, { timeout: 290_000 }, () => {
  let sbx
  let other
  let browser

  before(async () => {
    // Tagged as this file's, so that the list's filter finds these two
    // and none of the sandboxes other files of the run create meanwhile.
    const metadata = { [LIST_META_KEY]: runTag }
    ;[{ sbx }, { sbx: other }] = await Promise.all([createSandbox({ timeoutMs: 240_000, metadata }), createSandbox({ timeoutMs: 240_000, metadata })])
    mkdirSync(ARTIFACTS, { recursive: true })
    browser = await launchChromium()
  })

  after(async () => {
    await browser?.close()
  })

  test('without a session every page redirects to the sign-in form and every API call is a 401', async () => {
    const id = sbx.sandboxId
    for (const path of ['/dashboard/', `/dashboard/inspect/sandbox/${id}`, '/dashboard/templates', '/dashboard/keys', '/dashboard/host', '/dashboard/static/sandbox.js', '/dashboard/static/vendor/xterm.js']) {
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
      ['GET', `/dashboard/api/sandboxes/${id}/files?path=~`],
      ['GET', `/dashboard/api/sandboxes/${id}/files/content?path=.bashrc`],
      ['POST', `/dashboard/api/sandboxes/${id}/files/content?path=x.txt`],
      ['GET', `/dashboard/api/sandboxes/${id}/network/audit`],
      ['POST', `/dashboard/api/sandboxes/${id}/live-view`],
      ['GET', '/dashboard/api/host'],
      ['GET', '/dashboard/api/keys'],
      ['POST', '/dashboard/api/keys'],
      ['DELETE', '/dashboard/api/keys/some-key-id'],
      ['GET', '/dashboard/api/templates'],
      ['GET', '/dashboard/api/template-builds'],
      ['GET', '/dashboard/api/templates/base/builds/some-build/status'],
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

  /** Signs page in through the form with key; it lands on the sandbox list. */
  async function signIn(page, key = apiKey) {
    await page.goto(`${apiUrl}/dashboard/`)
    assert.match(page.url(), /\/dashboard\/sign-in$/)
    await page.fill('#key', key)
    await Promise.all([page.waitForURL(/\/dashboard\/$/), page.click('button[type=submit]')])
  }

  /** A signed-in page on a laptop screen, and the errors it logs. */
  async function signedInPage(key = apiKey) {
    const context = await browser.newContext({ viewport: VIEWPORT, ignoreHTTPSErrors: true, acceptDownloads: true })
    const page = await context.newPage()
    const errors = watchErrors(page)
    // Revoking a key asks first.
    page.on('dialog', (d) => d.accept())
    await signIn(page, key)
    return { context, page, errors }
  }

  test('the list: disk use, a metadata filter and pages', async (t) => {
    const { context, page, errors } = await signedInPage()
    try {
      // This file's two sandboxes, one a page.
      const mine = `${LIST_META_KEY}=${runTag}`
      await page.goto(`${apiUrl}/dashboard/?limit=1&metadata=${encodeURIComponent(mine)}`)
      const rows = page.locator('#sandboxes tbody tr')
      await rows.first().waitFor()
      assert.equal(await page.inputValue('#metadata'), mine)
      assert.equal(await rows.count(), 1)
      const first = await rows.first().getAttribute('data-sandbox-id')
      // Disk is the last column: used / total once the server has a
      // sample (every 5 s), which the page shows at its next refresh (every 5 s).
      await waitFor(async () => (await (await apiFetch(`/sandboxes/${first}/metrics`)).json()).length > 0, { timeoutMs: 30_000, what: `a metrics sample of ${first} from the API` })
      await waitFor(async () => /^\d+ MiB \/ \d+ MiB$/.test(await rows.first().locator('td').last().innerText()), { timeoutMs: 15_000, what: 'the disk use of the first row, once the API has a sample' })
      await screenshot(t, page, 'list-filtered')
      assert.equal(await page.isDisabled('#prev-page'), true)
      await page.click('#next-page')
      await page.locator('#page-number', { hasText: 'Page 2' }).waitFor()
      await waitFor(async () => (await rows.first().getAttribute('data-sandbox-id')) !== first, { timeoutMs: 10_000, what: 'the second page' })
      const second = await rows.first().getAttribute('data-sandbox-id')
      assert.deepEqual([first, second].sort(), [sbx.sandboxId, other.sandboxId].sort())
      assert.equal(await page.isDisabled('#next-page'), true, 'two sandboxes are two pages of one')
      await page.click('#prev-page')
      await page.locator(`#sandboxes tbody tr[data-sandbox-id="${first}"]`).waitFor()

      // A filter nothing matches, typed into the form.
      await page.fill('#metadata', `${LIST_META_KEY}=not-${runTag}`)
      await Promise.all([page.waitForURL(/metadata=/), page.click('#filter button')])
      await page.locator('#status', { hasText: 'No sandboxes match the filter.' }).waitFor()
      assert.equal(await rows.count(), 0)
      assert.deepEqual(errors, [])
    } finally {
      await context.close()
    }
  })

  test('the detail page: upload and download a file, the egress audit, the metrics chart', async (t) => {
    // A denied egress for the audit trail: example.com is off the allowlist.
    const curl = await sbx.commands.run('curl -sS -m 10 http://example.com/ || true', { timeoutMs: 30_000 })
    assert.match(curl.stderr, /resolve/i, JSON.stringify(curl))
    await sbx.files.write('/home/user/from-sdk.txt', `sdk wrote ${runTag}`)
    const { context, page, errors } = await signedInPage()
    try {
      await page.goto(`${apiUrl}/dashboard/inspect/sandbox/${sbx.sandboxId}`)
      // The file browser starts in the user's home.
      await page.locator('#files tr[data-path="/home/user/from-sdk.txt"]').waitFor({ timeout: 15_000 })
      assert.equal(await page.inputValue('#files-path'), '/home/user')
      const content = `uploaded through the dashboard ${runTag}\n`
      await page.setInputFiles('#upload-file', { name: 'dash-upload.txt', mimeType: 'text/plain', buffer: Buffer.from(content) })
      await page.click('#upload')
      await page.locator('#files tr[data-path="/home/user/dash-upload.txt"]').waitFor()
      assert.equal(await sbx.files.read('/home/user/dash-upload.txt'), content)
      const [download] = await Promise.all([page.waitForEvent('download'), page.click('#files tr[data-path="/home/user/from-sdk.txt"] a')])
      assert.equal(download.suggestedFilename(), 'from-sdk.txt')
      const chunks = []
      for await (const c of await download.createReadStream()) chunks.push(c)
      assert.equal(Buffer.concat(chunks).toString(), `sdk wrote ${runTag}`)

      // The denial is in the audit trail.
      const denied = page.locator('#egress tbody tr[data-allowed="false"]', { hasText: 'example.com' })
      await denied.first().waitFor({ timeout: 15_000 })
      assert.match(await denied.first().innerText(), /dns[\s\S]*example\.com[\s\S]*denied/)

      // The chart draws a line per series once there are samples.
      await waitFor(async () => (await page.locator('#metrics-chart polyline.cpu').getAttribute('points').catch(() => null))?.includes(','), { timeoutMs: 20_000, what: 'the CPU line of the chart' })
      assert.equal(await page.locator('#metrics-chart polyline').count(), 3)
      await screenshot(t, page, 'detail-panels')
      assert.deepEqual(errors, [])
    } finally {
      await context.close()
    }
  })

  test('API keys: create one (shown once), revoke it and the API refuses it; revoking the own key signs out', async (t) => {
    const { context, page, errors } = await signedInPage()
    /** Creates a key named name on the keys page; its plaintext. */
    async function createKey(name) {
      await page.fill('#key-name', name)
      await page.click('#create-key button')
      await page.locator(`#keys tbody tr`, { hasText: name }).waitFor()
      const key = await page.locator('#new-key-value').innerText()
      assert.match(key, /^e2b_[0-9a-f]{40}$/)
      return key
    }
    const listWith = (key) => apiFetch('/v2/sandboxes?limit=1', { headers: { 'X-API-Key': key } })
    try {
      await page.goto(`${apiUrl}/dashboard/keys`)
      await page.locator('#keys tbody tr', { hasText: '(this session)' }).waitFor()
      const nameA = `dash-a-${runTag}`
      const keyA = await createKey(nameA)
      assert.equal((await listWith(keyA)).status, 200, 'the new key works')
      // The list shows keys masked, never whole.
      assert.ok(!(await page.locator('#keys').innerText()).includes(keyA))
      await screenshot(t, page, 'keys')
      await page.locator('#keys tbody tr', { hasText: nameA }).locator('button').click()
      await page.locator('#keys tbody tr', { hasText: nameA }).waitFor({ state: 'detached' })
      assert.equal((await listWith(keyA)).status, 401, 'the revoked key is refused')

      // A session of its own key, which revokes it.
      const nameB = `dash-b-${runTag}`
      const keyB = await createKey(nameB)
      const b = await signedInPage(keyB)
      try {
        await b.page.goto(`${apiUrl}/dashboard/keys`)
        const own = b.page.locator('#keys tbody tr', { hasText: `${nameB} (this session)` })
        await Promise.all([b.page.waitForURL(/\/dashboard\/sign-in$/), own.locator('button').click()])
        assert.deepEqual((await b.context.cookies()).filter((c) => c.name === 'agent_sandbox_session'), [], 'the session cookie is gone')
        assert.deepEqual(b.errors, [])
      } finally {
        await b.context.close()
      }
      assert.equal((await listWith(keyB)).status, 401)
      const res = await dashFetch('/dashboard/api/keys', { headers: { Cookie: `agent_sandbox_session=${keyB}` } })
      assert.equal(res.status, 401, 'the revoked key is no session')
      assert.deepEqual(errors, [])
    } finally {
      await context.close()
    }
  })

  test('the host page: sandboxes by state, capacity and the backend', async (t) => {
    const { context, page, errors } = await signedInPage()
    try {
      await page.goto(`${apiUrl}/dashboard/host`)
      const running = page.locator('#states tr[data-key="running"] td').nth(1)
      await running.waitFor()
      // The page refreshes every 5 s; sandboxes of other files come and go.
      await waitFor(
        async () => {
          const listed = await apiFetch('/v2/sandboxes?state=running&limit=100').then((r) => r.json())
          const shown = Number(await running.innerText())
          return shown >= 2 && shown === listed.length
        },
        { timeoutMs: 20_000, what: 'the running count of the API on the host page' },
      )
      assert.match(await page.locator('#backends tbody').innerText(), /starts new sandboxes/)
      assert.match(await page.locator('#capacity tbody').innerText(), /vCPUs of running sandboxes\s+\d+\s+\d+ host CPUs/)
      await screenshot(t, page, 'host')
      assert.deepEqual(errors, [])
    } finally {
      await context.close()
    }
  })

  test('sign in, see the sandbox, run a command in its terminal, kill it', async (t) => {
    const context = await browser.newContext({ viewport: VIEWPORT, ignoreHTTPSErrors: true })
    const page = await context.newPage()
    const errors = watchErrors(page)
    try {
      await signIn(page)
      const cookie = (await context.cookies()).find((c) => c.name === 'agent_sandbox_session')
      assert.ok(cookie?.httpOnly && cookie.sameSite === 'Strict', JSON.stringify(cookie))
      assert.equal(cookie.secure, mode === 'tls')

      // The run's other files create sandboxes meanwhile, which can push
      // this one off the list's first page: filtered by this file's
      // metadata, as a user would look for theirs.
      await page.goto(`${apiUrl}/dashboard/?metadata=${encodeURIComponent(`${LIST_META_KEY}=${runTag}`)}`)
      const row = page.locator(`tr[data-sandbox-id="${sbx.sandboxId}"]`)
      await row.waitFor({ timeout: 15_000 })
      assert.match(await row.innerText(), /running/)
      const listShot = join(ARTIFACTS, `dashboard-list-${mode}.png`)
      await page.screenshot({ path: listShot, fullPage: true })
      t.diagnostic(`list screenshot: ${listShot}`)

      await Promise.all([page.waitForURL(/\/dashboard\/inspect\/sandbox\//), row.locator('a').click()])
      await page.locator('#info dd', { hasText: 'running' }).waitFor()
      // The prompt shows when the shell is up.
      await page.click('#open-terminal')
      await waitFor(
        async () => /\$\s*$/m.test(await page.locator('#terminal .xterm-rows').innerText({ timeout: 1_000 }).catch(() => '')),
        { timeoutMs: 40_000, what: 'the shell prompt in the terminal' },
      )
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

  test('templates: a build shows up, its log streams while it runs', async (t) => {
    const alias = `sdk-test-dash-${mode}`
    // A step that prints a line a second, so the log is read while it
    // runs; the run and mode in it keep the builder from taking the step
    // from its cache.
    const template = Template().fromTemplate('base').runCmd(`for i in 1 2 3 4 5 6; do echo dash-build-$i ${mode} ${runTag}; sleep 1; done`)
    const built = Template.build(template, alias)
    built.catch(() => {}) // awaited below
    const { context, page, errors } = await signedInPage()
    try {
      await page.goto(`${apiUrl}/dashboard/templates`)
      const row = page.locator('#builds tbody tr', { hasText: alias }).first()
      await waitFor(
        async () => {
          await page.goto(page.url())
          await page.locator('#templates tbody tr').first().waitFor()
          return (await row.count()) > 0
        },
        { timeoutMs: 60_000, what: `a build of ${alias} on the templates page` },
      )
      assert.match(await row.innerText(), /waiting|building/, 'the build is listed before it ends')
      await row.locator('button').click()
      const log = page.locator('#build-log')
      await waitFor(async () => (await log.innerText()).includes('dash-build-1'), { timeoutMs: 120_000, what: 'the first line of the step in the log' })
      assert.equal(await log.getAttribute('data-status'), 'building', 'the line came while the build ran')
      const info = await built
      await page.locator('#build-log[data-done="true"]').waitFor({ timeout: 60_000 })
      assert.equal(await log.getAttribute('data-status'), 'ready')
      const text = await log.innerText()
      assert.ok(text.indexOf('dash-build-1') < text.indexOf('dash-build-6'), text)
      await page.locator(`#builds tbody tr[data-build-id="${info.buildId}"]`, { hasText: 'ready' }).waitFor()
      await screenshot(t, page, 'templates')
      assert.deepEqual(errors, [])
    } finally {
      await context.close()
      await built.catch(() => {})
      await apiFetch(`/templates/${alias}`, { method: 'DELETE' })
    }
  })
})
