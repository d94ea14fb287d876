//go:build unix

package jupyter

import (
	"os/exec"
	"syscall"
)

// setGroup makes cmd start in a process group of its own.
func setGroup(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return nil
}

// signalGroup sends sig to the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) error {
	return syscall.Kill(-pid, sig)
}
