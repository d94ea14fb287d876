// files.watchDir through the official SDK (filesystem.Filesystem/WatchDir).

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { FileNotFoundError, FilesystemEventType, FileType, InvalidArgumentError } from 'e2b'

import { debugSandbox, scratchDir, USER, waitFor } from './helpers.mjs'

const sbx = debugSandbox()
let dir
let cleanup

before(async () => {
  ;({ dir, cleanup } = await scratchDir(sbx, 'watch'))
})
after(async () => {
  await cleanup?.()
})

/** Starts a watch and collects its events; stop() is registered for cleanup. */
async function watch(path, opts = {}) {
  const events = []
  const handle = await sbx.files.watchDir(path, (e) => events.push(e), opts)
  const w = {
    events,
    handle,
    waitEvent: (pred, what) =>
      waitFor(() => events.find(pred), {
        timeoutMs: 5000,
        what: `${what}; events so far: ${JSON.stringify(events.map((e) => [e.type, e.name]))}`,
      }),
  }
  return w
}

describe('watchDir', () => {
  test('non-recursive watch reports a file write with its name', async () => {
    const wdir = `${dir}/flat`
    await sbx.files.makeDir(`${wdir}/sub`)
    const w = await watch(wdir)
    try {
      await sbx.files.write(`${wdir}/file.txt`, 'hello')
      const ev = await w.waitEvent(
        (e) => e.name === 'file.txt' && e.type === FilesystemEventType.WRITE,
        'a write event for file.txt'
      )
      assert.equal(ev.entry, undefined, 'no entry without includeEntry')
      // Events in a subdirectory are not reported by a non-recursive watch:
      // write there first, then a marker at the top level.
      await sbx.files.write(`${wdir}/sub/inner.txt`, 'inner')
      await sbx.files.write(`${wdir}/marker.txt`, 'm')
      await w.waitEvent((e) => e.name === 'marker.txt', 'an event for marker.txt')
      assert.ok(!w.events.some((e) => e.name.includes('inner.txt')), JSON.stringify(w.events.map((e) => e.name)))
    } finally {
      await w.handle.stop()
    }
  })

  test('reports create, rename and remove as well', async () => {
    const wdir = `${dir}/ops`
    await sbx.files.makeDir(wdir)
    const w = await watch(wdir)
    try {
      await sbx.commands.run(`touch ${wdir}/a.txt && mv ${wdir}/a.txt ${wdir}/b.txt && rm ${wdir}/b.txt`)
      await w.waitEvent((e) => e.name === 'a.txt' && e.type === FilesystemEventType.CREATE, 'create a.txt')
      await w.waitEvent((e) => e.name === 'a.txt' && e.type === FilesystemEventType.RENAME, 'rename a.txt')
      await w.waitEvent((e) => e.name === 'b.txt' && e.type === FilesystemEventType.REMOVE, 'remove b.txt')
    } finally {
      await w.handle.stop()
    }
  })

  test('recursive watch picks up a file in a subdirectory created after the watch started', async () => {
    const wdir = `${dir}/rec`
    await sbx.files.makeDir(wdir)
    const w = await watch(wdir, { recursive: true })
    try {
      await sbx.files.makeDir(`${wdir}/newsub`)
      await w.waitEvent((e) => e.name === 'newsub' && e.type === FilesystemEventType.CREATE, 'create of newsub')
      await sbx.files.write(`${wdir}/newsub/file.txt`, 'nested')
      await w.waitEvent(
        (e) => e.name === 'newsub/file.txt' && e.type === FilesystemEventType.WRITE,
        'a write event named newsub/file.txt'
      )
    } finally {
      await w.handle.stop()
    }
  })

  test('includeEntry attaches the entry info to the event', async () => {
    const wdir = `${dir}/entry`
    await sbx.files.makeDir(wdir)
    const w = await watch(wdir, { includeEntry: true })
    try {
      await sbx.files.write(`${wdir}/with-entry.txt`, 'abc')
      const ev = await w.waitEvent(
        (e) => e.name === 'with-entry.txt' && e.type === FilesystemEventType.WRITE && e.entry,
        'a write event with an entry'
      )
      assert.equal(ev.entry.name, 'with-entry.txt')
      assert.equal(ev.entry.path, `${wdir}/with-entry.txt`)
      assert.equal(ev.entry.type, FileType.FILE)
      assert.equal(ev.entry.owner, USER)
      assert.equal(ev.entry.mode, 0o644)
    } finally {
      await w.handle.stop()
    }
  })

  test('stop() ends the stream: no events after stop, onExit is called', async () => {
    const wdir = `${dir}/stop`
    await sbx.files.makeDir(wdir)
    let exited = false
    const events = []
    const handle = await sbx.files.watchDir(wdir, (e) => events.push(e), { onExit: () => (exited = true) })
    await handle.stop()
    await waitFor(() => exited, { what: 'onExit after stop()' })
    await sbx.files.write(`${wdir}/after-stop.txt`, 'x')
    await new Promise((r) => setTimeout(r, 300))
    assert.deepEqual(events, [])
  })

  test('watching a missing directory throws FileNotFoundError', async () => {
    await assert.rejects(sbx.files.watchDir(`${dir}/no-such-dir`, () => {}), FileNotFoundError)
  })

  test('watching a file throws InvalidArgumentError', async () => {
    await sbx.files.write(`${dir}/plain.txt`, 'x')
    await assert.rejects(sbx.files.watchDir(`${dir}/plain.txt`, () => {}), InvalidArgumentError)
  })
})
