// The MCP server, driven by the official MCP TypeScript SDK client
// (@modelcontextprotocol/sdk) as an agent host drives it: `agent-sandbox mcp`
// over the stdio transport, started with the environment `serve` prints
// (header routing; under --tls, its CA as SSL_CERT_FILE, which Go reads as
// NODE_EXTRA_CA_CERTS is read by node), and /mcp on the server over the
// streamable HTTP transport with the API key as a bearer token. Through
// each: the tools listed with their schemas, a code-interpreter-v1 sandbox
// created, print(6*7) run, a chart returned as an image, a file written, read back and listed, a
// command run in the foreground and in the background, a port's URL, the
// tool errors, and the kill, after which the E2B SDK finds the sandbox
// gone. Then a browser sandbox, created through the tools too: a form page
// served inside it (FORM, as browser-actions.test.mjs serves it) opened,
// its field found in the accessibility tree and filled by its ref, the
// form submitted with Enter, the page's text read, and a screenshot taken,
// which comes back as image content holding a PNG that decodes.

import { after, describe, test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

import { resolveServerBin } from '../server-process.mjs'
import { apiKey, apiUrl, FORM, mode, RUN_META_KEY, runTag, track, killCreated, waitFor } from './helpers.mjs'
import { lumaVariance } from './png.mjs'

const TOOLS = [
  'create_sandbox', 'run_code', 'run_command', 'read_file', 'write_file', 'list_files', 'get_sandbox_url', 'kill_sandbox',
  'browser_navigate', 'browser_click', 'browser_fill', 'browser_select', 'browser_press', 'browser_scroll', 'browser_wait',
  'browser_extract', 'browser_screenshot', 'desktop_screenshot',
]
const PAGE_PORT = 8000
const PAGE = `http://127.0.0.1:${PAGE_PORT}/form.html`
const printed = JSON.parse(process.env.SDK_TEST_PRINTED_ENV ?? 'null')

after(killCreated)

/** `agent-sandbox mcp` as a host starts it: the printed environment and nothing else. */
function stdioTransport() {
  assert.ok(printed, 'the runner passed no SDK_TEST_PRINTED_ENV')
  const env = { PATH: process.env.PATH, ...printed }
  if (printed.NODE_EXTRA_CA_CERTS) env.SSL_CERT_FILE = printed.NODE_EXTRA_CA_CERTS
  return new StdioClientTransport({ command: resolveServerBin(), args: ['mcp'], env, stderr: 'pipe' })
}

function httpTransport(headers = { Authorization: `Bearer ${apiKey}` }) {
  return new StreamableHTTPClientTransport(new URL(`${apiUrl}/mcp`), { requestInit: { headers } })
}

async function connect(transport) {
  const client = new Client({ name: 'agent-sandbox-sdk-test', version: '1.0.0' })
  await client.connect(transport)
  return client
}

/** callTool that must succeed; returns the result. */
async function call(client, name, args) {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 180_000 })
  assert.ok(!r.isError, `${name} ${JSON.stringify(args)} failed: ${JSON.stringify(r.content)}`)
  return r
}

/** callTool that must answer a tool error; returns its text. */
async function callFails(client, name, args) {
  const r = await client.callTool({ name, arguments: args })
  assert.equal(r.isError, true, `${name} ${JSON.stringify(args)} did not fail: ${JSON.stringify(r)}`)
  return r.content.map((c) => c.text).join('\n')
}

