// Volumes through the SDK's Volume class: create, list, getInfo, connect,
// destroy; the content API's file operations (with no sandbox running);
// and volumeMounts at create: a volume written by one sandbox and read by
// another after the first is killed, and by the content API (at once in a
// jail, which shares the volume's directory; once the sandbox ends in a
// VM, which has the volume's image as a disk of its own until then).
//
// The content API has a URL of its own: in header mode the runner sets
// E2B_VOLUME_API_URL (server-process.mjs); in TLS mode the SDK's default,
// https://api.<E2B_DOMAIN>, reaches this server.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Volume, VolumeError, VolumeNotFoundError, VolumePathNotFoundError } from 'e2b'

import { apiFetch, backend, createSandbox, jsonBody, killCreated, runTag } from './helpers.mjs'

const volumes = new Set()
after(async () => {
  await killCreated()
  await Promise.all([...volumes].map((id) => Volume.destroy(id).catch(() => {})))
})

let seq = 0
async function newVolume() {
  const v = await Volume.create(`sdk-${runTag}-${process.env.SDK_TEST_MODE}-${++seq}`)
  volumes.add(v.volumeId)
  return v
}

describe('volumes', () => {
  test('create, list, getInfo, connect, destroy', async () => {
    const v = await newVolume()
    assert.match(v.volumeId, /^[0-9a-f-]{36}$/)
    assert.ok(v.name.startsWith(`sdk-${runTag}`))
    assert.ok((await Volume.list()).some((x) => x.volumeId === v.volumeId && x.name === v.name))
    const info = await Volume.getInfo(v.volumeId)
    assert.deepEqual({ volumeId: info.volumeId, name: info.name }, { volumeId: v.volumeId, name: v.name })
    assert.ok(info.token, 'getInfo gives a token')
    const again = await Volume.connect(v.volumeId)
    await again.writeFile('/hello.txt', 'hi')
    assert.equal(await v.readFile('/hello.txt'), 'hi')

    await assert.rejects(Volume.create(v.name), (err) => err instanceof VolumeError && /400: Volume with name '.*' already exists/.test(err.message))
    await assert.rejects(Volume.create('no spaces'), (err) => err instanceof VolumeError && /400: Invalid volume name/.test(err.message))
    assert.equal(await Volume.destroy(v.volumeId), true)
    assert.equal(await Volume.destroy(v.volumeId), false)
    await assert.rejects(Volume.getInfo(v.volumeId), VolumeNotFoundError)
  })
})

