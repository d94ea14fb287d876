// commands.* through the official SDK against envd's process.Process service.

import { after, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { AuthenticationError, CommandExitError, InvalidArgumentError, NotFoundError, SandboxError, TimeoutError } from 'e2b'

import { debugSandbox, HOME, pidAlive, sleep, USER, waitFor } from './helpers.mjs'

const sbx = debugSandbox()

// Background processes a test leaves behind are killed at the end.
const started = new Set()
after(async () => {
  await Promise.all([...started].map((pid) => sbx.commands.kill(pid).catch(() => {})))
})

async function background(cmd, opts = {}) {
  const handle = await sbx.commands.run(cmd, { ...opts, background: true })
  started.add(handle.pid)
  return handle
}

describe('commands.run', () => {
  test('stdout is captured, exit code 0, empty stderr', async () => {
    const res = await sbx.commands.run('echo hello; printf "second line"')
    assert.equal(res.stdout, 'hello\nsecond line')
    assert.equal(res.stderr, '')
    assert.equal(res.exitCode, 0)
    assert.equal(res.error, undefined)
  })

  test('stderr is captured separately', async () => {
    const res = await sbx.commands.run('echo out; echo oops 1>&2')
    assert.equal(res.stdout, 'out\n')
    assert.equal(res.stderr, 'oops\n')
  })

  test('onStdout / onStderr callbacks receive the output', async () => {
    const out = []
    const err = []
    await sbx.commands.run('echo a; echo b >&2', { onStdout: (d) => out.push(d), onStderr: (d) => err.push(d) })
    assert.equal(out.join(''), 'a\n')
    assert.equal(err.join(''), 'b\n')
  })

  test('non-zero exit throws CommandExitError with exitCode, stdout, stderr', async () => {
    await assert.rejects(sbx.commands.run('echo partial; echo bad >&2; exit 3'), (err) => {
      assert.ok(err instanceof CommandExitError, `expected CommandExitError, got ${err?.constructor?.name}: ${err}`)
      assert.ok(err instanceof SandboxError)
      assert.equal(err.exitCode, 3)
      assert.equal(err.stderr, 'bad\n')
      assert.equal(err.stdout, 'partial\n')
      assert.equal(err.error, 'exit status 3')
      return true
    })
  })

  test('per-command envs are visible to the command', async () => {
    const res = await sbx.commands.run('echo "$FOO|$BAR_BAZ"', { envs: { FOO: 'foo', BAR_BAZ: 'with space' } })
    assert.equal(res.stdout, 'foo|with space\n')
  })

  test('HOME, USER and PATH are set for the default user', async () => {
    const res = await sbx.commands.run('echo "$HOME|$USER"; test -n "$PATH" && echo has-path')
    assert.equal(res.stdout, `${HOME}|${USER}\nhas-path\n`)
  })

  test('cwd option sets the working directory', async () => {
    const res = await sbx.commands.run('pwd', { cwd: '/tmp' })
    assert.equal(res.stdout, '/tmp\n')
  })

  test('missing cwd is rejected with InvalidArgumentError', async () => {
    await assert.rejects(sbx.commands.run('pwd', { cwd: '/definitely/not/here' }), InvalidArgumentError)
  })

  test('default working directory is /home/user', async () => {
    const res = await sbx.commands.run('pwd')
    assert.equal(res.stdout, `${HOME}\n`)
  })

  test('default user is "user"; user: "root" runs as root', async () => {
    const def = await sbx.commands.run('whoami; id -u')
    const [name, uid] = def.stdout.trim().split('\n')
    assert.equal(name, USER)
    assert.notEqual(uid, '0')
    const root = await sbx.commands.run('whoami; id -u; echo $HOME', { user: 'root' })
    assert.equal(root.stdout, 'root\n0\n/root\n')
  })

  test('unknown user is rejected with AuthenticationError', async () => {
    await assert.rejects(sbx.commands.run('true', { user: 'no-such-user-xyz' }), AuthenticationError)
  })
})

describe('background commands', () => {
  test('handle.wait() returns the result of a background command', async () => {
    const seen = []
    const handle = await background('echo start; sleep 0.3; echo done', { onStdout: (d) => seen.push(d) })
    assert.ok(Number.isInteger(handle.pid) && handle.pid > 0, `pid ${handle.pid}`)
    const res = await handle.wait()
    assert.equal(res.exitCode, 0)
    assert.equal(res.stdout, 'start\ndone\n')
    assert.equal(seen.join(''), 'start\ndone\n')
    assert.equal(handle.exitCode, 0)
  })

  test('commands.list() contains a running background command with its config', async () => {
    const handle = await background('sleep 30')
    const list = await sbx.commands.list()
    const entry = list.find((p) => p.pid === handle.pid)
    assert.ok(entry, `pid ${handle.pid} not in list ${JSON.stringify(list.map((p) => p.pid))}`)
    assert.equal(entry.cmd, '/bin/bash')
    assert.deepEqual(entry.args, ['-l', '-c', 'sleep 30'])
    assert.equal(await handle.kill(), true)
  })

  test('kill() returns true and stops the process; then false for the same and unknown pids', async () => {
    const handle = await background('sleep 30')
    assert.equal(await pidAlive(sbx, handle.pid), true)
    assert.equal(await handle.kill(), true)
    await assert.rejects(handle.wait(), (err) => {
      assert.ok(err instanceof CommandExitError, `expected CommandExitError, got ${err}`)
      assert.equal(err.exitCode, -1)
      assert.equal(err.error, 'signal: killed')
      return true
    })
    await waitFor(async () => !(await pidAlive(sbx, handle.pid)), { what: `pid ${handle.pid} to disappear` })
    await waitFor(async () => !(await sbx.commands.list()).some((p) => p.pid === handle.pid), {
      what: 'killed pid to leave commands.list()',
    })
    assert.equal(await sbx.commands.kill(handle.pid), false)
    assert.equal(await sbx.commands.kill(2_000_000_000), false)
  })

  test('commands.connect(pid) receives live output and the exit', async () => {
    const handle = await background('for i in 1 2 3 4 5 6 7 8; do echo tick $i; sleep 0.25; done')
    const got = []
    const conn = await sbx.commands.connect(handle.pid, { onStdout: (d) => got.push(d) })
    assert.equal(conn.pid, handle.pid)
    const res = await conn.wait()
    assert.equal(res.exitCode, 0)
    const text = got.join('')
    assert.match(text, /tick 8\n$/)
    assert.ok(text.split('\n').filter(Boolean).every((l) => /^tick \d$/.test(l)), JSON.stringify(text))
    assert.equal(res.stdout, text)
  })

  test('commands.connect() to an unknown pid rejects with NotFoundError', async () => {
    await assert.rejects(sbx.commands.connect(2_000_000_000), NotFoundError)
  })

  test('disconnecting does not kill the process', async () => {
    const handle = await background('sleep 30')
    await handle.disconnect()
    await sleep(200)
    assert.equal(await pidAlive(sbx, handle.pid), true)
    assert.equal(await sbx.commands.kill(handle.pid), true)
  })
})

describe('stdin', () => {
  test('sendStdin + closeStdin feed a command started with stdin: true', async () => {
    const handle = await background('cat', { stdin: true })
    await sbx.commands.sendStdin(handle.pid, 'hello ')
    await handle.sendStdin(new TextEncoder().encode('world\n'))
    await sbx.commands.closeStdin(handle.pid)
    const res = await handle.wait()
    assert.equal(res.exitCode, 0)
    assert.equal(res.stdout, 'hello world\n')
  })

  test('without stdin: true the command sees EOF and sendStdin fails', async () => {
    const res = await sbx.commands.run('cat; echo eof')
    assert.equal(res.stdout, 'eof\n')
    const handle = await background('sleep 30')
    await assert.rejects(sbx.commands.sendStdin(handle.pid, 'x'), SandboxError)
    await handle.kill()
  })
})

describe('timeouts and pids', () => {
  test('timeoutMs kills a foreground command with TimeoutError', async () => {
    const t0 = Date.now()
    await assert.rejects(sbx.commands.run('sleep 10', { timeoutMs: 1000 }), (err) => {
      assert.ok(err instanceof TimeoutError, `expected TimeoutError, got ${err?.constructor?.name}: ${err}`)
      return true
    })
    assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`)
  })

  test('the process killed by timeoutMs is gone afterwards (kill -0 from another command)', async () => {
    const handle = await background('sleep 10', { timeoutMs: 1000 })
    assert.equal(await pidAlive(sbx, handle.pid), true, 'process should run before the timeout')
    await assert.rejects(handle.wait(), (err) => {
      // The client deadline and envd's kill race; either surfaces as an error.
      assert.ok(err instanceof TimeoutError || err instanceof CommandExitError, `got ${err}`)
      return true
    })
    await waitFor(async () => !(await pidAlive(sbx, handle.pid)), {
      timeoutMs: 4000,
      what: `pid ${handle.pid} to be killed by envd after timeoutMs`,
    })
  })

  test('the reported pid is real: kill -0 <pid> works from another command', async () => {
    const handle = await background('sleep 30')
    const res = await sbx.commands.run(`kill -0 ${handle.pid} && echo alive && cat /proc/${handle.pid}/status | grep -c '^Pid:'`)
    assert.equal(res.stdout, 'alive\n1\n')
    // Same user, so the default user can signal it too.
    await sbx.commands.run(`kill -9 ${handle.pid}`)
    await assert.rejects(handle.wait(), CommandExitError)
  })
})
