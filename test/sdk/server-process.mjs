// Starting and stopping `agent-sandbox serve` for the server SDK suite.
//
// Everything here talks to 127.0.0.1 only. The server is tracked by PID and
// killed by PID (never by name), also when the runner dies on a signal.
//
// The data directory is fixed (AGENT_SANDBOX_TEST_DATA_DIR, default
// /var/lib/agent-sandbox-sdk-test; for the vm backend
// AGENT_SANDBOX_TEST_VM_DATA_DIR, default /var/lib/agent-sandbox-sdk-test-vm;
// for the gvisor backend AGENT_SANDBOX_TEST_GVISOR_DATA_DIR, default
// /var/lib/agent-sandbox-sdk-test-gvisor)
// so the base template is built once per machine and reused. Two servers must
// not share one database, so the two modes (header routing, TLS host routing)
// run one after the other, and each backend has its own directory.

import { randomBytes } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { request as httpRequest } from 'node:http'
import { request as httpsRequest } from 'node:https'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

import { spawnTracked } from './child-process.mjs'
import { REPO_ROOT } from './envd-process.mjs'

export const DEFAULT_DATA_DIR = '/var/lib/agent-sandbox-sdk-test'
export const DEFAULT_VM_DATA_DIR = '/var/lib/agent-sandbox-sdk-test-vm'
export const DEFAULT_GVISOR_DATA_DIR = '/var/lib/agent-sandbox-sdk-test-gvisor'
/** The TLS mode's domain: ≥ 3 labels under it, so Node accepts *.sandbox.test. */
export const TLS_DOMAIN_NAME = 'sandbox.test'

const HEALTH_TIMEOUT_MS = 20 * 60_000
const PROGRESS_EVERY_MS = 20_000
const STOP_GRACE_MS = 15_000
const LOG_KEEP = 256 * 1024

/** Path of the server binary: $AGENT_SANDBOX_BIN, else <repo>/bin/agent-sandbox. */
export function resolveServerBin() {
  const bin = process.env.AGENT_SANDBOX_BIN || join(REPO_ROOT, 'bin', 'agent-sandbox')
  if (!existsSync(bin)) {
    throw new Error(`agent-sandbox binary not found at ${bin}; run \`make build\` in ${REPO_ROOT} first (or set AGENT_SANDBOX_BIN)`)
  }
  return bin
}

/** The data dir of the server for backend ('jail', 'gvisor' or 'vm'). */
export function serverDataDir(backend = 'jail') {
  if (backend === 'vm') return process.env.AGENT_SANDBOX_TEST_VM_DATA_DIR || DEFAULT_VM_DATA_DIR
  if (backend === 'gvisor') return process.env.AGENT_SANDBOX_TEST_GVISOR_DATA_DIR || DEFAULT_GVISOR_DATA_DIR
  return process.env.AGENT_SANDBOX_TEST_DATA_DIR || DEFAULT_DATA_DIR
}

export function newApiKey() {
  return 'e2b_' + randomBytes(20).toString('hex')
}

/** A port nothing listens on right now (the kernel picks it). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer()
    srv.unref()
    srv.on('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address()
      srv.close(() => resolve(port))
    })
  })
}

/** GET /health over HTTPS to 127.0.0.1 with SNI/Host of the API name, trusting only ca.pem. */
function tlsHealth(port, host, caPath) {
  return new Promise((resolve, reject) => {
    if (!existsSync(caPath)) return reject(new Error(`${caPath} does not exist yet`))
    const req = httpsRequest(
      {
        host: '127.0.0.1',
        port,
        path: '/health',
        servername: host,
        headers: { Host: `${host}:${port}` },
        ca: readFileSync(caPath),
        timeout: 1_000,
      },
      (res) => {
        res.resume()
        resolve(res.statusCode)
      }
    )
    req.on('timeout', () => req.destroy(new Error('timeout')))
    req.on('error', reject)
    req.end()
  })
}

