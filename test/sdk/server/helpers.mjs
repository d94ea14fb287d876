// Shared fixtures for the server tests. run.mjs starts `agent-sandbox serve`
// and passes its coordinates through the environment (E2B_* as a user would
// set them, plus SDK_TEST_*); these tests then use the SDK exactly like an
// application: Sandbox.create() with the default template `base`.

import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import { request as httpsRequest } from 'node:https'
import { setTimeout as sleep } from 'node:timers/promises'
import { Sandbox } from 'e2b'
import { launchInOwnNetns } from '../browser-netns.mjs'

function required(name) {
  const v = process.env[name]
  if (!v) {
    throw new Error(`${name} is not set; run these tests through test/sdk/run.mjs, which starts agent-sandbox serve`)
  }
  return v
}

/** 'header' (E2B_API_URL + E2B_SANDBOX_URL over http) or 'tls' (host routing over https). */
export const mode = required('SDK_TEST_MODE')
/** Control-plane base URL for raw requests (what the SDK uses too). */
export const apiUrl = required('SDK_TEST_API_URL')
export const apiKey = required('E2B_API_KEY')
/** Unique per runner invocation; every sandbox the tests create carries it as metadata. */
export const runTag = required('SDK_TEST_RUN')
/** Scheme for https?://getHost(port): the TLS server only speaks https, the header-mode one only http. */
export const hostScheme = mode === 'tls' ? 'https' : 'http'

export const USER = 'user'
export const HOME = '/home/user'
export const RUN_META_KEY = 'sdkTestRun'

const created = new Set()

/** Remembers a sandbox id so killCreated() kills it. */
export function track(id) {
  created.add(id)
  return id
}

/**
 * Sandbox.create() with the default template, tagged with this run's
 * metadata and remembered for killCreated(). Returns { sbx, ms } (ms = create latency).
 */
export async function createSandbox(opts = {}) {
  const t0 = performance.now()
  const sbx = await Sandbox.create({ ...opts, metadata: { [RUN_META_KEY]: runTag, ...(opts.metadata ?? {}) } })
  const ms = performance.now() - t0
  track(sbx.sandboxId)
  return { sbx, ms }
}

/** Kills every sandbox this file created (for after()); unknown ids are fine. */
export async function killCreated() {
  const ids = [...created]
  created.clear()
  await Promise.all(ids.map((id) => Sandbox.kill(id).catch(() => {})))
}

/** fetch against the control plane with the API key. */
export function apiFetch(path, init = {}) {
  return fetch(`${apiUrl}${path}`, {
    ...init,
    headers: { 'X-API-Key': apiKey, ...(init.body ? { 'Content-Type': 'application/json' } : {}), ...(init.headers ?? {}) },
    signal: init.signal ?? AbortSignal.timeout(60_000),
  })
}

/** URL of a sandbox port as a user would build it: <scheme>://getHost(port)<path>. */
export function hostUrl(sbx, port, path = '/') {
  return `${hostScheme}://${sbx.getHost(port)}${path}`
}

/**
 * Fetches url until it answers 200 or timeoutMs passes; returns the last Response (or throws the last error).
 * 30 s: a server the test just started in a VM under emulation (python3's first start) takes over 10.
 */
export async function fetchUntilOk(url, { timeoutMs = 30_000, intervalMs = 250 } = {}) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    try {
      last = await fetch(url, { signal: AbortSignal.timeout(5_000) })
      if (last.status === 200) return last
      await last.body?.cancel()
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) {
      if (last instanceof Error) throw last
      return last
    }
    await sleep(intervalMs)
  }
}

/** Polls fn until it returns a truthy value or timeoutMs passes; returns the value. */
export async function waitFor(fn, { timeoutMs = 5_000, intervalMs = 100, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(intervalMs)
  }
}

/**
 * Opens an xterm of class name on sbx's desktop and returns the centre of
 * its window in display pixels, once it is mapped. The desktop template
 * starts Chromium maximized as soon as the display is up, and Chromium's
 * window, mapped after the xterm, would cover it and take the focus: so
 * the xterm opens only when Chromium's window is there, and counts as open
 * when its shell is at the prompt.
 */