describe('volume content, no sandbox running', () => {
  let v
  before(async () => {
    v = await newVolume()
  })

  test('writeFile and readFile in every format, empty files, force', async () => {
    const stat = await v.writeFile('/test.txt', 'Hello, World!')
    assert.equal(stat.name, 'test.txt')
    assert.equal(stat.type, 'file')
    assert.equal(stat.path, '/test.txt')
    assert.equal(stat.size, 13)
    for (const d of [stat.atime, stat.mtime, stat.ctime]) assert.ok(d instanceof Date && !isNaN(d))
    assert.equal(await v.readFile('/test.txt'), 'Hello, World!')
    const bytes = new Uint8Array([0, 1, 2, 254, 255])
    await v.writeFile('/bytes.bin', bytes.buffer)
    assert.deepEqual(await v.readFile('/bytes.bin', { format: 'bytes' }), bytes)
    await v.writeFile('/blob.txt', new Blob(['blob content']))
    assert.equal(await (await v.readFile('/blob.txt', { format: 'blob' })).text(), 'blob content')
    const stream = await v.readFile('/test.txt', { format: 'stream' })
    assert.equal(await new Response(stream).text(), 'Hello, World!')
    await v.writeFile('/empty.txt', '')
    assert.equal(await v.readFile('/empty.txt'), '')

    await assert.rejects(v.writeFile('/test.txt', 'again'), (err) => err instanceof VolumeError && /^409: /.test(err.message))
    await v.writeFile('/test.txt', 'New content', { force: true })
    assert.equal(await v.readFile('/test.txt'), 'New content')
    await assert.rejects(v.writeFile('/no/such/dir/f.txt', 'x'), VolumePathNotFoundError)
  })

  test('metadata: uid, gid and mode at write, in getInfo, changed by updateMetadata', async () => {
    await v.writeFile('/meta.txt', 'm', { uid: 1000, gid: 1000, mode: 0o600 })
    const info = await v.getInfo('/meta.txt')
    assert.deepEqual([info.type, info.uid, info.gid, info.mode], ['file', 1000, 1000, 0o600])
    const updated = await v.updateMetadata('/meta.txt', { uid: 1001, gid: 1001, mode: 0o755 })
    assert.deepEqual([updated.path, updated.uid, updated.gid, updated.mode], ['/meta.txt', 1001, 1001, 0o755])
    await assert.rejects(v.updateMetadata('/non-existent.txt', { mode: 0o644 }), VolumePathNotFoundError)
  })

  test('makeDir, list (depth), exists, remove', async () => {
    const dir = await v.makeDir('/test-dir')
    assert.equal(dir.type, 'directory')
    await assert.rejects(v.makeDir('/deep/nested/dir'), VolumePathNotFoundError)
    await v.makeDir('/deep/nested/dir', { force: true, uid: 1000, gid: 1000, mode: 0o750 })
    const info = await v.getInfo('/deep/nested/dir')
    assert.deepEqual([info.type, info.uid, info.mode & 0o777], ['directory', 1000, 0o750])
    await v.makeDir('/deep', { force: true })
    await assert.rejects(v.makeDir('/test-dir'), (err) => err instanceof VolumeError && /^409: /.test(err.message))
    await v.writeFile('/deep/nested/dir/file.txt', 'deep')

    const top = (await v.list('/')).map((e) => e.name)
    for (const n of ['test-dir', 'deep', 'test.txt']) assert.ok(top.includes(n), `list('/') lacks ${n}: ${top}`)
    assert.deepEqual((await v.list('/deep')).map((e) => e.path), ['/deep/nested'])
    assert.deepEqual((await v.list('/deep', { depth: 3 })).map((e) => e.path), ['/deep/nested', '/deep/nested/dir', '/deep/nested/dir/file.txt'])
    await assert.rejects(v.list('/non-existent'), VolumePathNotFoundError)

    assert.equal(await v.exists('/deep/nested/dir/file.txt'), true)
    assert.equal(await v.exists('/non-existent.txt'), false)
    await v.remove('/deep')
    assert.equal(await v.exists('/deep'), false)
    await v.remove('/test-dir')
    await assert.rejects(v.remove('/non-existent.txt'), VolumePathNotFoundError)
  })
})

