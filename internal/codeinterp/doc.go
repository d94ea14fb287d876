// Package codeinterp is the code interpreter server that runs inside a
// sandbox on port 49999 and speaks the HTTP protocol of E2B's
// @e2b/code-interpreter SDK (2.8.0): /health, /execute (a stream of NDJSON
// lines) and /contexts.
//
// A context is one stateful interpreter of one language, a Runtime, made by
// the Factory registered for its language. The package brings two runtimes
// of its own: JavaScript (a persistent Node.js process running the embedded
// node/kernel.js; TypeScript runs on it unchanged) and bash (a persistent
// bash process). The Python runtime lives elsewhere and is plugged in
// through Config.Runtimes.
//
// Executions on one context run one at a time. A client that disconnects
// interrupts its execution; a runtime that dies mid-execution is reported
// as an UnexpectedEndOfExecution error and replaced by a fresh one, as
// Jupyter restarts a crashed kernel.
package codeinterp
