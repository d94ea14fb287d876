// The sandbox page's panels besides its facts and terminal: the metrics
// chart, the file browser, the egress audit trail and the live view.
import { api, call, cell, mib, status } from './app.js'

const id = decodeURIComponent(location.pathname.split('/').pop())
const path = `/sandboxes/${encodeURIComponent(id)}`
const SVG = 'http://www.w3.org/2000/svg'

function svg(tag, attrs, text) {
  const el = document.createElementNS(SVG, tag)
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v)
  if (text !== undefined) el.textContent = text
  return el
}

/** The metrics history as lines of percentages over time. */
async function drawMetrics() {
  const samples = await api(`${path}/metrics`)
  const chart = document.getElementById('metrics-chart')
  const [W, H, left, top, bottom] = [600, 180, 36, 8, 20]
  const plotH = H - top - bottom
  chart.replaceChildren()
  for (const pct of [0, 50, 100]) {
    const y = top + plotH * (1 - pct / 100)
    chart.append(svg('line', { x1: left, x2: W, y1: y, y2: y, class: 'grid' }), svg('text', { x: left - 4, y: y + 4, 'text-anchor': 'end' }, `${pct}%`))
  }
  if (samples.length === 0) {
    chart.append(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'No samples yet'))
    return
  }
  const t0 = samples[0].timestampUnix
  const span = Math.max(1, samples[samples.length - 1].timestampUnix - t0)
  const x = (s) => left + ((W - left) * (s.timestampUnix - t0)) / span
  const y = (pct) => top + plotH * (1 - Math.min(100, Math.max(0, pct)) / 100)
  const series = {
    cpu: (s) => s.cpuUsedPct,
    mem: (s) => (s.memTotal ? (100 * s.memUsed) / s.memTotal : 0),
    disk: (s) => (s.diskTotal ? (100 * s.diskUsed) / s.diskTotal : 0),
  }
  for (const [name, value] of Object.entries(series)) {
    const points = samples.map((s) => `${x(s).toFixed(1)},${y(value(s)).toFixed(1)}`).join(' ')
    chart.append(svg('polyline', { points, class: name }))
  }
  const time = (s) => new Date(s.timestampUnix * 1000).toLocaleTimeString()
  chart.append(svg('text', { x: left, y: H - 4 }, time(samples[0])), svg('text', { x: W, y: H - 4, 'text-anchor': 'end' }, time(samples[samples.length - 1])))
  const last = samples[samples.length - 1]
  document.getElementById('metrics-range').textContent = `${samples.length} samples; now CPU ${last.cpuUsedPct.toFixed(1)}%, memory ${mib(last.memUsed)}, disk ${mib(last.diskUsed)}`
}

// The file browser: the directory shown, its entries, uploads into it.
let dir = ''

async function openDir(p) {
  status('Listing…', false, 'files-status')
  try {
    const listing = await api(`${path}/files?path=${encodeURIComponent(p)}`)
    dir = listing.path
    document.getElementById('files-path').value = dir
    const body = document.querySelector('#files tbody')
    body.replaceChildren()
    for (const e of listing.entries.sort((a, b) => (b.type === 'dir') - (a.type === 'dir') || a.name.localeCompare(b.name))) {
      const row = body.insertRow()
      row.dataset.path = e.path
      const link = document.createElement('a')
      if (e.type === 'dir') {
        link.href = '#'
        link.textContent = `${e.name}/`
        link.addEventListener('click', (ev) => {
          ev.preventDefault()
          openDir(e.path)
        })
      } else {
        link.href = `/dashboard/api${path}/files/content?path=${encodeURIComponent(e.path)}`
        link.download = e.name
        link.textContent = e.name
      }
      cell(row, '').append(link)
      cell(row, e.type === 'dir' ? '—' : e.size < 1 << 20 ? `${e.size} B` : mib(e.size))
      cell(row, new Date(e.modified).toLocaleString())
    }
    status(listing.entries.length ? '' : 'The directory is empty.', false, 'files-status')
  } catch (err) {
    status(`Listing ${p}: ${err.message}`, true, 'files-status')
  }
}

async function upload() {
  const file = document.getElementById('upload-file').files[0]
  if (!file) {
    status('Choose a file to upload first.', true, 'files-status')
    return
  }
  const dest = `${dir.replace(/\/$/, '')}/${file.name}`
  status(`Uploading ${file.name}…`, false, 'files-status')
  try {
    // Writing the same file again gives the same result.
    await call(`${path}/files/content?path=${encodeURIComponent(dest)}`, { method: 'POST', body: file, idempotent: true, headers: { 'Content-Type': 'application/octet-stream' } })
  } catch (err) {
    status(`Uploading ${file.name}: ${err.message}`, true, 'files-status')
    return
  }
  await openDir(dir)
  status(`Uploaded ${dest}.`, false, 'files-status')
}

