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
// Ports other than envd's need the traffic access token of a sandbox
// created with allowPublicTraffic: false (403 without it), and the ports of
// our own in-sandbox servers (ourPorts: the code interpreter's 49999) the
// envd access token of a secure sandbox (401 as envd answers, except for
// the few routes the official SDK calls without it). envd checks its own
// token. Nothing else reaches a sandbox's ports: the host's firewall drops
// connections from the host to sandbox addresses, so the router is the
// one way in.
//
// The DevTools port (template.DevToolsPort, 9222) is Chromium's: the
// router sends it the loopback Host Chromium insists on and rewrites the
// WebSocket endpoints in its /json listings to the host the client used
// (devtools.go), so CDP clients outside connect through the router.
package router
