// Package api is the control-plane REST API of the E2B wire protocol
// (spec §2): creating, listing, inspecting, extending, pausing and killing
// sandboxes, and their metrics — and our own routes beside it, such as the
// computer-use executors and display recordings of docs/BROWSER.md, which
// act in a sandbox through [Sandboxes].Exec, and the browser action API,
// which drives a browser sandbox's Chromium through [browser.Sessions].
//
// It is a thin translation layer. Requests are decoded and defaulted here
// (v1 and v2 create and connect differ only in defaults), the work is done by
// a [Sandboxes] implementation (the sandbox manager in production, a fake in
// tests), and errors are turned into the E2B error body
// {"code": <status>, "message": "..."} — for every non-2xx answer, including
// unknown routes, because the SDKs branch on the JSON code field.
//
// Every route except GET /health and the dashboard's needs an API key in the
// X-API-Key header, checked with [Keys]. CORS is permissive so the SDKs work
// in a browser. The web dashboard (dashboard.go, its pages and scripts
// embedded from dashboard/) signs in with an API key kept in a session
// cookie, which its own routes under /dashboard/api take instead of the
// header; there every write from another origin is refused.
package api
