//go:build !unix

package jupyter

import (
	"errors"
	"os/exec"
	"syscall"
)

func setGroup(*exec.Cmd) error { return errors.ErrUnsupported }

func signalGroup(int, syscall.Signal) error { return errors.ErrUnsupported }
