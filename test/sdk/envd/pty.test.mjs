// pty.* through the official SDK: PTY start, input, resize, kill.

import { after, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError } from 'e2b'

import { debugSandbox, HOME, pidAlive, waitFor } from './helpers.mjs'

const sbx = debugSandbox()
const enc = new TextEncoder()

const started = new Set()
after(async () => {
  await Promise.all([...started].map((pid) => sbx.pty.kill(pid).catch(() => {})))
})

/** Starts a PTY and collects its output as text. */
async function openPty(opts = {}) {
  const dec = new TextDecoder()
  const term = { text: '' }
  const handle = await sbx.pty.create({
    cols: 80,
    rows: 24,
    onData: (d) => {
      term.text += dec.decode(d, { stream: true })
    },
    ...opts,
  })
  started.add(handle.pid)
  term.handle = handle
  term.send = (s) => sbx.pty.sendInput(handle.pid, enc.encode(s))
  // Waits until the output contains re; returns the match.
  term.expect = (re, what = String(re)) =>
    waitFor(() => re.exec(term.text), { timeoutMs: 5000, what: `${what} in PTY output ${JSON.stringify(term.text.slice(-300))}` })
  return term
}

describe('pty', () => {
  test('sendInput runs a command and its output arrives via onData', async () => {
    const t = await openPty()
    assert.ok(t.handle.pid > 0)
    await t.send('echo hi\n')
    // "hi" at the start of a line is the command's output, not the echoed input.
    await t.expect(/(^|[\r\n])hi\r?\n/, 'output line "hi"')
    await t.send('echo sum=$((40+2))\n')
    await t.expect(/sum=42/)
    assert.equal(await sbx.pty.kill(t.handle.pid), true)
  })

  test('the PTY is a terminal with TERM set, running as the default user in /home/user', async () => {
    const t = await openPty()
    await t.send('tty -s && echo "is-tty $TERM $(whoami) $(pwd)"\n')
    await t.expect(new RegExp(`is-tty xterm-256color user ${HOME}`))
    await sbx.pty.kill(t.handle.pid)
  })

  test('resize changes the window size seen by stty size', async () => {
    const t = await openPty({ cols: 80, rows: 24 })
    await t.send('stty size\n')
    await t.expect(/(^|[\r\n])24 80\r?\n/, '"24 80"')
    await sbx.pty.resize(t.handle.pid, { cols: 100, rows: 30 })
    await t.send('stty size\n')
    await t.expect(/(^|[\r\n])30 100\r?\n/, '"30 100"')
    await sbx.pty.kill(t.handle.pid)
  })

  test('a running PTY shows up in commands.list()', async () => {
    const t = await openPty()
    const list = await sbx.commands.list()
    const entry = list.find((p) => p.pid === t.handle.pid)
    assert.ok(entry, `pty pid ${t.handle.pid} missing from list`)
    assert.deepEqual(entry.args, ['-i', '-l'])
    await sbx.pty.kill(t.handle.pid)
  })

  test('kill ends the PTY: true, wait() rejects, process gone, then kill() is false', async () => {
    const t = await openPty()
    assert.equal(await pidAlive(sbx, t.handle.pid), true)
    assert.equal(await sbx.pty.kill(t.handle.pid), true)
    await assert.rejects(t.handle.wait(), (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err}`)
      assert.equal(err.exitCode, -1)
      return true
    })
    await waitFor(async () => !(await pidAlive(sbx, t.handle.pid)), { what: 'pty process to disappear' })
    assert.equal(await sbx.pty.kill(t.handle.pid), false)
  })

  test('typing exit ends the PTY with exit code 0', async () => {
    const t = await openPty()
    await t.send('exit 0\n')
    const res = await t.handle.wait()
    assert.equal(res.exitCode, 0)
  })
})
