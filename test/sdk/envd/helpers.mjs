// Shared fixtures for the envd conformance tests. run.mjs starts envd and
// passes its coordinates through the environment; this module turns them into
// SDK Sandbox objects.

import { createHash, randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { Sandbox } from 'e2b'

function required(name) {
  const v = process.env[name]
  if (!v) {
    throw new Error(`${name} is not set; run these tests through test/sdk/run.mjs, which starts envd`)
  }
  return v
}

/** The version envd reports; the SDK's feature gates are evaluated against it. */
export const envdVersion = required('ENVD_VERSION')
/** Base URL of the debug (no token) envd instance. */
export const envdUrl = required('ENVD_URL')
/** Base URL of the envd instance initialised with an access token. */
export const tokenEnvdUrl = required('ENVD_TOKEN_URL')
/** The access token the token instance was initialised with. */
export const accessToken = required('ENVD_ACCESS_TOKEN')

export const USER = 'user'
export const HOME = '/home/user'

/**
 * A Sandbox bound to the debug envd on localhost:49983. Debug mode sends no
 * control-plane traffic; unlike Sandbox.create() (which pins 99.99.99) this
 * uses envd's real version so the SDK's version gates are exercised.
 */
export function debugSandbox() {
  return new Sandbox({ sandboxId: 'debug_sandbox_id', envdVersion, debug: true })
}

/**
 * A Sandbox bound to the token envd on 127.0.0.1:49984. sandboxUrl takes
 * precedence over the domain-derived URL, so no request leaves 127.0.0.1; the
 * API key only satisfies the SDK's local checks and is never sent anywhere.
 */
export function tokenSandbox({ token = accessToken } = {}) {
  return new Sandbox({
    sandboxId: 'x',
    envdVersion,
    envdAccessToken: token,
    sandboxUrl: tokenEnvdUrl,
    debug: false,
    apiKey: 'e2b_' + '0'.repeat(40),
  })
}

/** A fresh directory path under the user's home, unique per call. */
export function scratchPath(prefix) {
  return `${HOME}/sdk-${prefix}-${process.pid}-${randomBytes(4).toString('hex')}`
}

/** Creates a scratch directory and returns its path plus a cleanup function. */
export async function scratchDir(sbx, prefix) {
  const dir = scratchPath(prefix)
  await sbx.files.makeDir(dir)
  return { dir, cleanup: () => sbx.files.remove(dir).catch(() => {}) }
}

export function sha256(bytes) {
  return createHash('sha256').update(bytes).digest('hex')
}

/** Polls fn until it returns a truthy value or timeoutMs passes; returns the value. */
export async function waitFor(fn, { timeoutMs = 5_000, intervalMs = 50, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    }
    await sleep(intervalMs)
  }
}

/**
 * Whether pid names a live process, asked from inside the sandbox with
 * `kill -0` (as the default user: a root login shell may be slow to start on a
 * developer machine, which skews timing tests; /proc covers other users' pids).
 */
export async function pidAlive(sbx, pid) {
  const res = await sbx.commands.run(
    `if kill -0 ${pid} 2>/dev/null || [ -e /proc/${pid} ]; then echo alive; else echo gone; fi`
  )
  return res.stdout.trim() === 'alive'
}

/** Reads a JSON body, failing with the raw text when it is not JSON. */
export async function jsonBody(res) {
  const text = await res.text()
  try {
    return JSON.parse(text)
  } catch {
    throw new Error(`expected a JSON body, got status ${res.status} body ${JSON.stringify(text)}`)
  }
}

export { sleep }
