// The official @e2b/desktop SDK (2.4.0) against sandboxes of the built-in
// `desktop` template (spec §5): Sandbox.create starts Xvfb and XFCE in the
// sandbox with commands.run, every call after that is xdotool, scrot,
// xrandr or gtk-launch through commands.run, and the stream is x11vnc plus
// noVNC (websockify) on port 6080, reached through getHost like any port.
// The template's own Chromium comes up headful on the display once Xvfb
// is up, with DevTools at getHost(9222): the browser action API drives
// the browser the screenshots show.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { Sandbox } from '@e2b/desktop'

import { RUN_META_KEY, apiFetch, fetchUntilOk, hostUrl, killCreated, mode, runTag, serveDir, track, waitFor, websocketRequest } from './helpers.mjs'
import { colorShare } from './png.mjs'

const PNG_SIGNATURE = '89504e470d0a1a0a'
const NOVNC_PORT = 6080
const DEVTOOLS_PORT = 9222
const RED = [255, 0, 0]

/** Sandbox.create of @e2b/desktop (its default template, `desktop`), tagged for this run. */
async function create(opts = {}) {
  const t0 = performance.now()
  const sbx = await Sandbox.create({ timeoutMs: 300_000, ...opts, metadata: { [RUN_META_KEY]: runTag } })
  const ms = performance.now() - t0
  track(sbx.sandboxId)
  return { sbx, ms }
}

/** Width and height from a PNG's IHDR chunk, after checking the signature. */
function pngSize(bytes) {
  const b = Buffer.from(bytes)
  assert.equal(b.subarray(0, 8).toString('hex'), PNG_SIGNATURE, 'not a PNG')
  assert.equal(b.subarray(12, 16).toString('latin1'), 'IHDR')
  return { width: b.readUInt32BE(16), height: b.readUInt32BE(20) }
}

/** One masked client frame (FIN, binary): what a browser's noVNC sends. */
function clientFrame(payload) {
  assert.ok(payload.length < 126)
  const mask = randomBytes(4)
  const body = Buffer.from(payload.map((x, i) => x ^ mask[i & 3]))
  return Buffer.concat([Buffer.from([0x82, 0x80 | payload.length]), mask, body])
}

/**
 * Speaks the start of RFB through the noVNC websocket (websockify in the
 * sandbox → x11vnc), as the browser page of stream.getUrl() would: reads
 * the server's version, answers with the same version and returns the
 * security types the server offers (1 = none, 2 = VNC password).
 */
function rfbSecurityTypes(url, timeoutMs = 10_000) {
  return new Promise((resolve, reject) => {
    const req = websocketRequest(url, timeoutMs)
    req.on('timeout', () => req.destroy(new Error(`no RFB handshake within ${timeoutMs} ms`)))
    req.on('error', reject)
    req.on('response', (res) => {
      res.resume()
      reject(new Error(`websocket upgrade answered ${res.statusCode}`))
    })
    req.on('upgrade', (res, socket, head) => {
      const timer = setTimeout(() => socket.destroy(new Error(`no RFB handshake within ${timeoutMs} ms`)), timeoutMs)
      socket.on('error', (err) => {
        clearTimeout(timer)
        reject(err)
      })
      let buf = head
      let sentVersion = false
      const frames = []
      socket.on('data', (chunk) => {
        buf = Buffer.concat([buf, chunk])
        // Server frames are unmasked and, here, shorter than 126 bytes.
        while (buf.length >= 2 && buf.length >= 2 + (buf[1] & 0x7f)) {
          frames.push(buf.subarray(2, 2 + (buf[1] & 0x7f)))
          buf = buf.subarray(2 + (buf[1] & 0x7f))
        }
        if (frames.length === 1 && !sentVersion) {
          sentVersion = true
          const version = frames[0].toString('latin1')
          if (!/^RFB \d{3}\.\d{3}\n$/.test(version)) {
            socket.destroy()
            return reject(new Error(`RFB version ${JSON.stringify(version)}`))
          }
          socket.write(clientFrame([...frames[0]]))
        }
        if (frames.length >= 2) {
          clearTimeout(timer)
          socket.destroy()
          const types = frames[1]
          resolve({ version: frames[0].toString('latin1').trim(), types: [...types.subarray(1, 1 + types[0])] })
        }
      })
    })
    req.end()
  })
}

