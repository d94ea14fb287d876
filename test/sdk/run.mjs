#!/usr/bin/env node
// Runs the SDK conformance suites and prints one combined
// "N passed, M failed[, K skipped]". Exit status is 1 when any test failed,
// and under CI (CI=true) also when any was skipped or left todo: CI has what
// every test needs, so a skip there hides work not done.
//
// 1. envd suite: starts envd (twice: a debug instance on 127.0.0.1:49983 and
//    an access-token instance on 127.0.0.1:49984) and runs envd/*.test.mjs
//    with node:test against them through the official E2B SDK.
// 2. server suite: starts `agent-sandbox serve` (server-process.mjs) and runs
//    server/*.test.mjs twice, one mode after the other against the same data
//    dir: header routing over http (E2B_API_URL = E2B_SANDBOX_URL), then TLS
//    host routing (E2B_DOMAIN=sandbox.test:<port>, NODE_EXTRA_CA_CERTS).
//
// Usage: node test/sdk/run.mjs [area ...]
//   (no args)                  both suites
//   files watch                envd areas only
//   server                     the whole server suite only
//   server/list server/ports   some server files only (both modes)
// SDK_TEST_SERVER_MODES=header (or tls) limits the server suite to one mode.
//
// SDK_TEST_BACKEND=vm runs the server suite against `serve --backend vm`
// (data dir AGENT_SANDBOX_TEST_VM_DATA_DIR, see server-process.mjs): by
// default only its files (BACKEND_FILES.vm: the core — create, commands,
// PTY, files, watch, getHost, timeout, pause/resume, kill — and fork,
// snapshots, pauses to RAM, disk and files with auto-resume, volumes),
// header mode only and SDK_TEST_SERVER_CONCURRENCY 2: each sandbox is a
// VM, emulated (TCG) where there is no KVM, and the run must stay within
// minutes in CI (its suites took 88–122 s on a loaded 2-core host, the
// core files alone 22–29 s).
// SDK_TEST_BACKEND=gvisor does the same against `serve --backend gvisor`
// (data dir AGENT_SANDBOX_TEST_GVISOR_DATA_DIR) with the core files, the
// code interpreter's and concurrency 3.

import { randomBytes } from 'node:crypto'
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { run } from 'node:test'
import { spec } from 'node:test/reporters'

import { startEnvdPair } from './envd-process.mjs'
import { imageOf, startRegistry, TEST_IMAGE_FILES } from './registry.mjs'
import { killTaggedSandboxes, serverDataDir, startServer, TLS_DOMAIN_NAME } from './server-process.mjs'

const HERE = dirname(fileURLToPath(import.meta.url))
const ENVD_TEST_DIR = join(HERE, 'envd')
const SERVER_TEST_DIR = join(HERE, 'server')
const DNS_PRELOAD = join(HERE, 'dns-preload.mjs')
// node:test's run() applies `timeout` to each test file as a whole.
const ENVD_FILE_TIMEOUT_MS = 60_000
const SERVER_FILE_TIMEOUT_MS = 5 * 60_000
// Server test files run side by side: each scopes its list queries by its own metadata.
const BACKEND = process.env.SDK_TEST_BACKEND || 'jail'
const SERVER_CONCURRENCY = Number(process.env.SDK_TEST_SERVER_CONCURRENCY || { vm: 2, gvisor: 3 }[BACKEND] || 5)
/** The server files that make up the SDK core every backend must pass. */
const CORE_FILES = ['lifecycle', 'router', 'ports']
/**
 * What a backend other than the jail runs by default: the core, and on the
 * vm the lifecycle files too, which its memory snapshots make behave
 * otherwise than on the jail; on gvisor the code interpreter's, whose
 * kernels are the heaviest users of its system call interface.
 */
const BACKEND_FILES = {
  vm: [...CORE_FILES, 'fork', 'snapshots', 'autopause', 'pause-disk', 'volumes'],
  gvisor: [...CORE_FILES, 'codeinterp'],
}
/**
 * Server files that need a server of their own, started with these flags,
 * on the backends listed: each runs alone (header mode) after the shared
 * server's files, and only when the whole server suite or the file is
 * asked for.
 */
