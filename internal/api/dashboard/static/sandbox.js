/* global Terminal */
import { api, duration, latestMetrics, mib, status } from './app.js'

const id = decodeURIComponent(location.pathname.split('/').pop())
const path = `/sandboxes/${encodeURIComponent(id)}`
document.getElementById('sandbox-id').textContent = id
document.title = `Sandbox ${id} — agent-sandbox`

async function load() {
  const sb = await api(path)
  const m = sb.state === 'running' ? await latestMetrics(id).catch(() => null) : null
  const now = Date.now()
  const facts = [
    ['State', sb.state],
    ['Template', sb.alias || sb.templateID],
    ['Age', duration(now - Date.parse(sb.startedAt))],
    ['Time left', sb.state === 'running' ? duration(Date.parse(sb.endAt) - now) : '—'],
    ['CPU', m ? `${m.cpuUsedPct.toFixed(1)}% of ${sb.cpuCount}` : `${sb.cpuCount} vCPU`],
    ['Memory', m ? `${mib(m.memUsed)} / ${mib(m.memTotal)}` : `${sb.memoryMB} MiB`],
    ['Disk', m ? `${mib(m.diskUsed)} / ${mib(m.diskTotal)}` : `${sb.diskSizeMB} MiB`],
  ]
  const dl = document.getElementById('info')
  dl.replaceChildren()
  for (const [k, v] of facts) {
    const dt = document.createElement('dt')
    dt.textContent = k
    const dd = document.createElement('dd')
    dd.textContent = v
    dl.append(dt, dd)
  }
  document.getElementById('pause').disabled = sb.state !== 'running'
  document.getElementById('resume').disabled = sb.state !== 'paused'
  document.getElementById('extend').disabled = sb.state !== 'running'
  document.getElementById('open-terminal').disabled = sb.state !== 'running'
  return sb
}

/** Runs an action on the sandbox, then shows what it left. */
async function act(what, fn) {
  status(`${what}…`)
  try {
    await fn()
    status(`${what}: done.`)
  } catch (err) {
    status(`${what}: ${err.message}`, true)
    return
  }
  await load().catch((err) => status(err.message, true))
}

/**
 * Kills the sandbox. When the answer is lost (a browser on the server's
 * own host sees the sandbox's network interfaces go and drops its requests
 * in flight: ERR_NETWORK_CHANGED), the list says whether the kill was done,
 * and it is sent again if not. (Asking for the sandbox itself would answer
 * 404, which the browser logs as an error.) Should the sandbox be beyond
 * the list's first page, the list the page goes back to still shows it.
 */
async function kill() {
  dispatchEvent(new Event('sandbox-kill'))
  try {
    await api(path, { method: 'DELETE' })
  } catch (err) {
    if (!(err instanceof TypeError)) throw err
    const left = await api('/v2/sandboxes?state=running,paused')
    if (left.some((sb) => sb.sandboxID === id)) await api(path, { method: 'DELETE' })
  }
}

// A killed sandbox is gone: back to the list, with nothing left to load.
document.getElementById('kill').addEventListener('click', async () => {
  status('Kill…')
  try {
    await kill()
    location.assign('/dashboard/')
  } catch (err) {
    status(`Kill: ${err.message}`, true)
  }
})
document.getElementById('pause').addEventListener('click', () => act('Pause', () => api(`${path}/pause`, { method: 'POST' })))
document.getElementById('resume').addEventListener('click', () => act('Resume', () => api(`${path}/connect`, { method: 'POST', body: JSON.stringify({ timeout: Number(document.getElementById('timeout-seconds').value) }) })))
document.getElementById('extend').addEventListener('click', () => act('Set timeout', () => api(`${path}/timeout`, { method: 'POST', body: JSON.stringify({ timeout: Number(document.getElementById('timeout-seconds').value) }) })))

document.getElementById('open-terminal').addEventListener('click', (e) => {
  e.target.disabled = true
  const term = new Terminal({ convertEol: false, fontSize: 14, rows: 20 })
  term.open(document.getElementById('terminal'))
  const url = new URL(`/dashboard/api${path}/terminal?cols=${term.cols}&rows=${term.rows}`, location.href)
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:'
  const ws = new WebSocket(url)
  ws.binaryType = 'arraybuffer'
  const encoder = new TextEncoder()
  ws.addEventListener('open', () => term.focus())
  ws.addEventListener('message', (ev) => term.write(new Uint8Array(ev.data)))
  ws.addEventListener('close', (ev) => {
    term.write(`\r\n[terminal closed${ev.reason ? ': ' + ev.reason : ''}]\r\n`)
    e.target.disabled = false
  })
  term.onData((data) => ws.readyState === WebSocket.OPEN && ws.send(encoder.encode(data)))
  term.onResize(({ cols, rows }) => ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify({ cols, rows })))
})

load().catch((err) => status(`Loading the sandbox: ${err.message}`, true))