export async function openXterm(sbx, name) {
  const visible = (cls) =>
    sbx.commands
      .run(`xdotool search --onlyvisible --class ${cls} getwindowgeometry --shell`, { timeoutMs: 10_000 })
      .then((r) => (r.stdout.includes('WIDTH=') ? r.stdout : null), () => null)
  await waitFor(() => visible('chromium'), { timeoutMs: 60_000, what: "the template's Chromium window" })
  // By its class: the shell's prompt retitles the window at once.
  await sbx.commands.run(`xterm -class ${name} -geometry 60x12+200+200`, { background: true, timeoutMs: 0 })
  const geometry = await waitFor(() => visible(name), { timeoutMs: 30_000, what: `the xterm ${name}` })
  // Its shell is reading the keyboard once its prompt has set the title.
  const title = () => sbx.commands.run(`xdotool search --class ${name} getwindowname`).then((r) => /^user@/m.test(r.stdout), () => false)
  await waitFor(title, { timeoutMs: 30_000, intervalMs: 250, what: `the shell's prompt in the xterm ${name}` })
  const v = Object.fromEntries(geometry.trim().split('\n').map((l) => l.split('=')))
  return { x: Number(v.X) + Number(v.WIDTH) / 2, y: Number(v.Y) + Number(v.HEIGHT) / 2 }
}

/** The backend the runner started the server with ('jail' or 'vm'). */
export const backend = process.env.SDK_TEST_BACKEND || 'jail'

/** Where startMemoryServer listens in the sandbox. */
export const MEMORY_PORT = 8123

/**
 * Starts, in sbx, a process whose state lives in its memory alone: a random
 * secret made at its start and a count of the requests it answered, served
 * on MEMORY_PORT as "<secret> <count>" (the count of that request). Nothing
 * of it is on disk, so a sandbox that answers with the secret has this
 * process's memory. The command is disconnected once it answers: the SDK
 * would answer a stream a pause cuts with a health check, which wakes a
 * sandbox with autoResume. Returns { pid, secret, count } after one request.
 */
export async function startMemoryServer(sbx) {
  const prog = `import http.server, secrets
s, n = secrets.token_hex(16), 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global n
        n += 1
        self.send_response(200)
        self.end_headers()
        self.wfile.write(f"{s} {n}".encode())
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", ${MEMORY_PORT}), H).serve_forever()`
  const handle = await sbx.commands.run(`python3 -c '${prog}'`, { background: true })
  await handle.disconnect()
  const { secret, count } = await readMemoryServer(sbx)
  return { pid: handle.pid, secret, count }
}

/** One request to sbx's startMemoryServer, through its getHost URL: { secret, count }. */
export async function readMemoryServer(sbx) {
  const res = await fetchUntilOk(hostUrl(sbx, MEMORY_PORT))
  const text = await res.text()
  assert.equal(res.status, 200, `the memory server of ${sbx.sandboxId}: ${res.status} ${text}`)
  const [secret, count] = text.split(' ')
  return { secret, count: Number(count) }
}

/** Whether sbx runs the process startMemoryServer started (by its pid and command line). */
export async function runsMemoryServer(sbx, pid) {
  const procs = await sbx.commands.list()
  return procs.some((p) => p.pid === pid && [p.cmd, ...p.args].join(' ').includes('secrets.token_hex'))
}