const SOLO_FILES = {
  'timeout-limit': { flags: ['--max-timeout', '2h'], backends: ['jail'] },
  'timeout-unlimited': { flags: ['--max-timeout', '0'], backends: ['jail'] },
  // Every pause that keeps memory goes to disk at once where the backend can.
  'pause-disk': { flags: ['--pause-in-ram', '0'], backends: ['jail', 'vm'] },
}
/**
 * Server files that need a server of their own on a fresh data dir (as a
 * new user's first `serve`), started with these flags, after the solo
 * files. The dir is seeded with hard links to the shared data dir's
 * complete base template and cached build layers (as the Makefile's
 * seed_base does), so that nothing is debootstrapped again and a built-in
 * template's first build takes seconds, not minutes; it holds no other
 * template. It is made anew for each run and removed after.
 */
const FRESH_FILES = {
  'builtin-on-demand': [],
}
/** node:test's per-file timeout for FRESH_FILES: a build from nothing cached takes minutes. */
const FRESH_FILE_TIMEOUT_MS = 20 * 60_000
/** Metadata key every server-suite sandbox carries (see server/helpers.mjs). */
const RUN_META_KEY = 'sdkTestRun'

function testFiles(dir, areas) {
  const all = readdirSync(dir)
    .filter((f) => f.endsWith('.test.mjs'))
    .sort()
  if (areas.length === 0) return all.map((f) => join(dir, f))
  return areas.map((a) => {
    const f = all.find((name) => name === `${a}.test.mjs` || name === basename(a))
    if (!f) throw new Error(`no test file for '${a}' in ${dir}; have: ${all.join(', ')}`)
    return join(dir, f)
  })
}

/** Splits the command line into envd areas and server areas; null = suite not selected. */
function parseArgs(args) {
  if (args.length === 0) return { envd: [], server: [] }
  const envd = []
  const server = []
  let wantServer = false
  for (const a of args) {
    if (a === 'server') wantServer = true
    else if (a.startsWith('server/')) {
      wantServer = true
      server.push(a.slice('server/'.length))
    } else envd.push(a)
  }
  return { envd: envd.length ? envd : null, server: wantServer ? server : null }
}

/** Environment for the test processes: only what this runner decides. */
function applyTestEnv(env) {
  for (const k of Object.keys(process.env)) {
    if (k.startsWith('E2B_') || k.startsWith('SDK_TEST_RESOLVE')) delete process.env[k]
  }
  delete process.env.NODE_EXTRA_CA_CERTS
  Object.assign(process.env, env)
}

function runTests(files, { concurrency = 1, timeout, label }) {
  return new Promise((resolve, reject) => {
    const counts = { passed: 0, failed: 0, skipped: 0 }
    const failures = []
    const skips = []
    const diagnostics = []
    // Each file runs in its own child node process with process.env as it is now.
    const stream = run({ files, concurrency, timeout })

    // Count leaf tests only; a suite's own pass/fail is the sum of its tests.
    // A file that fails to load reports as one failed test named after it.
    stream.on('test:pass', (t) => {
      if (t.details?.type === 'suite') return
      if (t.skip || t.todo) {
        counts.skipped++
        const why = typeof (t.skip || t.todo) === 'string' ? `: ${t.skip || t.todo}` : ''
        skips.push(`${label}${basename(t.file ?? '?')}: ${t.name} (${t.skip ? 'skipped' : 'todo'}${why})`)
      } else counts.passed++
    })
    stream.on('test:fail', (t) => {
      if (t.details?.type === 'suite') return
      counts.failed++
      failures.push(`${label}${basename(t.file ?? '?')}: ${t.name}: ${t.details?.error?.cause?.message ?? t.details?.error?.message}`)
    })
    // Measurements the tests report with t.diagnostic() (not the run summary).
    stream.on('test:diagnostic', (d) => {
      if (d.file && !/^(tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) /.test(d.message)) {
        diagnostics.push(`${label}${basename(d.file)}: ${d.message}`)
      }
    })

    const out = stream.compose(new spec())
    out.on('data', (chunk) => process.stdout.write(chunk))
    out.on('error', reject)
    out.on('end', () => resolve({ counts, failures, skips, diagnostics }))
  })
}

async function runEnvdSuite(areas) {
  const files = testFiles(ENVD_TEST_DIR, areas)

  let pair
  try {
    pair = await startEnvdPair()
  } catch (err) {
    console.error(`envd setup failed: ${err.message}`)
    return setupFailure('envd: setup', err)
  }

  let result
  try {
    console.log(
      `envd ${pair.version} (${pair.versionSource}); debug instance ${pair.main.url} pid ${pair.main.pid}, ` +
        `token instance ${pair.token.url} pid ${pair.token.pid}`
    )
    applyTestEnv(pair.env)
    result = await runTests(files, { timeout: ENVD_FILE_TIMEOUT_MS, label: '' })
  } finally {
    await pair.stop()
    for (const [name, inst] of [['main', pair.main], ['token', pair.token]]) {
      const path = join(tmpdir(), `envd-sdk-${name}.log`)
      writeFileSync(path, inst.output())
      if (result?.counts.failed) console.log(`envd ${name} output (last 64 KiB): ${path}`)
    }
  }
  return result
}