describe('volumes mounted in sandboxes', () => {
  // A jail mounts a volume's directory, which every sandbox and the
  // content API share at once; a VM mounts the volume's image as a disk
  // of its own, which nothing else mounts until the VM's sandbox ends (two
  // kernels mounting one ext4 file system corrupt it): see
  // docs/LIFECYCLE.md.
  const attachedAlone = backend === 'vm'

  test('a file written in one sandbox is read in another after the first is killed, and by the content API', { timeout: 180_000 }, async (t) => {
    const v = await newVolume()
    let t0 = performance.now()
    const { sbx: writer } = await createSandbox({ volumeMounts: { '/mnt/data': v } })
    t.diagnostic(`create with a volume ${(performance.now() - t0).toFixed(0)} ms`)
    await writer.files.write('/mnt/data/hello.txt', 'written by the writer')
    await writer.commands.run('mkdir -p /mnt/data/work && echo 42 > /mnt/data/work/answer')
    const info = await writer.getInfo()
    assert.deepEqual(info.volumeMounts, [{ name: v.name, path: '/mnt/data' }])
    const mount = (await writer.commands.run("grep ' /mnt/data ' /proc/mounts")).stdout
    assert.match(mount, /\srw,/, `the volume is not mounted read-write: ${mount}`)
    assert.match(mount, /\bnosuid\b/, `the volume is mounted with setuid: ${mount}`)
    assert.match(mount, /\bnodev\b/, `the volume is mounted with devices: ${mount}`)
    // Killed right after its last write: none of it is lost.
    await writer.kill()

    const { sbx: reader } = await createSandbox({ volumeMounts: { '/data': v.name } })
    assert.equal(await reader.files.read('/data/hello.txt'), 'written by the writer')
    assert.equal((await reader.commands.run('cat /data/work/answer; stat -c %U /data/hello.txt')).stdout, '42\nuser\n')

    if (attachedAlone) {
      // The reader's VM has it: the content API and other sandboxes wait.
      await assert.rejects(v.getInfo('/hello.txt'), (err) => {
        assert.ok(err instanceof VolumeError, `${err.name}: ${err.message}`)
        assert.match(err.message, new RegExp(`^409: volume .* is attached to sandbox ${reader.sandboxId} as a disk of its own`))
        return true
      })
      await assert.rejects(v.writeFile('/from-api.txt', 'from the API'), (err) => err instanceof VolumeError && /^409: /.test(err.message))
      await assert.rejects(createSandbox({ volumeMounts: { '/other': v } }), (err) => {
        assert.match(err.message, new RegExp(`^409: volume '${v.name}' is attached to sandbox ${reader.sandboxId} as a disk of its own`))
        return true
      })
    } else {
      const stat = await v.getInfo('/hello.txt')
      assert.equal(stat.uid, 1000, 'the file is owned by the sandbox user, as the sandbox sees it')
      // The content API's writes are in the sandbox at once, and so are
      // another sandbox's.
      await v.writeFile('/from-api.txt', 'from the API')
      assert.equal((await reader.commands.run('cat /data/from-api.txt')).stdout, 'from the API')
      const { sbx: other } = await createSandbox({ volumeMounts: { '/other': v } })
      await other.files.write('/other/from-other.txt', 'from another sandbox')
      assert.equal(await reader.files.read('/data/from-other.txt'), 'from another sandbox')
      await other.kill()
    }
    // Not destroyed while a sandbox mounts it.
    await assert.rejects(Volume.destroy(v.volumeId), (err) => err instanceof VolumeError && /^409: /.test(err.message))
    await reader.kill()

    // Once no sandbox has it, the content API has what they wrote, as
    // they wrote it.
    const stat = await v.getInfo('/hello.txt')
    assert.equal(stat.uid, 1000, 'the file is owned by the sandbox user, as the sandbox sees it')
    assert.equal(await v.readFile('/work/answer'), '42\n')
    // And a sandbox after them has the content API's writes.
    await v.writeFile('/after.txt', 'written with no sandbox', { force: true })
    t0 = performance.now()
    const { sbx: last } = await createSandbox({ volumeMounts: { '/data': v } })
    t.diagnostic(`create with a volume ${(performance.now() - t0).toFixed(0)} ms`)
    assert.equal(await last.files.read('/data/after.txt'), 'written with no sandbox')
    await last.kill()
  })

  test('bad mounts → 400 naming each (E2B’s wording)', async () => {
    const res = await apiFetch('/v2/sandboxes', {
      method: 'POST',
      body: JSON.stringify({ templateID: 'base', volumeMounts: [{ name: `missing-${runTag}`, path: '/data' }, { name: 'x', path: 'relative' }] }),
    })
    const body = await jsonBody(res)
    assert.equal(res.status, 400, JSON.stringify(body))
    assert.equal(body.message, `invalid mounts:\n\t- volume mount #0: volume 'missing-${runTag}' not found\n\t- volume mount #1: path must be absolute`)
    await assert.rejects(Sandbox.create({ volumeMounts: { '/data': `missing-${runTag}` } }), /400: invalid mounts/)
  })
})
