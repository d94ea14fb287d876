// The E2B template build API through the official SDK: Template() steps,
// Template.build() (request, upload by files hash, trigger, status polling
// with logsOffset), then sandboxes from the new alias. The build is real:
// apt-get installs jq from the Debian mirror in a build jail.

import { after, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { BuildError, Sandbox, Template } from 'e2b'

import { apiFetch, jsonBody, killCreated, runTag, RUN_META_KEY, track } from './helpers.mjs'

const context = mkdtempSync(join(tmpdir(), 'sdk-template-'))
after(async () => {
  await killCreated()
  rmSync(context, { recursive: true, force: true })
})

// The same alias in both modes: the second build finds every layer cached
// and the context already uploaded (present: true).
const ALIAS = 'sdk-test-tpl'
const GREETING = `hello from the build context, run ${runTag}\n`
writeFileSync(join(context, 'greeting.txt'), GREETING)

async function createFrom(template) {
  const sbx = await Sandbox.create(template, { metadata: { [RUN_META_KEY]: runTag } })
  track(sbx.sandboxId)
  return sbx
}

describe('template build', () => {
  test('aptInstall + copy + runCmd build, then sandboxes from the alias have all three', { timeout: 280_000 }, async (t) => {
    const template = Template({ fileContextPath: context })
      .fromTemplate('base')
      // aptInstall runs as root whatever the USER (the SDK sends the user
      // with the step); the runCmd after it runs as the USER set here.
      .setUser('user')
      .aptInstall(['jq'])
      .copy('greeting.txt', '/home/user/greeting.txt')
      .runCmd('echo "built $((6 * 7)) by $(whoami)" > /home/user/cmd-output.txt && echo wrote the output file')

    const logs = []
    const t0 = performance.now()
    const info = await Template.build(template, ALIAS, { onBuildLogs: (e) => logs.push(e) })
    t.diagnostic(`build took ${((performance.now() - t0) / 1000).toFixed(1)} s, ${logs.length} log lines`)
    assert.equal(info.alias, ALIAS)
    assert.equal(info.templateId, ALIAS)
    assert.match(info.buildId, /^[0-9a-f-]{36}$/)
    assert.deepEqual(info.tags, ['default'])

    const messages = logs.map((e) => e.message)
    assert.ok(messages.some((m) => m.includes('apt-get')), `no apt-get step in the logs:\n${messages.join('\n')}`)
    assert.ok(messages.some((m) => m.includes('ready')), `no ready line in the logs:\n${messages.join('\n')}`)

    // The final status, read again from the start: ready, with every line.
    const status = await Template.getBuildStatus(info, { logsOffset: 0 })
    assert.equal(status.status, 'ready')
    assert.equal(status.reason, undefined)

    assert.equal(await Template.exists(ALIAS), true)
    const tags = await Template.getTags(ALIAS)
    assert.deepEqual(tags.map((x) => [x.tag, x.buildId]), [['default', info.buildId]])

    const sbx = await createFrom(ALIAS)
    const jq = await sbx.commands.run(`echo '{"a": 41}' | jq '.a + 1'`)
    assert.equal(jq.stdout, '42\n')
    assert.equal(await sbx.files.read('/home/user/greeting.txt'), GREETING)
    assert.equal(await sbx.files.read('/home/user/cmd-output.txt'), 'built 42 by user\n')
    // The default user and workdir are the base template's.
    assert.equal((await sbx.commands.run('whoami && pwd')).stdout, 'user\n/home/user\n')

    // name:tag and the template ID reach the same build.
    const byTag = await createFrom(`${ALIAS}:default`)
    assert.equal(await byTag.files.read('/home/user/greeting.txt'), GREETING)

    // A tag given to the build and taken away again through the API
    // (DELETE /templates/tags); an unknown one is an error.
    await Template.assignTags(`${ALIAS}:default`, 'sdk-extra')
    assert.deepEqual((await Template.getTags(ALIAS)).map((x) => x.tag).sort(), ['default', 'sdk-extra'])
    assert.equal(await (await createFrom(`${ALIAS}:sdk-extra`)).files.read('/home/user/greeting.txt'), GREETING)
    await Template.removeTags(ALIAS, 'sdk-extra')
    assert.deepEqual((await Template.getTags(ALIAS)).map((x) => x.tag), ['default'])
    await assert.rejects(createFrom(`${ALIAS}:sdk-extra`), /not found/)
    await assert.rejects(Template.removeTags(ALIAS, 'sdk-extra'), /sdk-extra/)
  })

  test('a failing runCmd fails the build naming the step, and leaves no template', { timeout: 120_000 }, async () => {
    const alias = 'sdk-test-fail'
    const template = Template({ fileContextPath: context })
      .fromTemplate('base')
      .runCmd('echo step one is fine')
      .runCmd('echo about to fail && exit 3')

    const logs = []
    const err = await Template.build(template, alias, { onBuildLogs: (e) => logs.push(e) }).then(
      () => assert.fail('the build succeeded'),
      (e) => e,
    )
    assert.ok(err instanceof BuildError, `got ${err}`)
    assert.match(err.message, /step 2 \(RUN echo about to fail && exit 3\) failed with exit code 3/)
    assert.match(err.message, /about to fail/)
    assert.ok(logs.some((e) => e.message === 'about to fail'), 'the step output is in the build logs')

    assert.equal(await Template.exists(alias), false)
    await assert.rejects(createFrom(alias), /not found/)
  })

  test("a build's cpuCount and memoryMB are what its sandboxes get: nproc, the memory limit inside, getInfo", { timeout: 200_000 }, async () => {
    const alias = 'sdk-test-resources'
    await Template.build(Template().fromTemplate('base').runCmd('true'), alias, { cpuCount: 1, memoryMB: 768 })
    const sbx = await createFrom(alias)
    assert.equal((await sbx.commands.run('nproc')).stdout, '1\n')
    const limit = await sbx.commands.run('cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes')
    assert.equal(limit.stdout.trim(), String(768 << 20))
    const info = await Sandbox.getInfo(sbx.sandboxId)
    assert.deepEqual([info.cpuCount, info.memoryMB], [1, 768])
  })

  test('a build asking for more than the server allows is refused naming the limit, not lowered', async () => {
    await assert.rejects(
      Template.build(Template().fromTemplate('base'), 'sdk-test-too-big', { cpuCount: 1000 }),
      /cpuCount 1000 is more than this server allows: at most \d+ \(serve --max-cpu-count\)/,
    )
    assert.equal(await Template.exists('sdk-test-too-big'), false)
  })

  test('the raw API refuses bad input with 400 and unknown builds with 404', async () => {
    const bad = await apiFetch('/v3/templates', { method: 'POST', body: JSON.stringify({ name: 'Bad Name!' }) })
    assert.equal(bad.status, 400)
    assert.match((await jsonBody(bad)).message, /template name/)

    const builtIn = await apiFetch('/v3/templates', { method: 'POST', body: JSON.stringify({ name: 'base' }) })
    assert.equal(builtIn.status, 400)

    const missing = await apiFetch(`/templates/${ALIAS}/builds/00000000-0000-4000-8000-000000000000/status`)
    assert.equal(missing.status, 404)
    assert.deepEqual(Object.keys(await jsonBody(missing)).sort(), ['code', 'message'])

    const req = await apiFetch('/v3/templates', { method: 'POST', body: JSON.stringify({ name: `${ALIAS}-raw` }) })
    assert.equal(req.status, 202)
    const { templateID, buildID } = await jsonBody(req)
    const step = await apiFetch(`/v2/templates/${templateID}/builds/${buildID}`, {
      method: 'POST',
      body: JSON.stringify({ fromTemplate: 'base', steps: [{ type: 'ADD', args: ['x', '/x'] }] }),
    })
    assert.equal(step.status, 400)
    assert.match((await jsonBody(step)).message, /step 1 \(ADD\): unknown step type/)
  })
})
