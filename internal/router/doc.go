// Package router carries sandbox traffic: it decides from the Host header
// (<port>-<sandboxID>.<domain>) or from the E2b-Sandbox-Id and
// E2b-Sandbox-Port headers which port of which sandbox a request is for
// (spec §1.5), and reverse-proxies it there over a connection opened by a
// [Dialer] — never through DNS or the host network.
//
// The proxy speaks HTTP/1.1 to the sandbox, flushes every write at once (so
// Connect streams and NDJSON arrive chunk by chunk), passes WebSocket
// upgrades through, and aborts the client's response when the sandbox side
// dies mid-response so the client sees a reset, not a clean end.
//
// Failures have E2B's JSON bodies: 502 for a sandbox that is unknown,
// killed or paused, or whose port is closed; 404 for envd's internal routes;
// 400 for malformed routing headers or hosts.
//
// Traffic access tokens (allowPublicTraffic: false) are not enforced yet;
// [Router.authorize] is where they will be checked.
package router