document.getElementById('files-nav').addEventListener('submit', (ev) => {
  ev.preventDefault()
  openDir(document.getElementById('files-path').value)
})
document.getElementById('files-up').addEventListener('click', () => openDir(dir.replace(/\/[^/]*\/?$/, '') || '/'))
document.getElementById('upload').addEventListener('click', upload)

// The egress audit trail, newest first, read on from the last cursor.
let after = 0

/** Reads the audit trail on from the cursor; whether to read again. */
async function readEgress() {
  let page
  try {
    page = await api(`${path}/network/audit?after=${after}&limit=1000`)
  } catch (err) {
    status(err.status === 501 ? 'This sandbox has no egress audit: its networking is off.' : `Reading the egress audit: ${err.message}`, err.status !== 501, 'egress-status')
    return err.status !== 501 && err.status !== 404
  }
  after = page.next
  const body = document.querySelector('#egress tbody')
  for (const e of page.events) {
    const row = body.insertRow(0)
    row.dataset.allowed = e.allowed
    cell(row, new Date(e.time).toLocaleTimeString())
    cell(row, e.kind)
    const addrs = (e.addrs ?? []).join(', ')
    cell(row, [e.name, addrs && `${addrs}${e.port ? `:${e.port}` : ''}`, e.proto].filter(Boolean).join(' '))
    cell(row, e.allowed ? 'allowed' : 'denied').className = e.allowed ? '' : 'problem'
    cell(row, e.rule)
  }
  status(body.rows.length ? '' : 'No egress yet.', false, 'egress-status')
  return true
}

// sameSite tells whether host shares the dashboard's parent domain, as
// sandbox hosts do when the API is served under the sandbox domain
// (api.example.com beside <port>-<id>.example.com).
function sameSite(host) {
  const parent = location.hostname.split('.').slice(1).join('.')
  return parent.includes('.') && host.endsWith(`.${parent}`)
}

document.getElementById('live-view').addEventListener('click', async (ev) => {
  ev.target.disabled = true
  status('Starting the live view…', false, 'live-view-status')
  try {
    const links = await api(`${path}/live-view`, { method: 'POST', body: '{}' })
    const el = document.getElementById('live-view-status')
    el.classList.remove('problem')
    if (!/^https?:/.test(links.url)) {
      // The view port is liveview.ViewPort.
      el.textContent = `This server has no sandbox domain: open getHost(6090) + ${links.url}`
      return
    }
    const until = new Date(links.expiresAt).toLocaleTimeString()
    const a = document.createElement('a')
    a.href = links.url
    a.target = '_blank'
    a.rel = 'noopener'
    a.textContent = `Open it in a new tab (view only, until ${until})`
    if (!sameSite(new URL(links.url).hostname)) {
      // A page of another site in a frame gets no storage, which a
      // desktop's viewer (noVNC) needs: it opens in a tab of its own.
      el.replaceChildren(a)
      return
    }
    const frame = document.createElement('iframe')
    frame.id = 'live-view-frame'
    frame.src = links.url
    frame.title = 'Live view of the sandbox (view only)'
    el.replaceChildren(a, frame)
  } catch (err) {
    status(`Live view: ${err.message}`, true, 'live-view-status')
  } finally {
    ev.target.disabled = false
  }
})

// A kill (sandbox.js) ends the polling: the sandbox is going.
let killed = false
addEventListener('sandbox-kill', () => {
  killed = true
})

/**
 * Reads on the audit trail (while there is one) and redraws the chart
 * every 5 s, until the sandbox is gone.
 */
let egress = true
async function poll() {
  if (killed) return
  if (egress) egress = await readEgress()
  if (killed) return
  const more = await drawMetrics().then(
    () => true,
    (err) => {
      status(`Metrics: ${err.message}`, true, 'metrics-range')
      return err.status !== 404
    },
  )
  if (more) setTimeout(poll, 5000)
}

// Files are read through the sandbox's envd, which runs only while the
// sandbox does.
api(path).then((sb) => {
  if (sb.state === 'running') openDir('~')
  else status('The files can be browsed while the sandbox is running.', false, 'files-status')
  poll()
}, (err) => status(err.message, true))
