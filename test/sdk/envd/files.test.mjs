// files.* through the official SDK: the filesystem.Filesystem service and the
// /files upload/download endpoints.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { FileNotFoundError, FileType, InvalidArgumentError, NotFoundError, SandboxError } from 'e2b'

import { debugSandbox, HOME, scratchDir, sha256, USER } from './helpers.mjs'

const sbx = debugSandbox()
let dir
let cleanup

before(async () => {
  ;({ dir, cleanup } = await scratchDir(sbx, 'files'))
})
after(async () => {
  await cleanup?.()
})

describe('write and read', () => {
  test('text round trip; write returns the entry', async () => {
    const path = `${dir}/hello.txt`
    const info = await sbx.files.write(path, 'Hello, world!\nsecond line')
    assert.equal(info.name, 'hello.txt')
    assert.equal(info.path, path)
    assert.equal(info.type, FileType.FILE)
    assert.equal(await sbx.files.read(path), 'Hello, world!\nsecond line')
    const cat = await sbx.commands.run(`cat ${path}`)
    assert.equal(cat.stdout, 'Hello, world!\nsecond line')
  })

  test('empty file round trip', async () => {
    const path = `${dir}/empty.txt`
    await sbx.files.write(path, '')
    assert.equal(await sbx.files.read(path), '')
    assert.deepEqual(await sbx.files.read(path, { format: 'bytes' }), new Uint8Array(0))
  })

  test('relative paths resolve against /home/user', async () => {
    const name = `${dir.slice(HOME.length + 1)}/relative.txt`
    const info = await sbx.files.write(name, 'rel')
    assert.equal(info.path, `${dir}/relative.txt`)
    assert.equal(await sbx.files.read(`${dir}/relative.txt`), 'rel')
  })

  test('writing creates missing parent directories owned by the user', async () => {
    const path = `${dir}/p1/p2/deep.txt`
    await sbx.files.write(path, 'deep')
    const parent = await sbx.files.getInfo(`${dir}/p1/p2`)
    assert.equal(parent.type, FileType.DIR)
    assert.equal(parent.owner, USER)
    assert.equal(parent.mode, 0o755)
  })

  test('10 MB of random bytes round trip exactly (sha256)', async () => {
    const data = randomBytes(10 * 1024 * 1024)
    const path = `${dir}/random.bin`
    await sbx.files.write(path, data.buffer.slice(data.byteOffset, data.byteOffset + data.length))
    const back = await sbx.files.read(path, { format: 'bytes' })
    assert.ok(back instanceof Uint8Array)
    assert.equal(back.length, data.length)
    assert.equal(sha256(back), sha256(data))
    // And the bytes on disk are the same, too.
    const res = await sbx.commands.run(`sha256sum ${path}`)
    assert.equal(res.stdout.split(' ')[0], sha256(data))
    assert.equal((await sbx.files.getInfo(path)).size, data.length)
  })

  test('read as blob and as stream', async () => {
    const path = `${dir}/formats.txt`
    await sbx.files.write(path, 'format check')
    const blob = await sbx.files.read(path, { format: 'blob' })
    assert.equal(await blob.text(), 'format check')
    const stream = await sbx.files.read(path, { format: 'stream' })
    assert.equal(await new Response(stream).text(), 'format check')
  })

  test('multi-file write, including a nested path', async () => {
    const files = [
      { path: `${dir}/multi/a.txt`, data: 'A' },
      { path: `${dir}/multi/nested/deeper/b.txt`, data: 'BB' },
      { path: `${dir}/multi/c.bin`, data: new Uint8Array([0, 1, 2, 255]).buffer },
    ]
    const infos = await sbx.files.write(files)
    assert.ok(Array.isArray(infos))
    assert.deepEqual(infos.map((i) => i.path).sort(), files.map((f) => f.path).sort())
    assert.equal(await sbx.files.read(`${dir}/multi/a.txt`), 'A')
    assert.equal(await sbx.files.read(`${dir}/multi/nested/deeper/b.txt`), 'BB')
    assert.deepEqual(await sbx.files.read(`${dir}/multi/c.bin`, { format: 'bytes' }), new Uint8Array([0, 1, 2, 255]))
  })

  test('write as another user (root) makes the file owned by that user', async () => {
    const path = `${dir}/root-owned.txt`
    await sbx.files.write(path, 'r', { user: 'root' })
    const info = await sbx.files.getInfo(path)
    assert.equal(info.owner, 'root')
  })

  test('gzip: write and read with gzip: true', async () => {
    const path = `${dir}/gz.txt`
    const text = 'compress me! '.repeat(10_000)
    await sbx.files.write(path, text, { gzip: true })
    assert.equal(await sbx.files.read(path, { gzip: true }), text)
    assert.equal(await sbx.files.read(path), text)
    assert.equal((await sbx.files.getInfo(path)).size, text.length)
  })

  test('reading a missing file throws FileNotFoundError (a NotFoundError)', async () => {
    await assert.rejects(sbx.files.read(`${dir}/nope.txt`), (err) => {
      assert.ok(err instanceof FileNotFoundError, `got ${err?.constructor?.name}: ${err}`)
      assert.ok(err instanceof NotFoundError)
      return true
    })
  })

  test('reading a directory throws InvalidArgumentError', async () => {
    await assert.rejects(sbx.files.read(dir), InvalidArgumentError)
  })
})

