// The official @e2b/code-interpreter SDK (2.8.0) with the languages beyond
// Python: Java (a JShell session), TypeScript, ESM imports and top-level
// await in JavaScript, and per-run env vars that apply to one run and are
// then put back, in every language. The expectations are those of the
// official SDK's own tests (js/tests/env_vars/*, cwd.test.ts,
// languages/js.test.ts) against E2B's server.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

import { HOME, RUN_META_KEY, killCreated, mode, runTag, track } from './helpers.mjs'

const TEMPLATE = 'code-interpreter-v1'

after(killCreated)

/** How each language shows the env var NAME (or that it is unset) in a run's output. */
const READ_ENV = {
  python: { code: (n) => `import os; str(os.getenv("${n}"))`, value: (ex) => ex.text, unset: 'None' },
  js: { code: (n) => `String(process.env.${n})`, value: (ex) => ex.text, unset: 'undefined' },
  ts: { code: (n) => `String(process.env.${n} as string | undefined)`, value: (ex) => ex.text, unset: 'undefined' },
  bash: { code: (n) => `echo "\${${n}-unset}"`, value: (ex) => ex.logs.stdout.join('').trim(), unset: 'unset' },
  r: { code: (n) => `Sys.getenv("${n}", unset = "unset")`, value: (ex) => ex.results[0]?.text.trim(), unset: '[1] "unset"', quote: (v) => `[1] "${v}"` },
  // E2B's server gives Java its env vars as system properties.
  java: { code: (n) => `System.getProperty("${n}", "unset")`, value: (ex) => ex.results[0]?.text.trim(), unset: 'unset' },
}

describe(`code interpreter languages (${mode} mode)`, { timeout: 600_000 }, () => {
  let sbx
  before(async () => {
    sbx = await Sandbox.create(TEMPLATE, { envs: { TEST_ENV_VAR: 'supertest' }, metadata: { [RUN_META_KEY]: runTag } })
    track(sbx.sandboxId)
  })

  test('Java: state across cells, stdout, and the value of the last expression as the result', async () => {
    const decl = await sbx.runCode('int x = 40;\nString greet(String who) { return "hi " + who; }', { language: 'java' })
    assert.equal(decl.error, undefined, JSON.stringify(decl.error))
    assert.deepEqual(decl.results, [])
    const ex = await sbx.runCode('System.out.println(greet("there"));\nx + 2', { language: 'java' })
    assert.equal(ex.error, undefined, JSON.stringify(ex.error))
    assert.deepEqual(ex.logs.stdout, ['hi there\n'])
    assert.equal(ex.results.length, 1)
    assert.equal(ex.results[0].isMainResult, true)
    assert.equal(ex.text, '42')
    assert.equal(ex.executionCount, decl.executionCount + 1)
    // A string result is the string itself, as IJava shows it.
    assert.equal((await sbx.runCode('greet("you")', { language: 'java' })).text, 'hi you')
  })

  test('Java: an exception is an EvalException with its message, and the state is kept', async () => {
    const ex = await sbx.runCode('int zero = 0;\n10 / zero', { language: 'java' })
    assert.equal(ex.error?.name, 'EvalException', JSON.stringify(ex.error))
    assert.equal(ex.error.value, '/ by zero')
    assert.match(ex.error.traceback, /java\.lang\.ArithmeticException: \/ by zero/)
    const bad = await sbx.runCode('undefinedVar + 1', { language: 'java' })
    assert.equal(bad.error?.name, 'CompilationException', JSON.stringify(bad.error))
    // As IJava's: no message, the diagnostics in the traceback.
    assert.equal(bad.error.value, '')
    assert.match(bad.error.traceback, /cannot find symbol/)
    assert.equal((await sbx.runCode('zero + 1', { language: 'java' })).text, '1')
  })

  test('Java: user.dir is the context cwd', async () => {
    const ex = await sbx.runCode('System.getProperty("user.dir")', { language: 'java' })
    assert.equal(ex.results[0]?.text.trim(), HOME, JSON.stringify(ex))
    const ctx = await sbx.createCodeContext({ language: 'java', cwd: '/tmp' })
    assert.equal(ctx.language, 'java')
    const inCtx = await sbx.runCode('System.getProperty("user.dir") + " " + new java.io.File("f").getAbsolutePath()', { context: ctx })
    assert.equal(inCtx.text, '/tmp /tmp/f')
  })

  test('TypeScript: types are stripped, process.cwd() is the cwd, and ts has a context of its own', async () => {
    const sub = await sbx.runCode('function subtract(x: number, y: number): number {\n  return x - y;\n}\n\nsubtract(1, 2)\n', { language: 'ts' })
    assert.equal(sub.error, undefined, JSON.stringify(sub.error))
    assert.equal(sub.results[0]?.text, '-1')
    const msg = await sbx.runCode("const message: string = 'Hello from TypeScript'\nconsole.log(message)", { language: 'ts' })
    assert.deepEqual(msg.logs.stdout, ['Hello from TypeScript\n'])
    assert.equal((await sbx.runCode('process.cwd()', { language: 'ts' })).text, HOME)
    assert.equal((await sbx.runCode('message.length', { language: 'typescript' })).text, '21')
    // As on E2B, ts and js default contexts are two kernels.
    assert.equal((await sbx.runCode('typeof message', { language: 'js' })).text, 'undefined')
    const ctx = await sbx.createCodeContext({ language: 'ts' })
    assert.equal(ctx.language, 'typescript')
  })

  test('JavaScript: ESM imports and top-level await', async () => {
    await sbx.files.write('/tmp/esm.txt', 'read through an import')
    const imp = await sbx.runCode("import { readFileSync } from 'fs'\nconsole.log(readFileSync('/tmp/esm.txt', 'utf8'))", { language: 'js' })
    assert.equal(imp.error, undefined, JSON.stringify(imp.error))
    assert.deepEqual(imp.logs.stdout, ['read through an import\n'])
    // The imported binding lives on in later cells.
    assert.equal((await sbx.runCode('typeof readFileSync', { language: 'js' })).text, 'function')
    const main = await sbx.runCode("\n    async function main() {\n        return 'Hello, World!'\n    }\n\n    await main()\n    ", { language: 'js' })
    assert.equal(main.results[0]?.text, 'Hello, World!')
    const dyn = await sbx.runCode("const { join } = await import('path')\njoin('a', 'b')", { language: 'js' })
    assert.equal(dyn.text, 'a/b')
  })

  // E2B's env_vars tests for each language: the sandbox-wide value, a
  // per-run variable gone after its run, and a per-run overwrite of the
  // sandbox-wide one that goes back to it.
  for (const [language, read] of Object.entries(READ_ENV)) {
    test(`${language} env vars: sandbox-wide, per run, and an overwrite restored afterwards`, async () => {
      const show = read.quote ?? ((v) => v)
      const seen = async (name, envs) => read.value(await sbx.runCode(read.code(name), { language, envs }))
      assert.equal(await seen('TEST_ENV_VAR'), show('supertest'), 'sandbox-wide')
      assert.equal(await seen('PER_RUN', { PER_RUN: 'once' }), show('once'), 'per run')
      assert.equal(await seen('PER_RUN'), read.unset, 'after the run')
      assert.equal(await seen('TEST_ENV_VAR', { TEST_ENV_VAR: 'overwrite' }), show('overwrite'), 'overwrite')
      assert.equal(await seen('TEST_ENV_VAR'), show('supertest'), 'sandbox value back')
    })
  }
})