/**
 * Starts `agent-sandbox serve` and waits (up to 20 min: the first start builds
 * the base template, then in the background code-interpreter-v1, desktop and
 * browser) for GET /health → 204 and then for GET /templates to list each of
 * templates as ready, printing progress every ~20 s.
 *
 * mode 'header': plain HTTP, SDK env E2B_API_URL=E2B_SANDBOX_URL=E2B_VOLUME_API_URL=
 *   http://127.0.0.1:<port> (the volume content API takes its own URL: without
 *   it the SDK would go to https://api.<E2B_DOMAIN>), E2B_DOMAIN=localhost:<port>.
 * mode 'tls': --tls --domain sandbox.test:<port>, SDK env E2B_DOMAIN only, plus
 *   NODE_EXTRA_CA_CERTS=<data-dir>/tls/ca.pem.
 *
 * backend ('jail', 'gvisor' or 'vm') is passed as --backend; 'vm' builds
 * base only, 'gvisor' base and code-interpreter-v1 (templates: the built-ins
 * besides base, the jail suite's by default).
 *
 * extraArgs are appended to the serve command line.
 *
 * Returns { mode, url, port, pid, apiKey, dataDir, caPath, domain, env, printedEnv, stop(), output() };
 * printedEnv is the header-routing environment the server printed.
 * env is what the test processes need (E2B_* and NODE_EXTRA_CA_CERTS; the
 * runner adds the DNS preload).
 */
export async function startServer({
  mode = 'header',
  backend = 'jail',
  port,
  dataDir = serverDataDir(backend),
  apiKey = newApiKey(),
  templates = { jail: ['code-interpreter-v1', 'desktop', 'browser'], gvisor: ['code-interpreter-v1'] }[backend] ?? [],
  extraArgs = [],
} = {}) {
  const bin = resolveServerBin()
  port ??= await freePort()
  const listen = `127.0.0.1:${port}`
  const tls = mode === 'tls'
  const domain = tls ? `${TLS_DOMAIN_NAME}:${port}` : `localhost:${port}`
  const caPath = join(dataDir, 'tls', 'ca.pem')
  // The other built-ins too: the code interpreter, desktop and browser files
  // create their sandboxes (desktop and browser add about 40 s each to a
  // first start, as layers over base).
  const args = ['serve', '--listen', listen, '--data-dir', dataDir, '--api-key', apiKey]
  if (templates.length) args.push('--templates', templates.join(','))
  // Always named: auto would pick gvisor or vm where the host has them.
  args.push('--backend', backend)
  if (tls) args.push('--tls', '--domain', domain)
  args.push(...extraArgs)

  const child = await spawnWhenHostFree(bin, args)
  const { stop, output } = child

  const url = tls ? `https://api.${domain}` : `http://${listen}`
  const name = `agent-sandbox serve (${backend}, ${mode}, ${listen}, pid ${child.pid})`
  console.log(`starting ${name}: ${bin} ${args.map((a) => (a === apiKey ? 'e2b_…' : a)).join(' ')}`)

  const started = Date.now()
  const deadline = started + HEALTH_TIMEOUT_MS
  let nextProgress = started + PROGRESS_EVERY_MS
  let lastErr = ''
  for (;;) {
    const exited = child.exited()
    if (exited) {
      throw new Error(
        `${name} exited before becoming healthy: ${exited.err?.message ?? `code=${exited.code} signal=${exited.signal}`}\n` +
          `--- server output (last ${LOG_KEEP / 1024} KiB) ---\n${output()}`
      )
    }
    try {
      const status = tls
        ? await tlsHealth(port, `api.${TLS_DOMAIN_NAME}`, caPath)
        : (await fetch(`${url}/health`, { signal: AbortSignal.timeout(1_000) })).status
      if (status === 204) break
      lastErr = `GET /health returned ${status}`
    } catch (err) {
      lastErr = err.cause?.code ?? err.code ?? err.message
    }
    const now = Date.now()
    if (now > deadline) {
      await stop()
      throw new Error(`${name} not healthy after ${HEALTH_TIMEOUT_MS / 1000} s (${lastErr})\n--- server output ---\n${output()}`)
    }
    if (now >= nextProgress) {
      nextProgress = now + PROGRESS_EVERY_MS
      console.log(`  … ${Math.round((now - started) / 1000)} s, not ready yet (${lastErr}); server: ${child.lastLine()}`)
    }
    await sleep(250)
  }
  console.log(`${name} healthy after ${((Date.now() - started) / 1000).toFixed(1)} s`)

  const env = tls
    ? { E2B_DOMAIN: domain, E2B_API_KEY: apiKey, NODE_EXTRA_CA_CERTS: caPath }
    : { E2B_API_URL: url, E2B_SANDBOX_URL: url, E2B_VOLUME_API_URL: url, E2B_DOMAIN: domain, E2B_API_KEY: apiKey }

  let printedEnv
  try {
    printedEnv = await waitPrintedEnv(output)
  } catch (err) {
    await stop()
    throw new Error(`${name}: ${err.message}\n--- server output ---\n${output()}`)
  }
  const server = { mode, backend, url, port, pid: child.pid, apiKey, dataDir, caPath, domain, env, printedEnv, stop, output }
  server.api = (method, path, body) => apiRequest(server, method, path, body)
  try {
    await waitTemplates(server, templates, { name, child, deadline })
  } catch (err) {
    await stop()
    throw err
  }
  return server
}

