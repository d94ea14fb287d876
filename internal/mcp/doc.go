// Package mcp serves agent-sandbox's tools over the Model Context Protocol,
// so that an agent host (Claude Desktop, an IDE, an agent framework) can
// create sandboxes, run code and commands in them, move files, reach their
// ports, drive a browser sandbox's Chromium and see a desktop's display,
// and kill them, by adding one MCP server entry.
//
// The browser tools (browser.go) are one tool per action of the browser
// action API, so that each schema says what its action takes; the
// screenshots, of a browser's page and of a desktop's display, come back
// as MCP image content.
//
// One set of tools ([NewServer]) backs both transports:
//
//   - stdio, for `agent-sandbox mcp`, which an agent host starts as a child
//     process; the tools reach the server named by the E2B environment
//     variables, as the CLI's other client commands do;
//   - streamable HTTP at /mcp on the server itself ([HTTPHandler]), where
//     the caller's API key (Authorization: Bearer or X-API-Key) is checked
//     by the API before a request gets here.
//
// The tools speak to the server only through the public Go SDK (package
// client), on both transports. Inside the server that client is pointed
// at the server's own listener (loopback) with the caller's key, rather
// than at the sandbox manager directly: the tools then have one code path,
// and every call they make passes through the same authentication, key
// limits, validation, routing and envd access tokens as any SDK's, so
// /mcp can do nothing the caller's key could not do over the REST API.
// Calling the manager directly would need a second implementation of
// every tool (envd's process and file protocols included) and a second
// place to keep those rules.
//
// The protocol layer (JSON-RPC, initialize, tools/list, tools/call, ping,
// the streamable HTTP transport) is the official Go SDK's
// (github.com/modelcontextprotocol/go-sdk). A tool that fails answers a
// tool result with isError set and a message an LLM can act on, not a
// protocol error.
package mcp
