import { call, cell, duration, latestMetrics, mib, refresher, status } from './app.js'

// The filter and page size are the page's own query
// (?metadata=key=value&…&limit=N), so a filtered list can be linked; the
// filter goes to the API as the E2B SDK sends it: each key and value
// escaped, then the whole.
const query = new URLSearchParams(location.search)
const filter = query.get('metadata') ?? ''
/** Sandboxes a page of the list shows (the API names a bad limit). */
const pageSize = query.get('limit') ?? '20'
document.getElementById('metadata').value = filter

function metadataQuery(s) {
  const pairs = s.split('&').map((p) => p.trim()).filter(Boolean)
  // A pair without = goes as typed: the API names what is wrong with it.
  const escaped = pairs.map((p) => (p.includes('=') ? p.split('=').map(encodeURIComponent).join('=') : encodeURIComponent(p))).join('&')
  return escaped ? `&metadata=${encodeURIComponent(escaped)}` : ''
}

// The tokens of the pages before the one shown, and of the one shown
// ('' for the first); next is the following page's, '' when it is the last.
const tokens = ['']
let next = ''

async function load(current) {
  const token = tokens[tokens.length - 1]
  const { body: sandboxes, headers } = await call(`/v2/sandboxes?state=running,paused&limit=${encodeURIComponent(pageSize)}${metadataQuery(filter)}${token ? `&nextToken=${encodeURIComponent(token)}` : ''}`)
  const rows = await Promise.all(sandboxes.map(async (sb) => ({ sb, m: sb.state === 'running' ? await latestMetrics(sb.sandboxID).catch(() => null) : null })))
  if (!current()) return
  next = headers.get('X-Next-Token') ?? ''
  const body = document.querySelector('#sandboxes tbody')
  body.replaceChildren()
  const now = Date.now()
  for (const { sb, m } of rows) {
    const row = body.insertRow()
    row.dataset.sandboxId = sb.sandboxID
    const link = document.createElement('a')
    link.href = `/dashboard/inspect/sandbox/${encodeURIComponent(sb.sandboxID)}`
    link.textContent = sb.sandboxID
    cell(row, '').append(link)
    cell(row, sb.state)
    cell(row, sb.alias || sb.templateID)
    cell(row, duration(now - Date.parse(sb.startedAt)))
    cell(row, sb.state === 'running' ? duration(Date.parse(sb.endAt) - now) : '—')
    cell(row, m ? `${m.cpuUsedPct.toFixed(1)}% of ${sb.cpuCount}` : '—')
    cell(row, m ? `${mib(m.memUsed)} / ${mib(m.memTotal)}` : `— / ${sb.memoryMB} MiB`)
    cell(row, m ? `${mib(m.diskUsed)} / ${mib(m.diskTotal)}` : `— / ${sb.diskSizeMB} MiB`)
  }
  document.getElementById('prev-page').disabled = tokens.length === 1
  document.getElementById('next-page').disabled = !next
  document.getElementById('page-number').textContent = `Page ${tokens.length}`
  status(sandboxes.length ? '' : filter ? 'No sandboxes match the filter.' : 'No sandboxes are running or paused.')
}

/** Loads the page shown now, then again every 5 s. */
const refresh = refresher(load, 5000, (err) => status(`Loading the sandboxes: ${err.message}`, true))

document.getElementById('next-page').addEventListener('click', () => {
  tokens.push(next)
  refresh()
})
document.getElementById('prev-page').addEventListener('click', () => {
  tokens.pop()
  refresh()
})
refresh()
