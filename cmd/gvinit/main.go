// Command gvinit is the gvisor backend's helper: the init (PID 1) of its
// sandboxes, their launcher on the host, and its platform probe. See
// package gvinit.
package main

import "github.com/agent-sandbox/agent-sandbox/internal/isolation/gvisor/gvinit"

func main() { gvinit.Main() }
