// Egress through the official SDK. No test here sends a packet off this
// machine: every request is to a name or address the policy denies, which
// the host's DNS filter and egress proxy refuse without asking anyone else.
// The allowed paths are covered by test/egress, against a test internet.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError, Sandbox } from 'e2b'

import { apiFetch, createSandbox, killCreated, mode } from './helpers.mjs'

// run returns { exitCode, stdout, stderr } whether or not the command failed.
async function run(sbx, cmd) {
  try {
    return await sbx.commands.run(cmd, { timeoutMs: 30_000 })
  } catch (e) {
    if (e instanceof CommandExitError) return e
    throw e
  }
}

async function audit(sbx) {
  const res = await apiFetch(`/sandboxes/${sbx.sandboxId}/network/audit`)
  assert.equal(res.status, 200)
  return (await res.json()).events
}

after(killCreated)

describe(`egress (${mode} mode)`, { timeout: 180_000 }, () => {
  let sbx
  before(async () => {
    sbx = (await createSandbox()).sbx
  })

  test('resolv.conf points at the gateway', async () => {
    const r = await run(sbx, 'cat /etc/resolv.conf; ip route show default')
    const ns = r.stdout.match(/nameserver (\S+)/)?.[1]
    assert.ok(ns, r.stdout)
    assert.match(r.stdout, new RegExp(`default via ${ns.replaceAll('.', '\\.')} dev eth0`))
  })

  test('a name off the allowlist does not resolve', async () => {
    const r = await run(sbx, 'curl -sS -m 10 http://example.com/')
    assert.equal(r.exitCode, 6, r.stderr) // curl: could not resolve host
  })

  test('a direct IP over HTTP gets 403 from the egress proxy', async () => {
    const r = await run(sbx, 'curl -sS -m 10 -w "\\n%{http_code}" http://1.1.1.1/')
    assert.match(r.stdout, /egress to 1\.1\.1\.1 denied \(rule ceiling:allowlist\)\n\n403$/, JSON.stringify(r))
  })

  test('the metadata address is refused', async () => {
    const r = await run(sbx, 'curl -sS -m 10 -w "\\n%{http_code}" http://169.254.169.254/latest/meta-data/')
    assert.match(r.stdout, /denied \(rule private:link-local 169\.254\.0\.0\/16\)\n\n403$/)
  })

  test('the audit trail records those decisions', async () => {
    const events = await audit(sbx)
    assert.ok(events.some((e) => e.kind === 'dns' && e.name === 'example.com' && !e.allowed && e.rule === 'ceiling:allowlist'), JSON.stringify(events))
    assert.ok(events.some((e) => e.kind === 'proxy' && e.addrs?.includes('1.1.1.1') && e.port === 80 && !e.allowed))
    assert.ok(events.some((e) => e.kind === 'proxy' && e.addrs?.includes('169.254.169.254') && !e.allowed))
  })

  test('updateNetwork replaces the rules live', async () => {
    await sbx.updateNetwork({ allowInternetAccess: false })
    const r = await run(sbx, 'curl -sS -m 10 http://pypi.org/') // allowlisted, but internet is off
    assert.equal(r.exitCode, 6, r.stderr)
    const events = await audit(sbx)
    assert.ok(events.some((e) => e.kind === 'dns' && e.name === 'pypi.org' && e.rule === 'allow_internet_access:false'), JSON.stringify(events))
    const info = await sbx.getInfo()
    assert.equal(info.allowInternetAccess, false)
    await sbx.updateNetwork({ denyOut: ['*.example.org'] })
    assert.equal((await sbx.getInfo()).allowInternetAccess, undefined)
  })

  test('unsupported and malformed rules are refused with 400', async () => {
    await assert.rejects(sbx.updateNetwork({ allowOut: ['not a rule!'] }), /not a rule!/)
    await assert.rejects(
      Sandbox.create({ network: { rules: { 'example.com': [{ transform: { headers: { 'X-A': 'b' } } }] } } }),
      /not supported by this server/,
    )
  })

  test('allow_internet_access: false at create', async () => {
    const { sbx: off } = await createSandbox({ allowInternetAccess: false })
    const r = await run(off, 'curl -sS -m 10 -w "\\n%{http_code}" --resolve pypi.org:80:1.1.1.1 http://pypi.org/')
    assert.match(r.stdout, /denied \(rule allow_internet_access:false\)\n\n403$/)
  })

  test('updateNetwork on a killed sandbox → SandboxNotFoundError', async () => {
    const { sbx: gone } = await createSandbox()
    await gone.kill()
    await assert.rejects(gone.updateNetwork({}), (e) => e.name === 'SandboxNotFoundError')
  })
})
