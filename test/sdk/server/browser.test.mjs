// Headless Chromium in sandboxes of the built-in `browser` template: it
// renders a page served from inside the same sandbox (python3 -m
// http.server on loopback), so no traffic leaves the sandbox.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { Sandbox } from 'e2b'

import { RUN_META_KEY, killCreated, mode, runTag, serveDir, track } from './helpers.mjs'

const PORT = 8000
const PAGE = `http://127.0.0.1:${PORT}/`
const SITE = '/home/user/site'

after(killCreated)

describe(`browser template: headless Chromium (${mode} mode)`, { timeout: 240_000 }, () => {
  let sbx
  let createMs
  // Written by a script, so only a browser that runs JavaScript has it.
  const word = `rendered-${randomBytes(4).toString('hex')}`

  before(async () => {
    const t0 = performance.now()
    sbx = await Sandbox.create('browser', { timeoutMs: 300_000, metadata: { [RUN_META_KEY]: runTag } })
    createMs = performance.now() - t0
    track(sbx.sandboxId)
    await sbx.files.write(
      `${SITE}/index.html`,
      `<!doctype html><html><body><p id="out">static</p>` +
        `<script>document.getElementById('out').textContent = ${JSON.stringify(word)}</script></body></html>`
    )
    await serveDir(sbx, SITE, PORT)
  })

  test('figures: Sandbox.create', (t) => {
    t.diagnostic(`browser Sandbox.create: ${createMs.toFixed(0)} ms`)
  })

  test('chromium --headless --no-sandbox --dump-dom renders the page, script included', async (t) => {
    const t0 = performance.now()
    const r = await sbx.commands.run(`chromium --headless --no-sandbox --dump-dom ${PAGE}`, { timeoutMs: 120_000 })
    t.diagnostic(`chromium --dump-dom of a local page: ${(performance.now() - t0).toFixed(0)} ms`)
    assert.match(r.stdout, new RegExp(`<p id="out">${word}</p>`))
  })

  test('chromium needs no --no-sandbox of its own: the template passes it', async () => {
    const r = await sbx.commands.run(`chromium --headless --dump-dom ${PAGE}`, { timeoutMs: 120_000 })
    assert.match(r.stdout, new RegExp(`<p id="out">${word}</p>`))
  })

  test('chromium --screenshot writes a PNG of the window size', async () => {
    await sbx.commands.run(`chromium --headless --screenshot=/tmp/page.png --window-size=640,480 ${PAGE}`, {
      timeoutMs: 120_000,
    })
    const png = Buffer.from(await sbx.files.read('/tmp/page.png', { format: 'bytes' }))
    assert.equal(png.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'not a PNG')
    assert.deepEqual([png.readUInt32BE(16), png.readUInt32BE(20)], [640, 480])
  })
})