function setupFailure(name, err) {
  return {
    counts: { passed: 0, failed: 1, skipped: 0 },
    failures: [`${name}: ${err.message.split('\n')[0]}`],
    skips: [],
    diagnostics: [],
    setupFailed: true,
  }
}

/**
 * Server suite, one mode: start `agent-sandbox serve`, run the files with
 * the SDK pointed at it, kill leftover sandboxes, stop the server.
 */
async function runServerMode(mode, files, flags = [], { dataDir = serverDataDir(BACKEND), timeout = SERVER_FILE_TIMEOUT_MS } = {}) {
  const tags = [BACKEND === 'jail' ? '' : BACKEND, mode, flags.join(' ')].filter(Boolean)
  const label = `server[${tags.join(',')}] `
  console.log(`\n=== server suite, ${BACKEND} backend, ${mode} mode${flags.length ? `, ${flags.join(' ')}` : ''} (data dir ${dataDir}) ===`)
  // The registry the fromImage tests may pull from: on loopback, so the
  // server reaches it only because --registry allows it.
  const registry = await startRegistry({ 'x:latest': imageOf(TEST_IMAGE_FILES) })
  let server
  try {
    // A server of its own builds no templates but base.
    const templates = flags.length || dataDir !== serverDataDir(BACKEND) ? { templates: [] } : {}
    server = await startServer({ mode, backend: BACKEND, dataDir, extraArgs: ['--registry', registry.host, '--build-ready-timeout', '20s', ...flags], ...templates })
  } catch (err) {
    await registry.close()
    console.error(`server (${mode}) setup failed: ${err.message}`)
    return setupFailure(`${label}setup`, err)
  }

  const runTag = randomBytes(6).toString('hex')
  let result
  const t0 = Date.now()
  try {
    const stale = await killTaggedSandboxes(server, RUN_META_KEY)
    if (stale.length) console.log(`killed ${stale.length} sandbox(es) left over by earlier runs: ${stale.join(', ')}`)

    const nodeOptions = [process.env.NODE_OPTIONS, `--import=${pathToFileURL(DNS_PRELOAD).href}`].filter(Boolean).join(' ')
    applyTestEnv({
      ...server.env,
      NODE_OPTIONS: nodeOptions,
      // getHost() names: <port>-<id>.localhost:<port> (header) or
      // api./<port>-<id>.sandbox.test:<port> (tls) → 127.0.0.1.
      SDK_TEST_RESOLVE: mode === 'tls' ? TLS_DOMAIN_NAME : 'localhost',
      SDK_TEST_MODE: mode,
      SDK_TEST_BACKEND: BACKEND,
      SDK_TEST_API_URL: server.url,
      SDK_TEST_RUN: runTag,
      SDK_TEST_REGISTRY: registry.host,
      SDK_TEST_DATA_DIR: server.dataDir,
      SDK_TEST_PRINTED_ENV: JSON.stringify(server.printedEnv),
    })
    result = await runTests(files, { concurrency: SERVER_CONCURRENCY, timeout, label })
    console.log(`server suite (${mode}) took ${((Date.now() - t0) / 1000).toFixed(0)} s`)

    const left = await killTaggedSandboxes(server, RUN_META_KEY, runTag)
    if (left.length) console.log(`warning: the tests left ${left.length} sandbox(es) running; killed: ${left.join(', ')}`)
  } catch (err) {
    result ??= setupFailure(`${label}run`, err)
    if (!result.setupFailed) console.error(`server (${mode}): ${err.message}`)
  } finally {
    await registry.close()
    const exit = await server.stop()
    // A server of its own (flags) has a log of its own, named after its file.
    const solo = flags.length ? `-${basename(files[0], '.test.mjs')}` : ''
    const path = join(tmpdir(), `agent-sandbox-sdk-${BACKEND === 'jail' ? '' : `${BACKEND}-`}${mode}${solo}.log`)
    writeFileSync(path, server.output())
    console.log(`server (${mode}) stopped (${exit?.signal ?? `exit ${exit?.code}`}); output: ${path}`)
  }
  return result
}

