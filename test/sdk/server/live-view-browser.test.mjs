// The live view of a `browser` sandbox (docs/BROWSER.md): the same POST
// /sandboxes/{id}/live-view as a desktop's answers with links to a page
// the server itself serves under /browser/ of getHost(6090) and
// getHost(6091). The page draws the screencast of the sandbox's headless
// Chromium, which the server streams from its DevTools session, and
// through the takeover link sends the mouse and keyboard back. Debian's
// Chromium, launched by playwright-core, loads the links like a person
// would; the browser action API reads back what the input did.
//
// View-only must hold against a client that does not play along, so the
// refusal is shown with input sent on the view link's WebSocket by hand:
// the server answers that it refused it, and the page did not change. The
// same click through the takeover page does change it: the positive
// control.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

import { RUN_META_KEY, apiFetch, hostUrl, killCreated, launchChromium, liveView, mode, runTag, serveDir, sleep, track, upgradeStatus, waitFor } from './helpers.mjs'
import { lumaVariance } from './png.mjs'

const VIEW_PORT = 6090
const TAKEOVER_PORT = 6091
const PORT = 8000
const PAGE = `http://127.0.0.1:${PORT}/button.html`
const SITE = '/home/user/site'
/**
 * The button's middle, in CSS pixels of the sandbox's page: headless
 * Chromium's viewport is 780x437, which the page fits in.
 */
const BUTTON = { x: 200, y: 120 }
/** The text field's middle. */
const FIELD = { x: 200, y: 255 }

// A button whose click retitles the page, and a field whose text the page
// echoes: only input that reached the page changes them.
const BUTTON_PAGE = `<!doctype html><html><head><title>not clicked</title></head>
<body style="margin:0;background:#fff;font:20px sans-serif">
<p style="margin:8px">Live view of a browser sandbox</p>
<button id="b" style="position:absolute;left:40px;top:50px;width:320px;height:140px;font-size:32px;background:#2a6;color:#fff">Press me</button>
<input id="t" style="position:absolute;left:40px;top:230px;width:320px;height:50px;font-size:28px">
<p id="echo" style="position:absolute;left:40px;top:290px">none</p>
<script>
document.getElementById('b').addEventListener('click', () => { document.title = 'clicked' })
document.getElementById('t').addEventListener('input', (e) => { document.getElementById('echo').textContent = e.target.value })
</script></body></html>`

after(killCreated)

/** POSTs one browser action to sandbox id and answers its JSON body. */
async function act(id, action) {
  const res = await apiFetch(`/sandboxes/${id}/browser/actions`, { method: 'POST', body: JSON.stringify(action) })
  const body = await res.json()
  assert.equal(res.status, 200, `${JSON.stringify(action)}: ${JSON.stringify(body)}`)
  return body
}

/** The page's title, read back through the action API. */
async function title(id) {
  return (await act(id, { action: 'extract', format: 'html', selector: 'title' })).html
}

/** The WebSocket URL of the live view page at pageUrl, with its token. */
function socketUrl(pageUrl) {
  const u = new URL(pageUrl)
  return `${u.origin}/browser/websocket${u.search}`
}