for (const [transportName, transport] of [['stdio', stdioTransport], ['streamable HTTP', httpTransport]]) {
  describe(`MCP over ${transportName} (${mode} mode)`, { timeout: 300_000 }, () => {
    let client
    let id
    let stderr = ''

    after(async () => {
      await client?.close()
    })

    test('connects and lists every tool with a schema an LLM can read', async () => {
      const t = transport()
      t.stderr?.on('data', (d) => (stderr += d))
      client = await connect(t)
      assert.equal(client.getServerVersion()?.name, 'agent-sandbox')
      const { tools } = await client.listTools()
      assert.deepEqual(tools.map((x) => x.name).sort(), [...TOOLS].sort())
      for (const tool of tools) {
        assert.ok(tool.description.length > 20, `${tool.name}: no description`)
        assert.equal(tool.inputSchema.type, 'object', tool.name)
        for (const [prop, schema] of Object.entries(tool.inputSchema.properties ?? {})) {
          assert.ok(schema.description, `${tool.name}.${prop} has no description`)
        }
      }
      const runCode = tools.find((x) => x.name === 'run_code')
      assert.deepEqual(runCode.inputSchema.required.sort(), ['code', 'sandbox_id'])
      assert.ok(runCode.inputSchema.properties.language.enum.includes('python'))
      await client.ping()
    })

    test('create_sandbox makes a code-interpreter-v1 sandbox the SDK sees', async () => {
      const r = await call(client, 'create_sandbox', {
        template: 'code-interpreter-v1',
        timeout_seconds: 240,
        metadata: { [RUN_META_KEY]: runTag, via: 'mcp' },
      })
      id = track(r.structuredContent.sandbox_id)
      assert.match(id, /^[a-z0-9]+$/)
      const info = await Sandbox.getInfo(id)
      assert.equal(info.metadata.via, 'mcp')
    })

    test('run_code: print(6*7) → 42', async () => {
      const r = await call(client, 'run_code', { sandbox_id: id, code: 'print(6*7)' })
      assert.equal(r.structuredContent.stdout.join(''), '42\n')
      assert.match(r.content[0].text, /^stdout:\n42$/)
      const err = await callFails(client, 'run_code', { sandbox_id: id, code: '1/0' })
      assert.match(err, /ZeroDivisionError/)
    })

    test('run_code: a chart comes back as MCP image content', async () => {
      const r = await call(client, 'run_code', { sandbox_id: id, code: 'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()' })
      const images = r.content.filter((c) => c.type === 'image')
      assert.equal(images.length, 1, JSON.stringify(r.content.map((c) => c.type)))
      assert.equal(images[0].mimeType, 'image/png')
      assert.equal(Buffer.from(images[0].data, 'base64').subarray(1, 4).toString(), 'PNG')
    })

    test('write_file, then read_file and list_files', async () => {
      await call(client, 'write_file', { sandbox_id: id, path: 'mcp/hello.txt', content: `hello over ${transportName}\n` })
      const r = await call(client, 'read_file', { sandbox_id: id, path: '/home/user/mcp/hello.txt' })
      assert.equal(r.structuredContent.content, `hello over ${transportName}\n`)
      assert.equal(r.structuredContent.encoding, 'utf-8')
      const bin = Buffer.from([0, 255, 1, 254]).toString('base64')
      await call(client, 'write_file', { sandbox_id: id, path: 'mcp/bin', content: bin, encoding: 'base64' })
      assert.equal((await call(client, 'read_file', { sandbox_id: id, path: 'mcp/bin' })).structuredContent.content, bin)
      const list = await call(client, 'list_files', { sandbox_id: id, path: 'mcp' })
      const entries = list.structuredContent.entries.map((e) => [e.name, e.type, e.size]).sort()
      assert.deepEqual(entries, [['bin', 'file', 4], ['hello.txt', 'file', `hello over ${transportName}\n`.length]])
      assert.match(await callFails(client, 'read_file', { sandbox_id: id, path: '/no/such/file' }), /404|not found|no such/i)
    })

    test('run_command in the foreground, with a timeout, and in the background', async () => {
      const r = await call(client, 'run_command', { sandbox_id: id, command: 'echo $((6*7)); echo err >&2; exit 3' })
      assert.deepEqual(r.structuredContent, { exit_code: 3, stdout: '42\n', stderr: 'err\n' })
      assert.match(await callFails(client, 'run_command', { sandbox_id: id, command: 'sleep 30', timeout_seconds: 1 }), /longer than 1s/)
      const bg = await call(client, 'run_command', { sandbox_id: id, command: 'sleep 60', background: true })
      const pid = bg.structuredContent.pid
      assert.ok(pid > 0, JSON.stringify(bg.structuredContent))
      // The pid is the login shell's until it has read its profile and
      // replaced itself with the command.
      const cmdline = async () => (await call(client, 'run_command', { sandbox_id: id, command: `kill -0 ${pid} && tr '\\0' ' ' </proc/${pid}/cmdline` })).structuredContent
      let alive
      await waitFor(async () => (alive = await cmdline()).stdout !== `/bin/bash -l -c sleep 60 `, { timeoutMs: 10_000, what: `process ${pid} to exec sleep` })
      assert.deepEqual(alive, { exit_code: 0, stdout: 'sleep 60 ' })
    })

    test('get_sandbox_url names the port of the sandbox', async () => {
      const r = await call(client, 'get_sandbox_url', { sandbox_id: id, port: 8080 })
      assert.equal(r.structuredContent.host, `8080-${id}.${printed.E2B_DOMAIN}`)
      assert.equal(r.structuredContent.url, `${mode === 'tls' ? 'https' : 'http'}://8080-${id}.${printed.E2B_DOMAIN}`)
      assert.deepEqual(r.structuredContent.headers, { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '8080' })
      assert.match(await callFails(client, 'get_sandbox_url', { sandbox_id: id, port: 70000 }), /65535/)
    })

    test('bad input is a tool error that names the field', async () => {
      assert.match(await callFails(client, 'run_command', { sandbox_id: id, command: 'true', bogus: 1 }), /bogus/)
      assert.match(await callFails(client, 'write_file', { sandbox_id: id, path: 'x', content: 'x', encoding: 'rot13' }), /encoding/)
      assert.match(await callFails(client, 'run_code', { sandbox_id: 'nosuchsandbox', code: '1' }), /nosuchsandbox does not exist/)
    })

    test('kill_sandbox: the SDK then finds the sandbox gone', async () => {
      assert.deepEqual((await call(client, 'kill_sandbox', { sandbox_id: id })).structuredContent, { killed: id })
      await assert.rejects(Sandbox.getInfo(id), (err) => /not found/i.test(err.message))
      assert.match(await callFails(client, 'kill_sandbox', { sandbox_id: id }), /does not exist/)
    })

    test('browser tools: a page served in a browser sandbox filled by ref, read, and a screenshot as a PNG', async () => {
      const r = await call(client, 'create_sandbox', { template: 'browser', timeout_seconds: 240, metadata: { [RUN_META_KEY]: runTag } })
      const bid = track(r.structuredContent.sandbox_id)
      await call(client, 'write_file', { sandbox_id: bid, path: 'site/form.html', content: FORM })
      await call(client, 'run_command', {
        sandbox_id: bid,
        command: `python3 -m http.server ${PAGE_PORT} --bind 127.0.0.1 --directory /home/user/site`,
        background: true,
      })
      const up = await call(client, 'run_command', {
        sandbox_id: bid,
        command: `for i in $(seq 100); do curl -sf -o /dev/null ${PAGE} && exit 0; sleep 0.1; done; exit 1`,
      })
      assert.equal(up.structuredContent.exit_code, 0, 'the page server in the sandbox did not answer')

      const nav = await call(client, 'browser_navigate', { sandbox_id: bid, url: PAGE })
      assert.equal(nav.structuredContent.url, PAGE)

      const tree = await call(client, 'browser_extract', { sandbox_id: bid, format: 'accessibility' })
      const field = tree.content[0].text.match(/- textbox.*\[ref=(e\d+)\]/)
      assert.ok(field, tree.content[0].text)
      const word = `mcp${transportName.length}x${Date.now() % 10_000}`
      await call(client, 'browser_fill', { sandbox_id: bid, ref: field[1], value: word })
      await call(client, 'browser_press', { sandbox_id: bid, key: 'Enter' })
      await call(client, 'browser_wait', { sandbox_id: bid, for: 'networkIdle', timeout_seconds: 10 })
      const text = await call(client, 'browser_extract', { sandbox_id: bid, selector: '#result' })
      assert.equal(text.content[0].text, `hello ${word} in red`)
      assert.equal(text.structuredContent.text, `hello ${word} in red`)

      const shot = await call(client, 'browser_screenshot', { sandbox_id: bid })
      assert.deepEqual(shot.content.map((c) => [c.type, c.mimeType]), [['image', 'image/png']])
      const { width, height, variance } = lumaVariance(Buffer.from(shot.content[0].data, 'base64'))
      assert.ok(width > 100 && height > 100, `a ${width}x${height} screenshot`)
      assert.ok(variance > 0, 'the screenshot is blank')

      assert.match(await callFails(client, 'browser_click', { sandbox_id: bid, selector: 'a', ref: field[1] }), /selector/)
      assert.match(await callFails(client, 'browser_click', { sandbox_id: bid, selector: '#nowhere' }), /nowhere/)
      assert.match(await callFails(client, 'browser_navigate', { sandbox_id: bid, url: 'file:///etc/passwd' }), /url/)
      assert.deepEqual((await call(client, 'kill_sandbox', { sandbox_id: bid })).structuredContent, { killed: bid })
      assert.equal(stderr, '', 'agent-sandbox mcp wrote to stderr')
    })
  })
}

