//go:build !linux

package codeinterp

import (
	"os"
	"os/exec"
	"syscall"
)

// prepareCmd has nothing to set up off Linux.
func prepareCmd(*exec.Cmd) {}

// killGroup kills pid only: process groups are Linux-only here.
func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

func signalPID(pid int, sig syscall.Signal) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Signal(sig)
	}
}

// foregroundDescendants needs /proc; off Linux a bash cell that does not
// stop is handled by killing the shell.
func foregroundDescendants(int) []int { return nil }