describe("the requesting user's permissions", () => {
  // envd runs as root; reads and writes must be the user's all the same.
  const refused = (status) => (err) => {
    assert.ok(err instanceof SandboxError, `got ${err?.constructor?.name}: ${err}`)
    assert.match(err.message, status)
    assert.match(err.message, /permission denied/)
    return true
  }

  test("reading root's 0600 file as user fails; as root it works", async () => {
    const path = `${dir}/root-secret.txt`
    await sbx.files.write(path, 'root only', { user: 'root' })
    await sbx.commands.run(`chmod 600 ${path}`, { user: 'root' })
    assert.equal(await sbx.files.read(path, { user: 'root' }), 'root only')
    await assert.rejects(sbx.files.read(path, { user: USER }), refused(/^403: /))
  })

  test("writing into root's 0755 directory as user fails; as root it works", async () => {
    const rootDir = `${dir}/root-dir`
    await sbx.files.makeDir(rootDir, { user: 'root' })
    assert.equal((await sbx.files.getInfo(rootDir)).owner, 'root')
    await sbx.files.write(`${rootDir}/by-root.txt`, 'r', { user: 'root' })
    await assert.rejects(sbx.files.write(`${rootDir}/by-user.txt`, 'u', { user: USER }), refused(/^403: /))
    assert.equal(await sbx.files.exists(`${rootDir}/by-user.txt`), false)
    await sbx.files.remove(rootDir, { user: 'root' }) // the user could not
  })

  test("listing root's 0700 directory as user fails; as root it works", async () => {
    const rootDir = `${dir}/root-private`
    await sbx.files.makeDir(rootDir, { user: 'root' })
    await sbx.files.write(`${rootDir}/inside.txt`, 'r', { user: 'root' })
    await sbx.commands.run(`chmod 700 ${rootDir}`, { user: 'root' })
    assert.deepEqual((await sbx.files.list(rootDir, { user: 'root' })).map((e) => e.name), ['inside.txt'])
    await assert.rejects(sbx.files.list(rootDir, { user: USER }), (err) => {
      assert.ok(err instanceof SandboxError, `got ${err?.constructor?.name}: ${err}`)
      assert.match(err.message, /permission_denied/)
      return true
    })
    await sbx.files.remove(rootDir, { user: 'root' })
  })
})

describe('metadata', () => {
  test('files.write metadata is returned by getInfo and list, and replaced on rewrite', async () => {
    const path = `${dir}/meta.txt`
    const info = await sbx.files.write(path, 'm', { metadata: { owner: 'team-a', Kind: 'report' } })
    assert.deepEqual(info.metadata, { owner: 'team-a', kind: 'report' })
    assert.deepEqual((await sbx.files.getInfo(path)).metadata, { owner: 'team-a', kind: 'report' })
    const listed = (await sbx.files.list(dir)).find((e) => e.name === 'meta.txt')
    assert.deepEqual(listed.metadata, { owner: 'team-a', kind: 'report' })

    await sbx.files.write(path, 'm2')
    assert.equal((await sbx.files.getInfo(path)).metadata, undefined)
  })
})

describe('list', () => {
  let root
  before(async () => {
    root = `${dir}/tree`
    await sbx.files.makeDir(`${root}/subdir1/subdir1_1`)
    await sbx.files.makeDir(`${root}/subdir1/subdir1_2`)
    await sbx.files.makeDir(`${root}/subdir2`)
    await sbx.files.write([
      { path: `${root}/file1.txt`, data: 'f1' },
      { path: `${root}/subdir1/subdir1_1/leaf.txt`, data: 'leaf' },
      { path: `${root}/subdir2/file2.txt`, data: 'f2' },
    ])
  })

  test('depth 1 lists direct children in lexical order', async () => {
    const entries = await sbx.files.list(root, { depth: 1 })
    assert.deepEqual(
      entries.map((e) => [e.name, e.type, e.path]),
      [
        ['file1.txt', FileType.FILE, `${root}/file1.txt`],
        ['subdir1', FileType.DIR, `${root}/subdir1`],
        ['subdir2', FileType.DIR, `${root}/subdir2`],
      ]
    )
  })

  test('default depth is 1', async () => {
    const entries = await sbx.files.list(root)
    assert.deepEqual(entries.map((e) => e.name), ['file1.txt', 'subdir1', 'subdir2'])
  })

  test('depth 2 walks depth-first pre-order', async () => {
    const entries = await sbx.files.list(root, { depth: 2 })
    assert.deepEqual(
      entries.map((e) => e.path.slice(root.length + 1)),
      ['file1.txt', 'subdir1', 'subdir1/subdir1_1', 'subdir1/subdir1_2', 'subdir2', 'subdir2/file2.txt']
    )
    assert.deepEqual(
      entries.map((e) => e.name),
      ['file1.txt', 'subdir1', 'subdir1_1', 'subdir1_2', 'subdir2', 'file2.txt']
    )
  })

  test('list of a missing directory throws FileNotFoundError', async () => {
    await assert.rejects(sbx.files.list(`${dir}/missing-dir`), FileNotFoundError)
  })
})

