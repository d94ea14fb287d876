// Start and ready commands through the Template SDK: any ready command the
// SDK can express (setReadyCmd with a string, waitForURL, waitForFile) is
// run as E2B's builder runs it — the start command in the background, the
// ready command polled until it exits 0 — at build and in every sandbox, so
// a create returns a sandbox that is ready. A ready command that never
// succeeds fails the build, naming it. The runner starts the server with
// --build-ready-timeout 20s (BUILD_READY_TIMEOUT below).

import { after, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { BuildError, Sandbox, Template, waitForFile, waitForURL } from 'e2b'

import { apiFetch, killCreated, mode, runTag, RUN_META_KEY, track } from './helpers.mjs'

/** Names of this run's own: a cached build would not run its check again. */
const name = (what) => `sdk-test-ready-${what}-${mode}-${runTag}`

// Their sandboxes first: a template is not deleted while one runs.
after(async () => {
  await killCreated()
  for (const what of ['sleep', 'url', 'file']) {
    const res = await apiFetch(`/templates/${name(what)}`, { method: 'DELETE' })
    assert.ok(res.status === 204 || res.status === 404, `DELETE /templates/${name(what)}: ${res.status} ${await res.text()}`)
  }
})

/** What run.mjs passes as serve --build-ready-timeout. */
const BUILD_READY_TIMEOUT = '20s'

async function createFrom(template) {
  const t0 = performance.now()
  const sbx = await Sandbox.create(template, { metadata: { [RUN_META_KEY]: runTag } })
  track(sbx.sandboxId)
  return { sbx, ms: performance.now() - t0 }
}

async function build(template, alias) {
  const logs = []
  const t0 = performance.now()
  await Template.build(template, alias, { onBuildLogs: (e) => logs.push(e.message) })
  return { logs, s: (performance.now() - t0) / 1000 }
}

describe('ready commands', () => {
  test("setReadyCmd('sleep 3'): the build waits for it, and so does every create", { timeout: 120_000 }, async (t) => {
    const { logs, s } = await build(Template().fromTemplate('base').setReadyCmd('sleep 3'), name('sleep'))
    t.diagnostic(`build ${s.toFixed(1)} s`)
    assert.ok(s >= 3, `the build took ${s.toFixed(1)} s, less than the ready command's 3 s`)
    assert.ok(logs.some((m) => m.startsWith('template is ready')), `no ready line in the build log:\n${logs.join('\n')}`)
    const { sbx, ms } = await createFrom(name('sleep'))
    t.diagnostic(`create ${ms.toFixed(0)} ms`)
    assert.ok(ms >= 3000, `the create took ${ms.toFixed(0)} ms, less than the ready command's 3 s`)
    assert.equal((await sbx.commands.run('echo ok')).stdout, 'ok\n')
  })

  test('waitForURL: a server the start command runs answers as soon as create returns', { timeout: 120_000 }, async () => {
    const template = Template()
      .fromTemplate('base')
      .setStartCmd('mkdir -p /tmp/www && echo served > /tmp/www/index.html && python3 -m http.server 8123 --directory /tmp/www',
        waitForURL('http://localhost:8123/'))
    const { logs } = await build(template, name('url'))
    assert.ok(logs.some((m) => m.startsWith('template is ready')), `no ready line in the build log:\n${logs.join('\n')}`)
    const { sbx } = await createFrom(name('url'))
    // One try, no retry: the create waited for the URL.
    const res = await sbx.commands.run('curl -s http://localhost:8123/')
    assert.equal(res.stdout, 'served\n')
  })

  test('waitForFile: the file the start command makes is there when create returns, and not in the template', { timeout: 120_000 }, async () => {
    const template = Template()
      .fromTemplate('base')
      .setStartCmd('sleep 1 && echo "$$" > /tmp/ready-file && sleep infinity', waitForFile('/tmp/ready-file'))
    await build(template, name('file'))
    const { sbx, ms } = await createFrom(name('file'))
    assert.ok(ms >= 1000, `the create took ${ms.toFixed(0)} ms: it did not wait for the start command's file`)
    const pid = (await sbx.files.read('/tmp/ready-file')).trim()
    // Written by this sandbox's start command, which still runs.
    assert.equal((await sbx.commands.run(`kill -0 ${pid} && echo alive`, { user: 'root' })).stdout, 'alive\n')
  })

  test('a ready command that never succeeds fails the build, naming it', { timeout: 120_000 }, async () => {
    const alias = name('never')
    const err = await build(Template().fromTemplate('base').setStartCmd('sleep infinity', waitForFile('/never')), alias).then(
      () => assert.fail('the build succeeded'),
      (e) => e,
    )
    assert.ok(err instanceof BuildError, `got ${err}`)
    assert.match(err.message, new RegExp(`ready command "\\[ -f /never \\]" did not succeed within ${BUILD_READY_TIMEOUT}`))
    assert.match(err.message, /serve --build-ready-timeout/)
    assert.equal(await Template.exists(alias), false)
  })
})
