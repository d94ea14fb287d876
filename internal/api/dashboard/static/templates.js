import { api, cell, duration, refresher, status } from './app.js'

async function load(current) {
  const [templates, builds] = await Promise.all([api('/templates'), api('/template-builds')])
  if (!current()) return
  const tbody = document.querySelector('#templates tbody')
  tbody.replaceChildren()
  for (const t of templates) {
    const row = tbody.insertRow()
    row.dataset.templateId = t.templateID
    cell(row, t.templateID)
    cell(row, t.buildStatus)
    cell(row, t.buildCount)
    cell(row, t.cpuCount)
    cell(row, `${t.memoryMB} MiB`)
    cell(row, `${t.diskSizeMB} MiB`)
    cell(row, t.recording ?? 'none')
    cell(row, t.spawnCount)
  }
  const bbody = document.querySelector('#builds tbody')
  bbody.replaceChildren()
  // Newest first.
  for (const b of builds.sort((x, y) => Date.parse(y.createdAt) - Date.parse(x.createdAt))) {
    const row = bbody.insertRow()
    row.dataset.buildId = b.buildID
    cell(row, b.templateID)
    cell(row, b.buildID)
    const st = cell(row, b.reason ? `${b.status}: ${b.reason}` : b.status)
    if (b.status === 'error') st.className = 'problem'
    cell(row, b.tags.join(', '))
    cell(row, new Date(b.createdAt).toLocaleString())
    cell(row, b.startedAt && b.finishedAt ? duration(Date.parse(b.finishedAt) - Date.parse(b.startedAt)) : '—')
    const show = document.createElement('button')
    show.textContent = 'Log'
    show.addEventListener('click', () => showLog(b))
    cell(row, '').append(show)
  }
  status(builds.length ? '' : 'No builds yet: the built-in templates are built by the server itself.')
}

// The log shown, read on from its offset while the build runs: what the
// template build API's status route answers, as the E2B CLI follows it.
let shown = null

async function showLog(b) {
  const mine = (shown = { build: b, offset: 0 })
  const pre = document.getElementById('build-log')
  pre.textContent = ''
  pre.hidden = false
  const title = document.getElementById('log-title')
  title.hidden = false
  title.textContent = `Log of ${b.templateID} build ${b.buildID}`
  while (shown === mine) {
    let res
    try {
      res = await api(`/templates/${encodeURIComponent(b.templateID)}/builds/${encodeURIComponent(b.buildID)}/status?logsOffset=${mine.offset}`)
    } catch (err) {
      status(`Reading the log: ${err.message}`, true)
      return
    }
    mine.offset += res.logEntries.length
    pre.append(res.logEntries.map((e) => `${e.timestamp} ${e.level.padEnd(5)} ${e.message}\n`).join(''))
    pre.dataset.status = res.status
    const running = res.status === 'building' || res.status === 'waiting'
    if (!running && res.logEntries.length === 0) {
      if (res.reason) pre.append(`build failed${res.reason.step ? ` at step ${res.reason.step}` : ''}: ${res.reason.message}\n`)
      pre.dataset.done = 'true'
      break
    }
    if (running) await new Promise((r) => setTimeout(r, 1000))
  }
  if (shown === mine) refresh()
}

/** Loads the lists now, then again every 5 s, so builds are seen to end. */
const refresh = refresher(load, 5000, (err) => status(`Loading the templates: ${err.message}`, true))
refresh()