describe('getInfo', () => {
  test('file entry: type, size, mode 0o644, permissions, owner, no symlinkTarget', async () => {
    const path = `${dir}/info.txt`
    await sbx.files.write(path, '12345')
    const before = Date.now()
    const info = await sbx.files.getInfo(path)
    assert.equal(info.name, 'info.txt')
    assert.equal(info.path, path)
    assert.equal(info.type, FileType.FILE)
    assert.equal(info.size, 5)
    assert.equal(info.mode, 0o644)
    assert.equal(info.permissions, '-rw-r--r--')
    assert.equal(info.owner, USER)
    assert.equal(info.group, USER)
    assert.equal(info.symlinkTarget, undefined)
    assert.ok(info.modifiedTime instanceof Date)
    assert.ok(Math.abs(info.modifiedTime.getTime() - before) < 60_000, `modifiedTime ${info.modifiedTime.toISOString()}`)
  })

  test('directory entry: type dir, mode 0o755, drwxr-xr-x', async () => {
    const info = await sbx.files.getInfo(dir)
    assert.equal(info.type, FileType.DIR)
    assert.equal(info.mode, 0o755)
    assert.equal(info.permissions, 'drwxr-xr-x')
    assert.equal(info.owner, USER)
    assert.equal(info.symlinkTarget, undefined)
  })

  test('symlink entry has symlinkTarget set to the resolved target', async () => {
    const target = `${dir}/link-target.txt`
    const link = `${dir}/the-link`
    await sbx.files.write(target, 'target')
    await sbx.commands.run(`ln -s ${target} ${link}`)
    const info = await sbx.files.getInfo(link)
    assert.equal(info.name, 'the-link')
    assert.equal(info.path, link)
    assert.equal(info.symlinkTarget, target)
    assert.equal(info.type, FileType.FILE)
    assert.equal(info.permissions, 'Lrwxrwxrwx')
    assert.equal(await sbx.files.read(link), 'target')
  })

  test('getInfo of a missing path throws FileNotFoundError', async () => {
    await assert.rejects(sbx.files.getInfo(`${dir}/missing`), FileNotFoundError)
  })
})

describe('exists, makeDir, rename, remove', () => {
  test('exists is true for files and dirs, false for missing paths', async () => {
    await sbx.files.write(`${dir}/exists.txt`, 'x')
    assert.equal(await sbx.files.exists(`${dir}/exists.txt`), true)
    assert.equal(await sbx.files.exists(dir), true)
    assert.equal(await sbx.files.exists(`${dir}/does-not-exist`), false)
  })

  test('makeDir returns true, then false when the directory exists', async () => {
    const path = `${dir}/made/with/parents`
    assert.equal(await sbx.files.makeDir(path), true)
    assert.equal(await sbx.files.makeDir(path), false)
    const info = await sbx.files.getInfo(path)
    assert.equal(info.type, FileType.DIR)
    assert.equal(info.owner, USER)
    assert.equal((await sbx.files.getInfo(`${dir}/made`)).owner, USER)
  })

  test('rename moves a file and returns the new entry', async () => {
    const from = `${dir}/old-name.txt`
    const to = `${dir}/renamed/new-name.txt`
    await sbx.files.write(from, 'moving')
    const entry = await sbx.files.rename(from, to)
    assert.equal(entry.path, to)
    assert.equal(entry.name, 'new-name.txt')
    assert.equal(await sbx.files.exists(from), false)
    assert.equal(await sbx.files.read(to), 'moving')
  })

  test('rename of a missing source throws FileNotFoundError', async () => {
    await assert.rejects(sbx.files.rename(`${dir}/ghost`, `${dir}/ghost2`), FileNotFoundError)
  })

  test('remove deletes files and directories recursively; missing path does not throw', async () => {
    await sbx.files.write(`${dir}/rm/a/b.txt`, 'b')
    await sbx.files.write(`${dir}/rm-file.txt`, 'f')
    await sbx.files.remove(`${dir}/rm-file.txt`)
    assert.equal(await sbx.files.exists(`${dir}/rm-file.txt`), false)
    await sbx.files.remove(`${dir}/rm`)
    assert.equal(await sbx.files.exists(`${dir}/rm`), false)
    await sbx.files.remove(`${dir}/never-existed`)
    assert.equal(await sbx.files.exists(`${dir}/never-existed`), false)
  })
})
