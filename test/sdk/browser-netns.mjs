// Headless Chromium in a network namespace of its own, reaching the server
// on 127.0.0.1:<port> through a Unix socket.
//
// Chromium drops every request in flight (ERR_NETWORK_CHANGED) when an
// address of its namespace comes or goes, and on the server's host every
// sandbox's interfaces do. In a namespace with only its loopback nothing
// changes. A Unix socket's path is reachable from any namespace: a
// forwarder inside (this file, run as a program) takes the browser's
// connections to 127.0.0.1:<port> to the socket, and the test process, in
// the host's namespace, takes them on to the server.
//
// The namespace is unshare(1)'s: it goes when the forwarder does, which is
// tracked by PID like every child the runner starts.

import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import { chromium } from 'playwright-core'

import { spawnTracked } from './child-process.mjs'

const SELF = fileURLToPath(import.meta.url)
const READY = 'forwarding'

/** A server that sends each connection to a new one of target (net.connect's options), both ways. */
function forwarder(target) {
  return createServer((conn) => {
    const out = connect(target)
    conn.pipe(out).pipe(conn)
    conn.on('error', () => out.destroy())
    out.on('error', () => conn.destroy())
  })
}

/**
 * Launches chromium (playwright's launch options) in a namespace of its
 * own where 127.0.0.1:port is the server's. Closing the browser ends the
 * forwarder and with it the namespace.
 */
export async function launchInOwnNetns(executablePath, port, options) {
  const dir = mkdtempSync(join(tmpdir(), 'sdk-browser-'))
  const socket = join(dir, 'server.sock')
  const host = forwarder({ host: '127.0.0.1', port })
  await new Promise((resolve, reject) => host.once('error', reject).listen(socket, resolve))
  const inside = spawnTracked(
    'unshare',
    ['--net', '--', 'sh', '-c', 'ip link set lo up && exec "$0" "$@"', process.execPath, SELF, String(port), socket],
    { logKeep: 4096, graceMs: 2000 },
  )
  const cleanup = async () => {
    await inside.stop()
    await new Promise((resolve) => host.close(resolve))
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    for (let waited = 0; !inside.output().includes(READY); waited += 50) {
      if (inside.exited() || waited > 10_000) {
        throw new Error(`the browser's namespace did not come up (${JSON.stringify(inside.exited())}): ${inside.output()}`)
      }
      await sleep(50)
    }
    // Chromium joins the forwarder's namespace; the pipe playwright
    // drives it through (fds 3 and 4) passes through nsenter's exec.
    const wrapper = join(dir, 'chromium')
    writeFileSync(wrapper, `#!/bin/sh\nexec nsenter --net=/proc/${inside.pid}/ns/net -- ${executablePath} "$@"\n`)
    chmodSync(wrapper, 0o755)
    const browser = await chromium.launch({ ...options, executablePath: wrapper })
    const close = browser.close.bind(browser)
    browser.close = async (...args) => {
      try {
        await close(...args)
      } finally {
        await cleanup()
      }
    }
    return browser
  } catch (err) {
    await cleanup()
    throw err
  }
}

// As a program: the inside end, 127.0.0.1:<port> → <socket>.
if (process.argv[1] === SELF) {
  const [port, socket] = process.argv.slice(2)
  forwarder({ path: socket }).listen(Number(port), '127.0.0.1', () => console.log(READY))
}