/** The sandbox's /proc/sys/kernel/random/boot_id: which boot of its kernel it runs in. */
export async function bootId(sbx) {
  return (await sbx.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout.trim()
}

/** Reads a JSON body, failing with the raw text when it is not JSON. */
export async function jsonBody(res) {
  const text = await res.text()
  try {
    return JSON.parse(text)
  } catch {
    throw new Error(`expected a JSON body, got status ${res.status} body ${JSON.stringify(text)}`)
  }
}

/** Collects all pages of Sandbox.list(opts). */
export async function listAll(opts) {
  const paginator = Sandbox.list(opts)
  const items = []
  while (paginator.hasNext) items.push(...(await paginator.nextItems()))
  return items
}

export function sha256(bytes) {
  return createHash('sha256').update(bytes).digest('hex')
}

export { sleep }

/**
 * Serves dir of sbx over HTTP on its loopback (python3 -m http.server on
 * 127.0.0.1:port, in the background) and waits until it answers.
 */
export async function serveDir(sbx, dir, port) {
  await sbx.commands.run(`python3 -m http.server ${port} --bind 127.0.0.1 --directory ${dir}`, { background: true, timeoutMs: 0 })
  await waitFor(() => sbx.commands.run(`curl -sf -o /dev/null http://127.0.0.1:${port}/`).then(() => true, () => false), {
    timeoutMs: 10_000,
    what: 'the page server in the sandbox',
  })
}

// A form whose submit handler writes what was typed and chosen into the
// page, so only a browser that ran the page's script and took the input
// shows it.
export const FORM = `<!doctype html><html><body>
<form id="f"><input name="who"><select name="color"><option>red</option><option>green</option></select>
<button type="submit">Send</button></form><p id="result">none</p>
<script>
document.getElementById('f').addEventListener('submit', (e) => {
  e.preventDefault()
  const d = new FormData(e.target)
  document.getElementById('result').textContent = 'hello ' + d.get('who') + ' in ' + d.get('color')
})
</script></body></html>`
/**
 * A WebSocket upgrade request (subprotocol binary, as noVNC asks) to url
 * over http or https by its scheme, not yet ended: the caller listens for
 * 'upgrade' or 'response' and calls end().
 */
export function websocketRequest(url, timeoutMs) {
  const u = new URL(url)
  const request = u.protocol === 'https:' ? httpsRequest : httpRequest
  return request(u, {
    headers: {
      Connection: 'Upgrade',
      Upgrade: 'websocket',
      'Sec-WebSocket-Version': '13',
      'Sec-WebSocket-Key': randomBytes(16).toString('base64'),
      'Sec-WebSocket-Protocol': 'binary',
    },
    agent: false,
    timeout: timeoutMs,
  })
}

/** Debian's chromium, which scripts/install-deps.sh --test installs. */
const CHROMIUM = process.env.SDK_TEST_CHROMIUM || '/usr/bin/chromium'

/**
 * Headless Chromium for pages the server serves, in a network namespace of
 * its own (browser-netns.mjs): the suite's domain (the sandbox hosts, and
 * the TLS mode's API host) resolves to the server there, and the TLS mode's
 * certificates are the suite's own CA's.
 */
export function launchChromium() {
  const { hostname, port } = new URL(`http://${process.env.E2B_DOMAIN}`)
  return launchInOwnNetns(CHROMIUM, Number(port), {
    args: [`--host-resolver-rules=MAP *.${hostname} 127.0.0.1`, '--ignore-certificate-errors'],
  })
}

/** POST /sandboxes/{id}/live-view of sbx with body; the JSON answer after checking the status. */
export async function liveView(sbx, body, status = 201) {
  const res = await apiFetch(`/sandboxes/${sbx.sandboxId}/live-view`, { method: 'POST', body: JSON.stringify(body) })
  const json = await res.json()
  assert.equal(res.status, status, JSON.stringify(json))
  return json
}

/**
 * Asks url for a WebSocket upgrade (http(s), as the browser's ws(s)) and
 * resolves with the status: 101 when the router let it through (to the
 * sandbox's websockify, or the server's live view of a browser), else
 * what the router answered.
 */
export function upgradeStatus(url) {
  return new Promise((resolve, reject) => {
    const req = websocketRequest(url, 30_000)
    req.on('timeout', () => req.destroy(new Error('no answer to the upgrade within 30 s')))
    req.on('error', reject)
    req.on('response', (res) => {
      res.resume()
      resolve(res.statusCode)
    })
    req.on('upgrade', (res, socket) => {
      socket.destroy()
      resolve(res.statusCode)
    })
    req.end()
  })
}
