// What `serve` prints to point the E2B SDK at it (header routing over one
// URL) works as printed: a fresh node process with that environment and
// nothing else — no NODE_TLS_REJECT_UNAUTHORIZED, no DNS preload — creates a
// sandbox, runs a command in it and kills it, with the SDK and with the
// official CLI. Under --tls the URL is https://<listen IP>, which the
// certificate names (an IP SAN), trusted through NODE_EXTRA_CA_CERTS.

import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

import { mode, runTag, RUN_META_KEY } from './helpers.mjs'

const SDK_DIR = join(dirname(fileURLToPath(import.meta.url)), '..')
const printed = JSON.parse(process.env.SDK_TEST_PRINTED_ENV ?? 'null')

/** Runs node with args in SDK_DIR with the printed environment only. */
async function withPrintedEnv(args) {
  const home = mkdtempSync(join(tmpdir(), 'sdk-printed-env-'))
  try {
    const env = { PATH: process.env.PATH, HOME: home, NO_UPDATE_NOTIFIER: '1', ...printed }
    return await promisify(execFile)(process.execPath, args, { cwd: SDK_DIR, env, timeout: 90_000 })
  } finally {
    rmSync(home, { recursive: true, force: true })
  }
}

test('the printed header-routing environment is complete as printed', () => {
  assert.ok(printed, 'the runner passed no SDK_TEST_PRINTED_ENV')
  for (const k of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_DOMAIN', 'E2B_API_KEY']) assert.ok(printed[k], `${k} not printed: ${JSON.stringify(printed)}`)
  assert.equal(printed.E2B_API_KEY, process.env.E2B_API_KEY)
  assert.equal(printed.NODE_TLS_REJECT_UNAUTHORIZED, undefined)
  if (mode === 'tls') {
    assert.match(printed.E2B_API_URL, /^https:\/\/127\.0\.0\.1:\d+$/)
    assert.ok(printed.NODE_EXTRA_CA_CERTS, `no NODE_EXTRA_CA_CERTS printed with an https URL: ${JSON.stringify(printed)}`)
  } else {
    assert.match(printed.E2B_API_URL, /^http:\/\/127\.0\.0\.1:\d+$/)
  }
})

test('the SDK in a process with only that environment: create, run, kill', { timeout: 120_000 }, async () => {
  const script = `
    import { Sandbox } from 'e2b'
    const sbx = await Sandbox.create({ metadata: { ${JSON.stringify(RUN_META_KEY)}: ${JSON.stringify(runTag)} } })
    try {
      const r = await sbx.commands.run('echo "printed env $((6 * 7))"')
      console.log(r.stdout.trim())
    } finally {
      await sbx.kill()
    }`
  const { stdout } = await withPrintedEnv(['--input-type=module', '-e', script])
  assert.equal(stdout.trim(), 'printed env 42')
})

test('the CLI in a process with only that environment: sandbox list', { timeout: 120_000 }, async () => {
  const { stdout } = await withPrintedEnv([join(SDK_DIR, 'node_modules', '@e2b', 'cli', 'dist', 'index.js'), 'sandbox', 'list', '--format', 'json'])
  assert.ok(Array.isArray(JSON.parse(stdout)), stdout)
})
