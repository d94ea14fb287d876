// Shared by the dashboard's pages: calls of the API under /dashboard/api
// (the session cookie is the key) and the formatting of what they answer.

/**
 * Calls the API at path; a missing session goes back to the sign-in form.
 * An answer other than 2xx throws an Error with its message and status; a
 * request that got no answer throws fetch's TypeError. A request that may
 * be repeated (a GET, or one the caller marks `idempotent: true`) and got
 * no answer is sent again, twice at most: a browser drops its requests in
 * flight when its host's network changes (ERR_NETWORK_CHANGED, as on a
 * laptop that changes networks, or a browser on the server's host while
 * sandboxes come and go).
 */
export async function api(path, init = {}) {
  return (await call(path, init)).body
}

/** api, also answering the headers: { body, headers }. */
export async function call(path, init = {}) {
  const { idempotent = (init.method ?? 'GET') === 'GET', ...opts } = init
  const res = await sendAgainIfCut(idempotent ? 3 : 1, () =>
    fetch('/dashboard/api' + path, { ...opts, credentials: 'same-origin', headers: { 'Content-Type': 'application/json', ...opts.headers } }),
  )
  if (res.status === 401) {
    location.assign('/dashboard/sign-in')
    throw new Error('not signed in')
  }
  const text = await res.text()
  const body = text ? JSON.parse(text) : null
  if (!res.ok) throw Object.assign(new Error(body?.message || `${res.status} ${res.statusText}`), { status: res.status })
  return { body, headers: res.headers }
}

/** send's answer, sending again (up to tries in all) while no answer comes. */
async function sendAgainIfCut(tries, send) {
  for (let n = 1; ; n++) {
    try {
      return await send()
    } catch (err) {
      if (!(err instanceof TypeError) || n >= tries) throw err
      await new Promise((r) => setTimeout(r, 200))
    }
  }
}

/** A duration in ms as "3h 12m", "4m 05s" or "12s". */
export function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000))
  if (s >= 3600) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`
  if (s >= 60) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`
  return `${s}s`
}

/** A table cell of row holding text. */
export function cell(row, text) {
  const td = row.insertCell()
  td.textContent = text
  return td
}

/** Bytes as MiB. */
export function mib(bytes) {
  return `${Math.round(bytes / (1 << 20))} MiB`
}

/** The latest metrics sample of sandbox id, or null. */
export async function latestMetrics(id) {
  const samples = await api(`/sandboxes/${encodeURIComponent(id)}/metrics`)
  return samples?.length ? samples[samples.length - 1] : null
}

/** Shows msg in the page's status line, or the one of id (empty clears it). */
export function status(msg, problem = false, id = 'status') {
  const el = document.getElementById(id)
  el.textContent = msg
  el.classList.toggle('problem', problem)
}

/**
 * Keeps a page's view fresh: the function it returns runs load at once
 * (a click calls it), and each run schedules the next one every ms after
 * it ends. A run that a newer one overtook (a click while the timer's run
 * was still waiting for the API) must not draw what it read over the
 * newer run's view: load gets current(), false once it is overtaken, and
 * checks it after its last call of the API, before it changes the page.
 * A failed run shows onError's message, the next one tries again.
 */
export function refresher(load, ms, onError) {
  let timer
  let generation = 0
  return async function run() {
    clearTimeout(timer)
    const mine = ++generation
    const current = () => mine === generation
    try {
      await load(current)
    } catch (err) {
      if (current()) onError(err)
    }
    if (current()) timer = setTimeout(run, ms)
  }
}
