// Supervising the processes the runner starts (envd, agent-sandbox serve).
//
// Children are tracked by PID and killed by PID (never by name), also when the
// runner dies on a signal.

import { spawn } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'

const running = new Set()

/** Kills every child this module started. Synchronous so it works in 'exit'. */
function killAllSync() {
  for (const child of running) {
    try {
      process.kill(child.pid, 'SIGKILL')
    } catch {
      // already gone
    }
  }
  running.clear()
}

let hooksInstalled = false
function installExitHooks() {
  if (hooksInstalled) return
  hooksInstalled = true
  process.on('exit', killAllSync)
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.once(sig, () => {
      killAllSync()
      process.exit(128 + ({ SIGINT: 2, SIGTERM: 15, SIGHUP: 1 })[sig])
    })
  }
}

/**
 * Spawns bin with args (stdin ignored, stdout and stderr captured) and keeps
 * track of it until it exits; it is SIGKILLed if the runner exits first.
 *
 * Returns { pid, exited(), stop(), output(), lastLine() }:
 *   exited()   null while running, then { code, signal } or { code: null, signal: null, err };
 *   stop()     SIGTERM, SIGKILL after graceMs; resolves with exited();
 *   output()   the last logKeep characters of stdout and stderr;
 *   lastLine() the last non-empty line on stderr.
 */
export function spawnTracked(bin, args, { logKeep, graceMs }) {
  installExitHooks()
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] })
  running.add(child)

  let log = ''
  let lastLine = ''
  const keep = (chunk) => {
    log += chunk
    if (log.length > logKeep) log = log.slice(-logKeep)
  }
  child.stdout.setEncoding('utf8').on('data', keep)
  child.stderr.setEncoding('utf8').on('data', (chunk) => {
    keep(chunk)
    const lines = chunk.split('\n').map((l) => l.trim()).filter(Boolean)
    if (lines.length) lastLine = lines[lines.length - 1]
  })

  let exited = null
  const exitPromise = new Promise((res) => {
    child.on('exit', (code, signal) => {
      exited = { code, signal }
      running.delete(child)
      res(exited)
    })
    child.on('error', (err) => {
      exited = { code: null, signal: null, err }
      running.delete(child)
      res(exited)
    })
  })

  const stop = async () => {
    if (exited) return exited
    try {
      process.kill(child.pid, 'SIGTERM')
    } catch {
      return exited
    }
    const timer = sleep(graceMs).then(() => 'timeout')
    if ((await Promise.race([exitPromise, timer])) === 'timeout') {
      try {
        process.kill(child.pid, 'SIGKILL')
      } catch {
        // already gone
      }
      await exitPromise
    }
    return exited
  }

  return {
    pid: child.pid,
    exited: () => exited,
    stop,
    output: () => log,
    lastLine: () => lastLine,
  }
}
