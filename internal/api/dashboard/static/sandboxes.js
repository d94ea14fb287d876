import { api, duration, latestMetrics, mib, status } from './app.js'

function cell(row, text) {
  const td = row.insertCell()
  td.textContent = text
  return td
}

async function load() {
  const sandboxes = await api('/v2/sandboxes?state=running,paused')
  const body = document.querySelector('#sandboxes tbody')
  const rows = await Promise.all(sandboxes.map(async (sb) => ({ sb, m: sb.state === 'running' ? await latestMetrics(sb.sandboxID).catch(() => null) : null })))
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
  }
  status(sandboxes.length ? '' : 'No sandboxes are running or paused.')
}

async function refresh() {
  try {
    await load()
  } catch (err) {
    status(`Loading the sandboxes: ${err.message}`, true)
  }
  setTimeout(refresh, 5000)
}
refresh()