// Over one transport only: the tool is the same on both, and a desktop sandbox is heavy.
describe(`MCP desktop_screenshot over streamable HTTP (${mode} mode)`, { timeout: 240_000 }, () => {
  let client
  after(async () => {
    await client?.close()
  })

  test('a desktop sandbox whose display runs: the screenshot is a PNG of the size asked for', async () => {
    client = await connect(httpTransport())
    const r = await call(client, 'create_sandbox', { template: 'desktop', timeout_seconds: 180, metadata: { [RUN_META_KEY]: runTag } })
    const did = track(r.structuredContent.sandbox_id)
    assert.match(await callFails(client, 'desktop_screenshot', { sandbox_id: did }), /no display/)
    await call(client, 'run_command', { sandbox_id: did, command: 'Xvfb :0 -screen 0 1024x768x24 -nolisten tcp', background: true })
    const up = await call(client, 'run_command', {
      sandbox_id: did,
      command: 'for i in $(seq 100); do xdpyinfo -display :0 >/dev/null 2>&1 && exit 0; sleep 0.1; done; exit 1',
    })
    assert.equal(up.structuredContent.exit_code, 0, 'Xvfb did not come up')
    const shot = await call(client, 'desktop_screenshot', { sandbox_id: did, width: 800, height: 600 })
    assert.deepEqual(shot.content.map((c) => [c.type, c.mimeType]), [['image', 'image/png']])
    const { width, height } = lumaVariance(Buffer.from(shot.content[0].data, 'base64'))
    assert.deepEqual([width, height], [800, 600])
    await call(client, 'kill_sandbox', { sandbox_id: did })
  })
})

describe(`/mcp refuses callers without a valid key (${mode} mode)`, () => {
  const initialize = {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
  }
  const post = (headers, body = initialize) =>
    fetch(`${apiUrl}/mcp`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', ...headers },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    })

  test('no key, a wrong bearer token or a wrong X-API-Key: 401', async () => {
    for (const headers of [{}, { Authorization: 'Bearer e2b_wrong' }, { 'X-API-Key': 'e2b_wrong' }]) {
      const res = await post(headers)
      assert.equal(res.status, 401, JSON.stringify(headers))
    }
    await assert.rejects(connect(httpTransport({ Authorization: 'Bearer e2b_wrong' })), /401|nauthorized/)
  })

  test('X-API-Key is taken too, and an unknown method is JSON-RPC -32601', async () => {
    const res = await post({ 'X-API-Key': apiKey })
    assert.equal(res.status, 200)
    assert.match(res.headers.get('content-type'), /application\/json/)
    const init = await res.json()
    assert.equal(init.result.serverInfo.name, 'agent-sandbox')
    const unknown = await (await post({ 'X-API-Key': apiKey }, { jsonrpc: '2.0', id: 2, method: 'no/such' })).json()
    assert.equal(unknown.error.code, -32601)
  })
})