async function runServerSuite(areas) {
  if (!['jail', 'gvisor', 'vm'].includes(BACKEND)) throw new Error(`unknown SDK_TEST_BACKEND '${BACKEND}' (jail, gvisor, vm)`)
  const coreOnly = BACKEND !== 'jail'
  const soloOf = (f) => SOLO_FILES[basename(f, '.test.mjs')]
  const isFresh = (f) => basename(f, '.test.mjs') in FRESH_FILES
  const files = testFiles(SERVER_TEST_DIR, coreOnly && areas.length === 0 ? BACKEND_FILES[BACKEND] : areas)
  const shared = files.filter((f) => !soloOf(f) && !isFresh(f))
  const solo = files.filter((f) => soloOf(f)?.backends.includes(BACKEND))
  const fresh = coreOnly ? [] : files.filter(isFresh)
  for (const a of areas) {
    const s = SOLO_FILES[basename(a, '.test.mjs')]
    if (s && !s.backends.includes(BACKEND)) throw new Error(`server/${a} runs on the ${s.backends.join(' and ')} backend only, not ${BACKEND}`)
  }
  const modes = (process.env.SDK_TEST_SERVER_MODES || (coreOnly ? 'header' : 'header,tls')).split(',').map((m) => m.trim()).filter(Boolean)
  const results = []
  // One after the other: two servers must not share one data dir (database).
  for (const mode of modes) {
    if (mode !== 'header' && mode !== 'tls') throw new Error(`unknown server mode '${mode}' (header, tls)`)
    if (shared.length) results.push(await runServerMode(mode, shared))
  }
  for (const f of solo) {
    results.push(await runServerMode('header', [f], [...soloOf(f).flags, '--warm-pool', 'none']))
  }
  for (const f of fresh) {
    const dataDir = `${serverDataDir(BACKEND)}-fresh`
    try {
      seedFreshDataDir(serverDataDir(BACKEND), dataDir)
      results.push(await runServerMode('header', [f], FRESH_FILES[basename(f, '.test.mjs')], { dataDir, timeout: FRESH_FILE_TIMEOUT_MS }))
    } finally {
      rmSync(dataDir, { recursive: true, force: true })
    }
  }
  return results
}

/**
 * Makes dst a fresh data dir holding only hard links to src's complete
 * base templates (with a template.json) and complete build layers (with a
 * layer.json), which builds only ever read.
 */
function seedFreshDataDir(src, dst) {
  rmSync(dst, { recursive: true, force: true })
  const links = [
    ['base', 'template.json'],
    ['.layers', 'layer.json'],
  ]
  for (const [sub, marker] of links) {
    const from = join(src, 'templates', sub)
    const to = join(dst, 'templates', sub)
    mkdirSync(to, { recursive: true })
    if (!existsSync(from)) continue
    for (const entry of readdirSync(from)) {
      if (existsSync(join(from, entry, marker))) execFileSync('cp', ['-al', join(from, entry), to])
    }
  }
  console.log(`seeded ${dst} with hard links to ${src}'s base template and build layers`)
}

function merge(results) {
  const total = { counts: { passed: 0, failed: 0, skipped: 0 }, failures: [], skips: [], diagnostics: [], setupFailed: false }
  for (const r of results) {
    for (const k of Object.keys(total.counts)) total.counts[k] += r.counts[k]
    total.failures.push(...r.failures)
    total.skips.push(...r.skips)
    total.diagnostics.push(...r.diagnostics)
    total.setupFailed ||= !!r.setupFailed
  }
  return total
}

async function main() {
  const sel = parseArgs(process.argv.slice(2))
  const results = []
  if (sel.envd) results.push(await runEnvdSuite(sel.envd))
  if (sel.server) results.push(...(await runServerSuite(sel.server)))

  const { counts, failures, skips, diagnostics, setupFailed } = merge(results)
  if (sel.server && diagnostics.length) {
    console.log('\nmeasurements:')
    for (const d of diagnostics) console.log(`  - ${d}`)
  }
  if (failures.length) {
    console.log('\nfailed tests:')
    for (const f of failures) console.log(`  - ${f}`)
    console.log('')
  }
  const ci = process.env.CI === 'true'
  if (skips.length) {
    console.log(ci ? '\nskipped tests (under CI=true each counts as a failure):' : '\nskipped tests:')
    for (const s of skips) console.log(`  - ${s}`)
    console.log('')
  }
  let line = `${counts.passed} passed, ${counts.failed} failed`
  if (counts.skipped) line += `, ${counts.skipped} skipped`
  console.log(line)
  if (setupFailed && counts.passed === 0) return 2
  return counts.failed > 0 || (ci && counts.skipped > 0) ? 1 : 0
}

process.exitCode = await main()