after(killCreated)

describe(`@e2b/desktop (${mode} mode)`, { timeout: 240_000 }, () => {
  let sbx
  let createMs
  before(async () => {
    ;({ sbx, ms: createMs } = await create())
  })

  test('figures: Sandbox.create (sandbox, Xvfb and XFCE up)', (t) => {
    t.diagnostic(`desktop Sandbox.create → XFCE running: ${createMs.toFixed(0)} ms`)
  })

  test('the desktop runs: DISPLAY reaches commands, XFCE processes are up', async () => {
    const r = await sbx.commands.run('echo $DISPLAY; pgrep -x Xvfb >/dev/null && pgrep -x xfwm4 >/dev/null && pgrep -x xfdesktop >/dev/null && echo up')
    assert.equal(r.stdout, ':0\nup\n')
  })

  test('getScreenSize is 1024x768 and screenshot is a PNG of that size', async () => {
    assert.deepEqual(await sbx.getScreenSize(), { width: 1024, height: 768 })
    const png = await sbx.screenshot()
    assert.ok(png instanceof Uint8Array)
    assert.deepEqual(pngSize(png), { width: 1024, height: 768 })
    const blob = await sbx.screenshot('blob')
    assert.deepEqual(pngSize(new Uint8Array(await blob.arrayBuffer())), { width: 1024, height: 768 })
  })

  test('moveMouse and getCursorPosition round-trip', async () => {
    for (const [x, y] of [[10, 20], [512, 384], [1023, 767]]) {
      await sbx.moveMouse(x, y)
      assert.deepEqual(await sbx.getCursorPosition(), { x, y })
    }
    await sbx.drag([100, 100], [200, 150])
    assert.deepEqual(await sbx.getCursorPosition(), { x: 200, y: 150 })
  })

  test('launch an xterm, click into it, write and press Enter: the command runs', async () => {
    const before = Buffer.from(await sbx.screenshot())
    await sbx.launch('debian-xterm')
    const windows = await waitFor(
      () => sbx.getApplicationWindows('xterm').then((w) => w.filter(Boolean), () => null),
      { timeoutMs: 20_000, intervalMs: 250, what: 'an xterm window' }
    )
    assert.equal(windows.length, 1)
    // Where the window manager put it: click into its middle to focus it.
    const geo = await sbx.commands.run(`xdotool getwindowgeometry --shell ${windows[0]}`)
    const g = Object.fromEntries(geo.stdout.trim().split('\n').map((l) => l.split('=')))
    await sbx.leftClick(Number(g.X) + Math.floor(g.WIDTH / 2), Number(g.Y) + Math.floor(g.HEIGHT / 2))
    await waitFor(async () => (await sbx.getCurrentWindowId()) === windows[0], { what: 'the xterm to have the focus' })
    assert.match(await sbx.getWindowTitle(windows[0]), /^user@/)

    const word = `typed-${randomBytes(4).toString('hex')}`
    await sbx.write(`echo ${word} > /tmp/typed.txt`)
    await sbx.press('enter')
    // A loaded host (other files' desktops and recordings beside) has
    // taken more than 10 s to run the typed line.
    const typed = await waitFor(() => sbx.files.read('/tmp/typed.txt').catch(() => null), {
      timeoutMs: 30_000,
      what: '/tmp/typed.txt',
    })
    assert.equal(typed, `${word}\n`)
    const afterShot = Buffer.from(await sbx.screenshot())
    assert.ok(!afterShot.equals(before), 'the screen did not change')
  })

  test('Chromium on the display: DevTools at getHost(9222), a navigate by the action API shows on the screen', async (t) => {
    // It starts once the display is up, after Sandbox.create.
    const res = await fetchUntilOk(hostUrl(sbx, DEVTOOLS_PORT, '/json/version'), { timeoutMs: 60_000, intervalMs: 500 })
    const v = await res.json()
    assert.match(v.Browser, /^Chrome\//, `headful Chromium, not HeadlessChrome: ${JSON.stringify(v)}`)
    const ws = mode === 'tls' ? 'wss' : 'ws'
    assert.ok(v.webSocketDebuggerUrl.startsWith(`${ws}://${sbx.getHost(DEVTOOLS_PORT)}/devtools/browser/`), v.webSocketDebuggerUrl)

    await sbx.files.write('/home/user/red/index.html', '<!doctype html><html><body style="margin:0;background:rgb(255,0,0)"></body></html>')
    await serveDir(sbx, '/home/user/red', 8001)
    const before = colorShare(Buffer.from(await sbx.screenshot()), RED)
    const nav = await apiFetch(`/sandboxes/${sbx.sandboxId}/browser/actions`, {
      method: 'POST',
      body: JSON.stringify({ action: 'navigate', url: 'http://127.0.0.1:8001/', timeoutMs: 30_000 }),
    })
    assert.equal(nav.status, 200, await nav.text())
    // The page is drawn on the display a frame or two after it loaded.
    let share = before
    await waitFor(
      async () => {
        share = colorShare(Buffer.from(await sbx.screenshot()), RED)
        return share > 0.3
      },
      { timeoutMs: 15_000, intervalMs: 500, what: 'the red page over 30 % of the display' }
    ).catch((err) => {
      throw new Error(`${err.message}; the last screenshot was ${(share * 100).toFixed(1)} % red`)
    })
    t.diagnostic(`red share of the screen: ${(before * 100).toFixed(1)} % before, ${(share * 100).toFixed(1)} % after the navigate`)
    assert.ok(before < 0.05, `red before the navigate: ${before}`)
  })

  test('stream: x11vnc and noVNC start, the URL is served through getHost and reaches the VNC server', async () => {
    await sbx.stream.start()
    try {
      const url = new URL(sbx.stream.getUrl())
      assert.equal(`${url.origin}${url.pathname}`, `https://${sbx.getHost(NOVNC_PORT)}/vnc.html`)
      assert.equal(url.searchParams.get('autoconnect'), 'true')
      assert.equal(url.searchParams.get('resize'), 'scale')
      // The SDK always says https; the header-mode server speaks http.
      const page = await fetchUntilOk(hostUrl(sbx, NOVNC_PORT, url.pathname))
      assert.equal(page.status, 200)
      assert.match(await page.text(), /<title>noVNC<\/title>/)
      const rfb = await rfbSecurityTypes(hostUrl(sbx, NOVNC_PORT, '/websockify'))
      assert.match(rfb.version, /^RFB 003\.00[38]$/)
      assert.deepEqual(rfb.types, [1], 'without requireAuth the VNC server asks for no password')
    } finally {
      await sbx.stream.stop()
    }
    // stop() sends x11vnc SIGTERM; a new start() refuses while it runs.
    await waitFor(() => sbx.commands.run('pgrep -x x11vnc').then(() => false, () => true), {
      what: 'x11vnc to exit after stream.stop()',
    })
  })

  test('stream with requireAuth: the VNC server wants the password, the URL carries it', async () => {
    await sbx.stream.start({ requireAuth: true })
    try {
      const key = sbx.stream.getAuthKey()
      assert.match(key, /^[A-Za-z0-9]{16}$/)
      assert.equal(new URL(sbx.stream.getUrl({ authKey: key })).searchParams.get('password'), key)
      await fetchUntilOk(hostUrl(sbx, NOVNC_PORT, '/vnc.html'))
      const rfb = await rfbSecurityTypes(hostUrl(sbx, NOVNC_PORT, '/websockify'))
      assert.deepEqual(rfb.types, [2], 'with requireAuth the VNC server asks for a password')
    } finally {
      await sbx.stream.stop()
    }
  })

  test('resolution option: the screen and screenshots are 800x600', async () => {
    const { sbx: small } = await create({ resolution: [800, 600] })
    assert.deepEqual(await small.getScreenSize(), { width: 800, height: 600 })
    assert.deepEqual(pngSize(await small.screenshot()), { width: 800, height: 600 })
    await small.kill()
  })
})
