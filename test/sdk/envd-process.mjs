// Starting and stopping envd for the SDK conformance suite and the benchmark.
//
// Everything here talks to 127.0.0.1 only. envd processes are tracked by PID
// and killed by PID (never by name), also when the runner dies on a signal.

import { spawnSync } from 'node:child_process'
import { lookup } from 'node:dns/promises'
import { randomBytes } from 'node:crypto'
import { existsSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'

import { spawnTracked } from './child-process.mjs'

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')

export const DEFAULT_USER = 'user'
export const DEFAULT_HOME = '/home/user'
export const MAIN_ADDR = '127.0.0.1:49983'
export const TOKEN_ADDR = '127.0.0.1:49984'

const HEALTH_TIMEOUT_MS = 15_000
const STOP_GRACE_MS = 5_000
const LOG_KEEP = 64 * 1024

/** Path of the envd binary: $ENVD_BIN, else <repo>/bin/envd. Throws when missing. */
export function resolveEnvdBin() {
  const bin = process.env.ENVD_BIN || join(REPO_ROOT, 'bin', 'envd')
  if (!existsSync(bin)) {
    throw new Error(
      `envd binary not found at ${bin}; run \`make build\` in ${REPO_ROOT} first (or set ENVD_BIN)`
    )
  }
  return bin
}

/**
 * Makes sure the sandbox user exists with home /home/user. Creates it when
 * running as root (CI is a throwaway root machine); otherwise fails clearly.
 */
export function ensureUser() {
  const id = spawnSync('id', ['-u', DEFAULT_USER], { encoding: 'utf8' })
  if (id.status === 0) {
    const home = spawnSync('getent', ['passwd', DEFAULT_USER], { encoding: 'utf8' })
    const fields = home.stdout.trim().split(':')
    if (fields[5] !== DEFAULT_HOME) {
      throw new Error(`user '${DEFAULT_USER}' exists but its home is '${fields[5]}', want ${DEFAULT_HOME}`)
    }
    if (!existsSync(DEFAULT_HOME)) {
      throw new Error(`home directory ${DEFAULT_HOME} of '${DEFAULT_USER}' does not exist`)
    }
    return
  }
  if (process.getuid?.() !== 0) {
    throw new Error(
      `user '${DEFAULT_USER}' does not exist and this runner is not root; create it with ` +
        `\`sudo useradd -m -s /bin/bash ${DEFAULT_USER}\` (home ${DEFAULT_HOME}) or run as root`
    )
  }
  const add = spawnSync('useradd', ['-m', '-d', DEFAULT_HOME, '-s', '/bin/bash', DEFAULT_USER], {
    encoding: 'utf8',
  })
  if (add.status !== 0) {
    throw new Error(`useradd ${DEFAULT_USER}: ${add.stderr.trim() || `exit ${add.status}`}`)
  }
}

/** The version envd prints for `--version`, or undefined if it has no such flag. */
export function envdVersionFromBinary(bin) {
  const res = spawnSync(bin, ['--version'], { encoding: 'utf8', timeout: 5_000 })
  if (res.status !== 0) return undefined
  const m = /(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?)/.exec(res.stdout)
  return m?.[1]
}

/**
 * Starts one envd listening on addr and waits for GET /health → 204.
 * Returns { url, pid, stop(), output() }.
 */
export async function startEnvd(bin, addr, { extraArgs = [], name = addr } = {}) {
  const url = `http://${addr}`
  await assertPortFree(url)

  const args = ['--addr', addr, '--default-user', DEFAULT_USER, '--default-workdir', DEFAULT_HOME, ...extraArgs]
  const child = spawnTracked(bin, args, { logKeep: LOG_KEEP, graceMs: STOP_GRACE_MS })
  const { stop, output } = child

  const deadline = Date.now() + HEALTH_TIMEOUT_MS
  let lastErr = ''
  for (;;) {
    const exited = child.exited()
    if (exited) {
      throw new Error(
        `envd (${name}) exited before becoming healthy: ${exited.err?.message ?? `code=${exited.code} signal=${exited.signal}`}\n` +
          `command: ${bin} ${args.join(' ')}\n--- envd output ---\n${output()}`
      )
    }
    try {
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1_000) })
      if (res.status === 204) break
      lastErr = `GET /health returned ${res.status}`
    } catch (err) {
      lastErr = err.cause?.code ?? err.message
    }
    if (Date.now() > deadline) {
      await stop()
      throw new Error(`envd (${name}) not healthy after ${HEALTH_TIMEOUT_MS} ms (${lastErr})\n--- envd output ---\n${output()}`)
    }
    await sleep(100)
  }

  return { url, pid: child.pid, stop, output }
}

async function assertPortFree(url) {
  try {
    await fetch(`${url}/health`, { signal: AbortSignal.timeout(500) })
  } catch {
    return
  }
  throw new Error(`something is already listening on ${url}; stop it first (this runner will not kill processes it did not start)`)
}

/**
 * Initialises envd the way the control plane does (POST /init) and returns the
 * X-Envd-Version response header.
 */
export async function initEnvd(url, body) {
  const res = await fetch(`${url}/init`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(5_000),
  })
  if (res.status !== 204) {
    throw new Error(`POST ${url}/init: status ${res.status}: ${await res.text()}`)
  }
  return res.headers.get('x-envd-version') ?? undefined
}

export function newAccessToken() {
  return randomBytes(24).toString('hex')
}

/**
 * Prepares the machine and starts both envd instances: the debug one on
 * 127.0.0.1:49983 (configured by flags) and the token one on 127.0.0.1:49984
 * (configured by POST /init with an access token). Returns the environment
 * the test processes need and a stop() that kills both.
 */
export async function startEnvdPair() {
  const bin = resolveEnvdBin()
  ensureUser()
  // Debug mode makes the SDK dial localhost:49983; envd listens on 127.0.0.1.
  const { address } = await lookup('localhost')
  if (address !== '127.0.0.1') {
    console.warn(`warning: localhost resolves to ${address} first; the SDK's debug-mode requests may miss envd on 127.0.0.1`)
  }

  const started = []
  const stopAll = async () => {
    await Promise.all(started.map((e) => e.stop()))
  }
  try {
    const main = await startEnvd(bin, MAIN_ADDR, { name: 'main' })
    started.push(main)
    const tok = await startEnvd(bin, TOKEN_ADDR, { name: 'token' })
    started.push(tok)

    const accessToken = newAccessToken()
    const headerVersion = await initEnvd(tok.url, {
      accessToken,
      defaultUser: DEFAULT_USER,
      defaultWorkdir: DEFAULT_HOME,
    })
    const version = headerVersion || envdVersionFromBinary(bin)
    if (!version) {
      throw new Error('envd reported no version: POST /init has no X-Envd-Version header and `envd --version` failed')
    }
    if (!/^\d+\.\d+\.\d+/.test(version)) {
      throw new Error(`envd reported version '${version}', which is not semver`)
    }

    return {
      bin,
      main,
      token: tok,
      version,
      versionSource: headerVersion ? 'X-Envd-Version from POST /init' : '`envd --version`',
      env: {
        E2B_DEBUG: 'true',
        ENVD_VERSION: version,
        ENVD_URL: main.url,
        ENVD_TOKEN_URL: tok.url,
        ENVD_ACCESS_TOKEN: accessToken,
      },
      stop: stopAll,
    }
  } catch (err) {
    await stopAll()
    throw err
  }
}
