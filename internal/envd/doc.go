// Package envd is the guest agent that runs inside every sandbox and speaks
// E2B's envd protocol on port 49983: the process and filesystem Connect
// services (subpackages process and filesystem), file transfer over
// /files (files), and the plain endpoints /health, /init, /envs and /metrics.
//
// What the control plane configures through /init lives in package state and
// is read by every service. envd is built static (CGO_ENABLED=0) and keeps a
// short dependency list because it is copied into every sandbox.
package envd
