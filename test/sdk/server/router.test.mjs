// envd traffic through the server's router (header routing or host routing,
// depending on the mode): commands, PTY, files and watch of a real sandbox.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { CommandExitError, FilesystemEventType } from 'e2b'

import { createSandbox, HOME, killCreated, sha256, USER, waitFor } from './helpers.mjs'

let sbx
before(async () => {
  sbx = (await createSandbox()).sbx
})
after(killCreated)

describe('commands through the router', () => {
  test('stdout, stderr, exit code and envs', async () => {
    const res = await sbx.commands.run('echo out; echo err >&2; echo "$GREETING"', { envs: { GREETING: 'hello there' } })
    assert.equal(res.stdout, 'out\nhello there\n')
    assert.equal(res.stderr, 'err\n')
    assert.equal(res.exitCode, 0)
    await assert.rejects(sbx.commands.run('exit 7'), (err) => {
      assert.ok(err instanceof CommandExitError, `got ${err?.constructor?.name}: ${err}`)
      assert.equal(err.exitCode, 7)
      return true
    })
  })

  test('streamed output arrives in order through the router', async () => {
    const chunks = []
    const res = await sbx.commands.run('for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done', { onStdout: (d) => chunks.push(d) })
    assert.equal(chunks.join(''), 'line1\nline2\nline3\nline4\nline5\n')
    assert.equal(res.stdout, chunks.join(''))
  })

  test('background command: list, connect, kill', async () => {
    const handle = await sbx.commands.run('sleep 600', { background: true })
    const listed = await sbx.commands.list()
    assert.ok(listed.some((p) => p.pid === handle.pid), `pid ${handle.pid} not listed`)
    assert.equal(await sbx.commands.kill(handle.pid), true)
    await waitFor(async () => !(await sbx.commands.list()).some((p) => p.pid === handle.pid), { what: 'killed process to leave the list' })
    assert.equal(await sbx.commands.kill(handle.pid), false)
  })

  test('root via user option', async () => {
    assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
    assert.equal((await sbx.commands.run('whoami')).stdout, `${USER}\n`)
  })
})

describe('PTY through the router', () => {
  test('create, sendInput, output, resize, kill', async () => {
    let out = ''
    const dec = new TextDecoder()
    const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += dec.decode(d, { stream: true })) })
    try {
      await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo pty-$((6*7))\n'))
      await waitFor(() => out.includes('pty-42'), { what: `PTY output (got ${JSON.stringify(out)})` })
      await sbx.pty.resize(pty.pid, { cols: 100, rows: 30 })
      await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'))
      await waitFor(() => out.includes('30 100'), { what: `stty size 30 100 (got ${JSON.stringify(out.slice(-200))})` })
    } finally {
      assert.equal(await sbx.pty.kill(pty.pid), true)
    }
  })
})

describe('files through the router', () => {
  const dir = `${HOME}/router-files-${randomBytes(4).toString('hex')}`

  test('write and read text', async () => {
    const info = await sbx.files.write(`${dir}/hello.txt`, 'hello world\n')
    assert.equal(info.path, `${dir}/hello.txt`)
    assert.equal(await sbx.files.read(`${dir}/hello.txt`), 'hello world\n')
    assert.equal((await sbx.commands.run(`stat -c %U ${dir}/hello.txt`)).stdout, `${USER}\n`)
  })

  test('2 MiB of random bytes round-trip', async () => {
    const data = randomBytes(2 * 1024 * 1024)
    await sbx.files.write(`${dir}/blob.bin`, new Blob([data]))
    const back = await sbx.files.read(`${dir}/blob.bin`, { format: 'bytes' })
    assert.equal(sha256(back), sha256(data))
    assert.equal((await sbx.commands.run(`sha256sum ${dir}/blob.bin`)).stdout.split(' ')[0], sha256(data))
  })

  test('list, exists, rename, remove', async () => {
    await sbx.files.write([
      { path: `${dir}/list/a.txt`, data: 'a' },
      { path: `${dir}/list/b.txt`, data: 'b' },
    ])
    await sbx.files.makeDir(`${dir}/list/sub`)
    const entries = await sbx.files.list(`${dir}/list`)
    assert.deepEqual(entries.map((e) => `${e.name}:${e.type}`).sort(), ['a.txt:file', 'b.txt:file', 'sub:dir'])
    assert.equal(await sbx.files.exists(`${dir}/list/a.txt`), true)
    await sbx.files.rename(`${dir}/list/a.txt`, `${dir}/list/c.txt`)
    assert.equal(await sbx.files.exists(`${dir}/list/a.txt`), false)
    assert.equal(await sbx.files.read(`${dir}/list/c.txt`), 'a')
    await sbx.files.remove(`${dir}/list`)
    assert.equal(await sbx.files.exists(`${dir}/list`), false)
  })
})

describe('watch through the router', () => {
  test('watchDir reports a write made with files.write, then stops', async () => {
    const dir = `${HOME}/router-watch-${randomBytes(4).toString('hex')}`
    await sbx.files.makeDir(dir)
    const events = []
    const handle = await sbx.files.watchDir(dir, (e) => events.push(e))
    try {
      await sbx.files.write(`${dir}/seen.txt`, 'x')
      await waitFor(() => events.some((e) => e.name === 'seen.txt' && e.type === FilesystemEventType.WRITE), {
        what: `a write event for seen.txt (got ${JSON.stringify(events.map((e) => [e.type, e.name]))})`,
      })
    } finally {
      await handle.stop()
    }
  })
})
