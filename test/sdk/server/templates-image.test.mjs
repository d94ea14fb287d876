// Template().fromImage() through the official SDK, and the server-side
// fetch rule it is under: the server pulls what a caller names, so a
// registry on loopback (or any private, link-local or host address) is
// refused with the rule named, unless the operator allowed it with
// `serve --registry`. run.mjs starts the server with --registry for the
// registry it runs (SDK_TEST_REGISTRY); this file starts a second one,
// with the same image, that the server was not told about.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { BuildError, Sandbox, Template } from 'e2b'

import { imageOf, startRegistry, TEST_IMAGE_FILES } from '../registry.mjs'
import { killCreated, runTag, RUN_META_KEY, track } from './helpers.mjs'

const allowed = process.env.SDK_TEST_REGISTRY
if (!allowed) throw new Error('SDK_TEST_REGISTRY is not set; run these tests through test/sdk/run.mjs')

let other
before(async () => {
  other = await startRegistry({ 'x:latest': imageOf(TEST_IMAGE_FILES) })
})
after(async () => {
  await killCreated()
  await other?.close()
})

describe('fromImage', () => {
  test('a registry on loopback that the operator did not allow is refused, naming the rule', { timeout: 60_000 }, async () => {
    // The registry works: a plain request from here is answered (the
    // positive control), so a refusal below is the server's doing.
    const ping = await fetch(`http://${other.host}/v2/x/manifests/latest`)
    assert.equal(ping.status, 200)
    const before = other.requests()

    const err = await Template.build(Template().fromImage(`${other.host}/x`), 'sdk-test-image-refused').then(
      () => assert.fail('the build from a loopback registry succeeded'),
      (e) => e
    )
    assert.ok(err instanceof BuildError, `got ${err}`)
    assert.equal(
      err.message,
      `fromImage: registry ${other.host} resolves to 127.0.0.1, in the loopback range 127.0.0.0/8: refused; allow it with --registry ${other.host}`
    )
    assert.equal(other.requests(), before, 'the server sent the refused registry a request')
    assert.equal(await Template.exists('sdk-test-image-refused'), false)
  })

  test('the registry allowed with serve --registry is pulled from', { timeout: 120_000 }, async (t) => {
    const alias = 'sdk-test-image'
    const logs = []
    const info = await Template.build(Template().fromImage(`${allowed}/x`), alias, { onBuildLogs: (e) => logs.push(e) })
    t.diagnostic(`${logs.length} log lines; last: ${logs.at(-1)?.message}`)
    assert.equal(info.alias, alias)
    assert.equal((await Template.getBuildStatus(info)).status, 'ready')
    assert.equal(await Template.exists(alias), true)

    // The image's files are the sandbox's: read through envd, which needs
    // no shell in the image.
    const sbx = await Sandbox.create(alias, { metadata: { [RUN_META_KEY]: runTag } })
    track(sbx.sandboxId)
    assert.equal(await sbx.files.read('/hello.txt'), TEST_IMAGE_FILES['hello.txt'])
  })
})