/**
 * The header-routing environment the server prints once it is ready
 * ("Point the E2B SDK at it …": the `export K=V` lines up to the blank line
 * after them), as { K: V }; waits up to 10 s for it to be printed.
 */
async function waitPrintedEnv(output) {
  const deadline = Date.now() + 10_000
  for (;;) {
    const out = output()
    const at = out.indexOf('Point the E2B SDK at it')
    const block = at < 0 ? '' : out.slice(at).split('\n\n')[1] ?? ''
    const env = Object.fromEntries([...block.matchAll(/^\s*export (\w+)=(.*)$/gm)].map((m) => [m[1], m[2]]))
    if (env.E2B_API_URL) return env
    if (Date.now() > deadline) throw new Error('printed no header-routing environment ("Point the E2B SDK at it", export E2B_API_URL=…)')
    await sleep(100)
  }
}

/**
 * Waits until GET /templates lists every one of templates (built-in ones
 * the server builds in the background once it is up) as ready, printing
 * the server's latest progress line every ~20 s; throws when one's build
 * failed or the server exited.
 */
async function waitTemplates(server, templates, { name, child, deadline }) {
  if (!templates.length) return
  const started = Date.now()
  let nextProgress = started + PROGRESS_EVERY_MS
  for (;;) {
    const exited = child.exited()
    if (exited) throw new Error(`${name} exited while building ${templates.join(', ')}\n--- server output ---\n${server.output()}`)
    const res = await server.api('GET', '/templates')
    if (res.status !== 200) throw new Error(`GET /templates: ${res.status} ${JSON.stringify(res.body)}`)
    const status = Object.fromEntries(res.body.map((t) => [t.templateID, t.buildStatus]))
    const failed = templates.filter((t) => status[t] === 'error')
    if (failed.length) throw new Error(`${name}: building ${failed.join(', ')} failed\n--- server output ---\n${server.output()}`)
    const waiting = templates.filter((t) => status[t] !== 'ready')
    if (!waiting.length) break
    const now = Date.now()
    if (now > deadline) throw new Error(`${name}: ${waiting.join(', ')} not built after ${HEALTH_TIMEOUT_MS / 1000} s\n--- server output ---\n${server.output()}`)
    if (now >= nextProgress) {
      nextProgress = now + PROGRESS_EVERY_MS
      console.log(`  … ${Math.round((now - started) / 1000)} s, building ${waiting.join(', ')}; server: ${child.lastLine()}`)
    }
    await sleep(1_000)
  }
  console.log(`${name}: ${templates.join(', ')} built after ${((Date.now() - started) / 1000).toFixed(1)} s`)
}

