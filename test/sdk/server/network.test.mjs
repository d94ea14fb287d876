// Egress through the official SDK. No test here sends a packet off this
// machine: every request is to a name or address the policy denies, which
// the host's DNS filter and egress proxy refuse without asking anyone else.
// The allowed paths, and header rules at work, are covered by test/egress,
// against a test internet.

import { after, before, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { ALL_TRAFFIC, CommandExitError, Sandbox } from 'e2b'

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

  test('malformed rules are refused with 400', async () => {
    await assert.rejects(sbx.updateNetwork({ allowOut: ['not a rule!'] }), /not a rule!/)
    await assert.rejects(sbx.updateNetwork({ egressProxy: { address: 'proxy.test:1080' } }), /not supported by this server/)
  })

  // network.rules on the wire (E2B: spec/openapi.yml SandboxNetworkRule,
  // infra's sandbox create handler for the limits and their messages). The
  // headers reaching a server, and not the sandbox, are test/egress's: they
  // need a server to reach.
  test('rules: create sends them, getInfo returns them with the domains in lower case', async () => {
    const key = 'k-' + randomBytes(12).toString('hex')
    const { sbx: ruled } = await createSandbox({
      network: {
        allowOut: ({ rules }) => [...rules.keys()],
        denyOut: ({ allTraffic }) => [allTraffic],
        rules: {
          'API.example.com': [{ transform: { headers: { 'X-Api-Key': key } } }],
          '*.example.org': [{ transform: () => ({ headers: { Authorization: 'Bearer from-a-callback' } }) }],
          'none.example.net': [{ transform: null }],
        },
      },
    })
    const info = await ruled.getInfo()
    assert.deepEqual(info.network.allowOut, ['API.example.com', '*.example.org', 'none.example.net'])
    assert.deepEqual(info.network.denyOut, [ALL_TRAFFIC])
    assert.deepEqual(info.network.rules, {
      'api.example.com': [{ transform: { headers: { 'X-Api-Key': key } } }],
      '*.example.org': [{ transform: { headers: { Authorization: 'Bearer from-a-callback' } } }],
      'none.example.net': [{}],
    })
    // The sandbox trusts its egress proxy's CA (for HTTPS to those names);
    // the header's value is nowhere in it.
    const ca = await run(ruled, 'head -1 /usr/local/share/ca-certificates/agent-sandbox-egress.crt; grep -c "agent-sandbox egress CA" /etc/ssl/certs/ca-certificates.crt; echo "$NODE_EXTRA_CA_CERTS $REQUESTS_CA_BUNDLE"')
    assert.equal(ca.stdout, '-----BEGIN CERTIFICATE-----\n1\n/usr/local/share/ca-certificates/agent-sandbox-egress.crt /etc/ssl/certs/ca-certificates.crt\n', JSON.stringify(ca))
    // The scan reads its pattern from stdin, so that no command line holds
    // it; the control, set in this command's env, shows that it finds what
    // is there.
    const b64 = (v) => Buffer.from(v).toString('base64')
    const control = 'c-' + randomBytes(12).toString('hex')
    const scan = 'scan() { base64 -d | grep -rlsF -f - /etc /home /root /tmp /usr/local /proc/[0-9]*/environ /proc/[0-9]*/cmdline; }'
    const leak = await ruled.commands.run(`${scan}; echo ${b64(control)} | scan | grep -c environ; echo ${b64(key)} | scan | wc -l`, {
      envs: { ASB_CONTROL: control },
      timeoutMs: 30_000,
    })
    const [controlHits, keyHits] = leak.stdout.trim().split('\n').map(Number)
    assert.ok(controlHits >= 1, `the scan does not find the control: ${JSON.stringify(leak)}`)
    assert.equal(keyHits, 0, JSON.stringify(leak))
  })

  test('rules: updateNetwork replaces and clears them', async () => {
    await sbx.updateNetwork({ rules: { 'Api.Example.com': [{ transform: { headers: { 'X-Api-Key': 'second' } } }] } })
    assert.deepEqual((await sbx.getInfo()).network.rules, { 'api.example.com': [{ transform: { headers: { 'X-Api-Key': 'second' } } }] })
    await sbx.updateNetwork({})
    assert.equal((await sbx.getInfo()).network?.rules, undefined)
  })

  test('rules: E2B limits and what this server cannot obey are refused with 400', async () => {
    const rule = (headers) => [{ transform: { headers } }]
    const tooMany = Object.fromEntries([...Array(11).keys()].map((i) => [`h${i}.example.com`, rule({ 'X-A': 'b' })]))
    const cases = [
      [tooMany, /Network rules can have at most 10 domains\./],
      [{ '1.2.3.4': rule({ 'X-A': 'b' }) }, /Rule domain "1\.2\.3\.4" is not a valid domain name\./],
      [{ 'a.example.com': [{}, {}] }, /Domain "a\.example\.com" can have at most 1 transform rule\./],
      [{ 'a.example.com': [{ transform: { body: 'x' } }] }, /network\.rules\["a\.example\.com"\]: json: unknown field "body"/],
      [{ 'a.example.com': rule({ 'X A': 'b' }) }, /Header name "X A" in rule for domain "a\.example\.com" must contain only valid HTTP token characters\./],
      [{ 'a.example.com': rule({ 'X-A': 'v'.repeat(2049) }) }, /exceeds maximum length of 2048 characters\./],
      [{ 'a.example.com': rule({ Host: 'other.example.com' }) }, /cannot be set by a rule/],
      [{ 'a.example.com': rule({ Authorization: 'Bearer ${e2b.secrets.openai}' }) }, /names an E2B secret or identity token/],
    ]
    for (const [rules, message] of cases) {
      await assert.rejects(sbx.updateNetwork({ rules }), message)
      await assert.rejects(createSandbox({ network: { rules } }), message)
    }
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
