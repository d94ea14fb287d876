// Package codeinterp is the code interpreter server that runs inside a
// sandbox on port 49999 and speaks the HTTP protocol of E2B's
// @e2b/code-interpreter SDK (2.8.0): /health, /execute (a stream of NDJSON
// lines) and /contexts.
//
// A context is one stateful interpreter of one language, a Runtime, made by
// the Factory registered for its language: Python and R are Jupyter kernels
// spoken to over ZeroMQ (KernelRuntime, package jupyter); JavaScript and
// Java are processes running a kernel of ours, node/kernel.js and
// java/Kernel.java (a JShell session), behind one ProcessRuntime; bash is a
// persistent bash process. TypeScript contexts are JavaScript ones: the
// server strips type syntax from every JavaScript cell with esbuild, as the
// official server runs every cell of its JavaScript kernel through Babel's
// TypeScript preset.
//
// Per-run env_vars are set before the code and put back afterwards to what
// the context had (its sandbox-wide value, or none); Java gets them as
// system properties, as on E2B.
//
// Executions on one context run one at a time. A client that disconnects
// interrupts its execution; a runtime that dies mid-execution is reported
// as an UnexpectedEndOfExecution error and replaced by a fresh one, as
// Jupyter restarts a crashed kernel.
package codeinterp