/** How long startServer waits for another process to let go of the host's sandbox networking. */
const HOST_LOCK_WAIT_MS = 30 * 60_000
const HOST_LOCK_HELD = /sandbox networking on this host is in use by (.*?): one server per host/

/**
 * Spawns the server; when it exits at once because another server or root
 * test holds the host's sandbox networking (one per host; never the case in
 * CI, where nothing else runs), waits and tries again, saying who holds it.
 */
async function spawnWhenHostFree(bin, args) {
  const deadline = Date.now() + HOST_LOCK_WAIT_MS
  for (;;) {
    const child = spawnTracked(bin, args, { logKeep: LOG_KEEP, graceMs: STOP_GRACE_MS })
    for (let i = 0; i < 20 && !child.exited(); i++) await sleep(100)
    const held = child.exited() && HOST_LOCK_HELD.exec(child.output())
    if (!held || Date.now() > deadline) return child
    console.log(`  … the host's sandbox networking is held by ${held[1]}; trying again in 10 s`)
    await sleep(10_000)
  }
}

/**
 * One control-plane request from the runner process (which, unlike the test
 * processes, has no NODE_EXTRA_CA_CERTS or DNS preload): connects to
 * 127.0.0.1 and, in TLS mode, verifies the certificate for api.<domain>
 * against the server's CA. Resolves { status, headers, body (parsed JSON or text) }.
 */
function apiRequest(server, method, path, body) {
  const tls = server.mode === 'tls'
  const host = tls ? `api.${TLS_DOMAIN_NAME}` : '127.0.0.1'
  const payload = body === undefined ? undefined : JSON.stringify(body)
  return new Promise((resolve, reject) => {
    const req = (tls ? httpsRequest : httpRequest)(
      {
        host: '127.0.0.1',
        port: server.port,
        method,
        path,
        headers: {
          Host: `${host}:${server.port}`,
          'X-API-Key': server.apiKey,
          ...(payload ? { 'Content-Type': 'application/json' } : {}),
        },
        ...(tls ? { servername: host, ca: readFileSync(server.caPath) } : {}),
        timeout: 30_000,
      },
      (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (c) => (text += c))
        res.on('end', () => {
          let parsed = text
          try {
            parsed = text ? JSON.parse(text) : undefined
          } catch {
            // keep the text
          }
          resolve({ status: res.statusCode, headers: res.headers, body: parsed })
        })
      }
    )
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timeout`)))
    req.on('error', reject)
    req.end(payload)
  })
}

/**
 * Kills the sandboxes whose metadata has key metaKey (and, if value is
 * given, that value): the test files' leftovers, also from earlier runs
 * that died. Returns the killed IDs.
 */
export async function killTaggedSandboxes(server, metaKey, value) {
  const ids = []
  let token
  do {
    const q = new URLSearchParams({ limit: '100' })
    if (token) q.set('nextToken', token)
    const res = await server.api('GET', `/v2/sandboxes?${q}`)
    if (res.status !== 200) throw new Error(`GET /v2/sandboxes: ${res.status} ${JSON.stringify(res.body)}`)
    for (const s of res.body ?? []) {
      const v = s.metadata?.[metaKey]
      if (v !== undefined && (value === undefined || v === value)) ids.push(s.sandboxID)
    }
    token = res.headers['x-next-token']
  } while (token)
  for (const id of ids) {
    const res = await server.api('DELETE', `/sandboxes/${id}`)
    if (res.status !== 204 && res.status !== 404) {
      console.log(`warning: DELETE /sandboxes/${id}: ${res.status} ${JSON.stringify(res.body)}`)
    }
  }
  return ids
}
