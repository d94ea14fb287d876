// Command vminit is the init (PID 1) of the vm backend's guests: the
// initramfs' /init. See package vminit.
package main

import "github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/vminit"

func main() { vminit.Main() }
