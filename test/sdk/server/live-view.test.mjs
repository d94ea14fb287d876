// The live view of a `desktop` sandbox (docs/BROWSER.md): POST
// /sandboxes/{id}/live-view answers with a view-only link and a takeover
// link to noVNC pages the sandbox serves at getHost(6090) and
// getHost(6091). Debian's Chromium, launched by playwright-core, loads them
// like a person would.
//
// View-only must hold against a client that does not play along, so the
// refusal is shown with the view link's page switched to view_only=false:
// noVNC then sends the clicks and keys, and the sandbox's view-only x11vnc
// drops them. The same clicks and keys through the takeover page reach the
// xterm and run the command: the positive control.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/desktop'

import { RUN_META_KEY, apiKey, apiUrl, hostUrl, killCreated, launchChromium, liveView, mode, openXterm, runTag, sleep, track, upgradeStatus, waitFor } from './helpers.mjs'
import { lumaVariance } from './png.mjs'

const VIEW_PORT = 6090
const TAKEOVER_PORT = 6091
const DISPLAY = { width: 1024, height: 768 }

/** The WebSocket URL the noVNC page of pageUrl connects to: its path setting, under the page's origin. */
function socketUrl(pageUrl) {
  const u = new URL(pageUrl)
  return `${u.origin}/${u.searchParams.get('path')}`
}

after(killCreated)

