import { api, cell, duration, status } from './app.js'

async function load() {
  const keys = await api('/keys')
  const body = document.querySelector('#keys tbody')
  body.replaceChildren()
  for (const k of keys) {
    const row = body.insertRow()
    row.dataset.keyId = k.id
    cell(row, k.current ? `${k.name} (this session)` : k.name)
    cell(row, k.masked)
    cell(row, new Date(k.createdAt).toLocaleString())
    cell(row, k.lastUsedAt ? new Date(k.lastUsedAt).toLocaleString() : 'never')
    cell(row, k.maxTimeout ? duration(k.maxTimeout * 1000) : 'server\'s')
    const revoke = document.createElement('button')
    revoke.className = 'danger'
    revoke.textContent = 'Revoke'
    revoke.addEventListener('click', () => revokeKey(k))
    cell(row, '').append(revoke)
  }
}

async function revokeKey(k) {
  const warning = k.current ? ' This is the key you are signed in with: you will be signed out.' : ''
  if (!confirm(`Revoke the key "${k.name}" (${k.masked})? Requests with it are refused from now on.${warning}`)) return
  try {
    const res = await api(`/keys/${encodeURIComponent(k.id)}`, { method: 'DELETE' })
    if (res.signedOut) {
      location.assign('/dashboard/sign-in')
      return
    }
    status(`Revoked "${k.name}".`)
    await load()
  } catch (err) {
    status(`Revoking "${k.name}": ${err.message}`, true)
  }
}

document.getElementById('create-key').addEventListener('submit', async (ev) => {
  ev.preventDefault()
  const name = document.getElementById('key-name').value
  const max = document.getElementById('key-max-timeout').value
  try {
    const created = await api('/keys', { method: 'POST', body: JSON.stringify({ name, ...(max ? { maxTimeout: Number(max) } : {}) }) })
    document.getElementById('new-key-value').textContent = created.key
    document.getElementById('new-key').hidden = false
    status(`Created "${created.name}".`)
    ev.target.reset()
    await load()
  } catch (err) {
    status(`Creating the key: ${err.message}`, true)
  }
})

load().catch((err) => status(`Loading the keys: ${err.message}`, true))