describe(`live view of a browser sandbox (${mode} mode)`, { timeout: 300_000 }, () => {
  let sbx
  let browser
  let links

  before(async () => {
    sbx = await Sandbox.create('browser', { timeoutMs: 300_000, metadata: { [RUN_META_KEY]: runTag } })
    track(sbx.sandboxId)
    await sbx.files.write(`${SITE}/button.html`, BUTTON_PAGE)
    await serveDir(sbx, SITE, PORT)
    await act(sbx.sandboxId, { action: 'navigate', url: PAGE })
    browser = await launchChromium()
    links = await liveView(sbx, { ttl: 600 })
  })

  after(async () => {
    await browser?.close()
  })

  /**
   * Opens url in a fresh page and waits until it has drawn a frame;
   * answers the page and the frame's size.
   */
  async function open(url) {
    const page = await browser.newPage({ viewport: { width: 1024, height: 768 }, ignoreHTTPSErrors: true })
    const errors = []
    page.on('pageerror', (err) => errors.push(err.message))
    await page.goto(url)
    await page
      .waitForFunction(() => Number(document.getElementById('screen').dataset.frames) > 0, null, { timeout: 40_000 })
      .catch(async (err) => {
        const status = await page.locator('#status').textContent()
        assert.fail(`no frame drawn: ${err.message}; status: ${status}; page errors: ${errors.join('; ') || 'none'}`)
      })
    const frame = await page.evaluate(() => {
      const canvas = document.getElementById('screen')
      return { width: canvas.width, height: canvas.height }
    })
    return { page, frame }
  }

  /** Clicks through the viewer page at the sandbox page's CSS point p (the frame is the viewport, unscaled). */
  async function clickAt(page, frame, p) {
    const box = await page.locator('#screen').boundingBox()
    const scale = Math.min(box.width / frame.width, box.height / frame.height)
    const x = box.x + (box.width - frame.width * scale) / 2 + p.x * scale
    const y = box.y + (box.height - frame.height * scale) / 2 + p.y * scale
    await page.mouse.click(x, y)
  }

  test('the answer: a view link and a takeover link to the server’s page under getHost, and their expiry', () => {
    for (const [link, port] of [
      [links.url, VIEW_PORT],
      [links.takeoverUrl, TAKEOVER_PORT],
    ]) {
      const u = new URL(link)
      assert.equal(u.host, sbx.getHost(port))
      assert.equal(u.pathname, '/browser/')
      assert.ok(u.searchParams.get('token'), link)
    }
    const ttl = Date.parse(links.expiresAt) - Date.now()
    assert.ok(ttl > 590_000 && ttl <= 600_000, `expiresAt ${links.expiresAt}`)
  })

  test('the view page in headless Chromium shows the sandbox’s page', async (t) => {
    const { page, frame } = await open(links.url)
    assert.match(await page.locator('#status').textContent(), /view only/)
    // The frame itself, as the canvas holds it: PNG through toDataURL.
    const dataUrl = await page.evaluate(() => document.getElementById('screen').toDataURL('image/png'))
    const shot = lumaVariance(Buffer.from(dataUrl.split(',')[1], 'base64'))
    assert.ok(shot.variance > 10, `the frame is blank: luma variance ${shot.variance}`)
    assert.ok(frame.width >= 400 && frame.height >= 320, `frame ${frame.width}x${frame.height}: smaller than the test page`)
    t.diagnostic(`browser live view: frame ${shot.width}x${shot.height}, luma variance ${shot.variance.toFixed(0)}`)
    await page.close()
  })

  test('view-only is the server’s: input sent on the view link’s WebSocket is refused and never reaches the page', async (t) => {
    const { page, frame } = await open(links.url)
    // The page sends nothing in view mode: a click on it is inert.
    await clickAt(page, frame, BUTTON)
    // A client that does not play along sends the click itself.
    const answers = await page.evaluate(
      ({ url, x, y }) =>
        new Promise((resolve, reject) => {
          const ws = new WebSocket(url.replace(/^http/, 'ws'))
          const got = []
          ws.onmessage = (ev) => {
            if (typeof ev.data !== 'string') return // frames
            got.push(JSON.parse(ev.data))
            if (got.filter((m) => m.error).length === 2) {
              ws.close()
              resolve(got)
            }
          }
          ws.onopen = () => {
            for (const type of ['mousePressed', 'mouseReleased']) ws.send(JSON.stringify({ type, x, y, button: 'left', clickCount: 1 }))
          }
          ws.onerror = () => reject(new Error('the view WebSocket failed'))
          setTimeout(() => reject(new Error(`no refusal within 15 s; got ${JSON.stringify(got)}`)), 15_000)
        }),
      { url: socketUrl(links.url), x: BUTTON.x / frame.width, y: BUTTON.y / frame.height }
    )
    assert.equal(answers[0].mode, 'view')
    for (const a of answers.filter((m) => m.error)) assert.match(a.error, /view-only link/)
    await sleep(1000)
    assert.equal(await title(sbx.sandboxId), '<title>not clicked</title>')
    t.diagnostic(`view link: ${answers.filter((m) => m.error).length} input events refused: ${answers.find((m) => m.error).error}`)
    await page.close()
  })

  test('the takeover link’s click and keys do reach the page (the positive control)', async (t) => {
    const { page, frame } = await open(links.takeoverUrl)
    assert.match(await page.locator('#status').textContent(), /drive the browser/)
    await clickAt(page, frame, BUTTON)
    await waitFor(async () => (await title(sbx.sandboxId)) === '<title>clicked</title>', {
      timeoutMs: 15_000,
      intervalMs: 250,
      what: 'the click to retitle the page',
    })
    await clickAt(page, frame, FIELD)
    await page.keyboard.type('typed-ok', { delay: 20 })
    await waitFor(async () => (await act(sbx.sandboxId, { action: 'extract', format: 'text', selector: '#echo' })).text === 'typed-ok', {
      timeoutMs: 15_000,
      intervalMs: 250,
      what: 'the typed text in the page',
    })
    // What the input did shows in the frames too: the page drew again.
    const drawn = Number(await page.locator('#screen').getAttribute('data-frames'))
    assert.ok(drawn > 1, `${drawn} frames drawn`)
    t.diagnostic(`takeover link: the click retitled the page, the keys typed into its field; ${drawn} frames drawn`)
    await page.close()
  })

  test('the router lets the WebSocket through only with a token for that port, and not after expiry', async () => {
    const view = socketUrl(links.url)
    const takeover = socketUrl(links.takeoverUrl)
    assert.equal(await upgradeStatus(view), 101, 'view socket, view token')
    assert.equal(await upgradeStatus(takeover), 101, 'takeover socket, takeover token')
    const viewToken = new URL(view).searchParams.get('token')
    assert.equal(await upgradeStatus(hostUrl(sbx, TAKEOVER_PORT, `/browser/websocket?token=${viewToken}`)), 403, 'takeover socket, view token')
    assert.equal(await upgradeStatus(hostUrl(sbx, VIEW_PORT, '/browser/websocket')), 403, 'view socket, no token')

    const short = await liveView(sbx, { ttl: 1 })
    await sleep(2100)
    assert.equal(await upgradeStatus(socketUrl(short.url)), 403, 'an expired view link')
    assert.equal(await upgradeStatus(socketUrl(short.takeoverUrl)), 403, 'an expired takeover link')
  })
})