describe(`live view of a desktop sandbox (${mode} mode)`, { timeout: 300_000 }, () => {
  let sbx
  let browser
  let centre // of the xterm, in display pixels
  let links

  before(async () => {
    sbx = await Sandbox.create({ resolution: [DISPLAY.width, DISPLAY.height], timeoutMs: 300_000, metadata: { [RUN_META_KEY]: runTag } })
    track(sbx.sandboxId)
    centre = await openXterm(sbx, 'LiveView')
    browser = await launchChromium()
    links = await liveView(sbx, { ttl: 600 })
  })

  after(async () => {
    await browser?.close()
  })

  /** Opens url in a fresh page the display's size and waits until noVNC is connected. */
  async function open(url) {
    const page = await browser.newPage({ viewport: DISPLAY, ignoreHTTPSErrors: true })
    await page.goto(url)
    await page
      .waitForFunction(() => document.documentElement.classList.contains('noVNC_connected'), null, { timeout: 40_000 })
      .catch(async (err) => assert.fail(`noVNC not connected (status: ${await page.locator('#noVNC_status').textContent()}): ${err.message}`))
    return page
  }

  /** Clicks the xterm through page's noVNC canvas, types line and presses Enter. */
  async function typeIntoTerminal(page, line) {
    const box = await page.locator('#noVNC_container canvas').boundingBox()
    await page.mouse.click(box.x + (centre.x * box.width) / DISPLAY.width, box.y + (centre.y * box.height) / DISPLAY.height)
    await page.keyboard.type(line, { delay: 20 })
    await page.keyboard.press('Enter')
  }

  test('the answer: a view link and a takeover link under getHost, and their expiry', () => {
    assert.equal(new URL(links.url).host, sbx.getHost(VIEW_PORT))
    assert.equal(new URL(links.takeoverUrl).host, sbx.getHost(TAKEOVER_PORT))
    assert.equal(new URL(links.url).searchParams.get('view_only'), 'true')
    const ttl = Date.parse(links.expiresAt) - Date.now()
    assert.ok(ttl > 590_000 && ttl <= 600_000, `expiresAt ${links.expiresAt}`)
  })

  test('the view page in headless Chromium shows the desktop', async (t) => {
    const page = await open(links.url)
    let shot
    // The canvas is black until the first framebuffer update is drawn.
    await waitFor(
      async () => {
        shot = lumaVariance(await page.locator('#noVNC_container canvas').screenshot())
        return shot.variance > 10
      },
      { timeoutMs: 20_000, intervalMs: 500, what: 'a desktop on the canvas' }
    )
    t.diagnostic(`live view canvas ${shot.width}x${shot.height}, luma variance ${shot.variance.toFixed(0)}`)
    await page.close()
  })

  test('view-only is the server’s: input sent through the view link never reaches the desktop', async (t) => {
    // Give the xterm the focus, so that a key reaching X would land in it.
    await sbx.leftClick(centre.x, centre.y)
    const before = await sbx.getCursorPosition()
    const url = new URL(links.url)
    url.searchParams.set('view_only', 'false') // a client that does not play along
    const page = await open(url.href)
    await typeIntoTerminal(page, 'echo view > /tmp/live-view-view')
    await page.mouse.move(10, 10)
    await sleep(3000)
    const r = await sbx.commands.run('test -e /tmp/live-view-view && echo arrived || echo refused')
    assert.equal(r.stdout.trim(), 'refused')
    assert.deepEqual(await sbx.getCursorPosition(), before, 'the pointer moved')
    t.diagnostic(`view link, view_only=false page: keys and pointer refused (cursor stayed at ${before.x},${before.y})`)
    await page.close()
  })

  test('the takeover link’s input does reach the desktop (the positive control)', async (t) => {
    const page = await open(links.takeoverUrl)
    await typeIntoTerminal(page, 'echo takeover > /tmp/live-view-takeover')
    await waitFor(
      () => sbx.commands.run('cat /tmp/live-view-takeover').then((r) => r.stdout === 'takeover\n', () => false),
      { timeoutMs: 15_000, intervalMs: 250, what: '/tmp/live-view-takeover' }
    )
    t.diagnostic('takeover link: the typed command ran in the xterm')
    await page.close()
  })

  // The dashboard frames the view where its host and the sandbox hosts are
  // one site (tls mode: api.sandbox.test beside *.sandbox.test); across
  // sites (header mode: 127.0.0.1 and *.localhost) a frame would get no
  // storage, so it links to the view instead.
  test('the dashboard’s detail page shows the view, or links to it across sites', async (t) => {
    const context = await browser.newContext({ viewport: { width: 1366, height: 1400 }, ignoreHTTPSErrors: true })
    const page = await context.newPage()
    // A frame the page's Content-Security-Policy refuses is a console error
    // of the page. noVNC's own (Debian's package has no package.json, which
    // it asks for) are the frame's.
    const errors = []
    const dashboard = new URL(apiUrl).origin
    page.on('console', (msg) => {
      const from = msg.location().url
      if (msg.type() === 'error' && (!from || from.startsWith(dashboard))) errors.push(`console: ${msg.text()} (${from})`)
    })
    page.on('pageerror', (err) => errors.push(`page error: ${err.message}`))
    await page.goto(`${apiUrl}/dashboard/`)
    await page.fill('#key', apiKey)
    await Promise.all([page.waitForURL(/\/dashboard\/$/), page.click('button[type=submit]')])
    await page.goto(`${apiUrl}/dashboard/inspect/sandbox/${sbx.sandboxId}`)
    await page.click('#live-view')
    const link = page.locator('#live-view-status a')
    await link.waitFor()
    assert.equal(new URL(await link.getAttribute('href')).host, sbx.getHost(VIEW_PORT))
    if (mode === 'header') {
      assert.equal(await page.locator('#live-view-frame').count(), 0)
      t.diagnostic('dashboard live view: a link (another site)')
    } else {
      const canvas = page.frameLocator('#live-view-frame').locator('#noVNC_container canvas')
      let shot
      const drawn = async () => {
        const png = await canvas.screenshot({ timeout: 5_000 }).catch(() => null) // no canvas drawn yet
        shot = png && lumaVariance(png)
        return shot?.variance > 10
      }
      await waitFor(drawn, { timeoutMs: 40_000, intervalMs: 1000, what: 'the desktop in the dashboard’s live view' }).catch((err) => assert.fail(`${err.message}; the page's errors: ${errors.join('; ') || 'none'}`))
      t.diagnostic(`dashboard live view: framed, canvas ${shot.width}x${shot.height}, luma variance ${shot.variance.toFixed(0)}`)
    }
    assert.deepEqual(errors, [])
    await context.close()
  })

  test('the router lets a WebSocket through only with a token for that port, and not after expiry', async () => {
    const view = socketUrl(links.url)
    const takeover = socketUrl(links.takeoverUrl)
    assert.equal(await upgradeStatus(view), 101, 'view socket, view token')
    assert.equal(await upgradeStatus(takeover), 101, 'takeover socket, takeover token')
    const viewToken = new URL(view).searchParams.get('token')
    assert.equal(await upgradeStatus(hostUrl(sbx, TAKEOVER_PORT, `/websockify?token=${viewToken}`)), 403, 'takeover socket, view token')
    assert.equal(await upgradeStatus(hostUrl(sbx, VIEW_PORT, '/websockify')), 403, 'view socket, no token')
    assert.equal(await upgradeStatus(hostUrl(sbx, 5911, '/')), 403, 'the takeover x11vnc itself')

    const short = await liveView(sbx, { ttl: 1 })
    await sleep(2100)
    assert.equal(await upgradeStatus(socketUrl(short.url)), 403, 'an expired view link')
    assert.equal(await upgradeStatus(socketUrl(short.takeoverUrl)), 403, 'an expired takeover link')
  })

  test('a bad request is refused naming the field', async () => {
    assert.match((await liveView(sbx, { ttl: 0 }, 400)).message, /^ttl: /)
    assert.match((await liveView(sbx, { ttl: 86_401 }, 400)).message, /^ttl: /)
    assert.match((await liveView(sbx, { ttll: 5 }, 400)).message, /unknown field "ttll"/)
  })
})
