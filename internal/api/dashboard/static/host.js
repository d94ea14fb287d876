import { api, cell, refresher, status } from './app.js'

/** Bytes as GiB, to one decimal. */
const gib = (bytes) => `${(bytes / (1 << 30)).toFixed(1)} GiB`

/** Fills table id's body with rows of cells. */
function fill(id, rows) {
  const body = document.querySelector(`#${id} tbody`)
  body.replaceChildren()
  for (const cells of rows) {
    const row = body.insertRow()
    row.dataset.key = cells[0]
    for (const c of cells) {
      if (c instanceof Node) row.insertCell().append(c)
      else cell(row, String(c))
    }
  }
}

/** A meter of used out of max (nothing when there is no bound). */
function meter(used, max) {
  if (!max) return ''
  const m = document.createElement('meter')
  Object.assign(m, { min: 0, max, value: Math.min(used, max), low: max * 0.7, high: max * 0.9, optimum: 0 })
  return m
}

async function load() {
  const h = await api('/host')
  const live = Object.values(h.states).reduce((a, b) => a + b, 0)
  fill('states', [
    ['running', h.states.running ?? 0],
    ['paused', h.states.paused ?? 0],
    ['creating, or in a warm pool', h.pending],
  ])
  fill(
    'backends',
    h.backends.map((b) => [b, h.sandboxesByBackend[b] ?? 0, b === h.defaultBackend ? 'starts new sandboxes' : 'adopted sandboxes only']),
  )
  const capacity = [
    ['Sandboxes (--max-sandboxes)', live + h.pending, h.maxSandboxes || 'no cap', meter(live + h.pending, h.maxSandboxes)],
    ['vCPUs of running sandboxes', h.cpus, `${h.hostCpus} host CPUs`, meter(h.cpus, h.hostCpus)],
  ]
  if (h.disk) {
    const used = h.disk.total - h.disk.free
    // Creates stop where the reserve begins.
    const usable = h.disk.total - h.disk.reserve
    capacity.push([`Disk, ${h.disk.reserveSetting} kept free`, gib(used), gib(usable), meter(used, usable)])
    document.getElementById('disk-dir').textContent = `Sandbox disks are under ${h.disk.dir}.`
  }
  fill('capacity', capacity)
  const pools = Object.entries(h.pools).map(([name, p]) => [name, p.ready, p.filling, p.target])
  fill('pools', pools.length ? pools : [['none', '—', '—', '—']])
  status('')
}

refresher(load, 5000, (err) => status(`Loading the host: ${err.message}`, true))()
