//go:build !linux

package process

import (
	"errors"
	"os"
	"os/exec"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
)

// Processes are only supported on Linux, where envd runs; these stubs keep
// `go build ./...` working elsewhere.

func setProcAttrs(*exec.Cmd, *identity.User, bool) error { return errors.ErrUnsupported }

func openPTY(uint32, uint32) (*os.File, *os.File, error) { return nil, nil, errors.ErrUnsupported }

func resizePTY(*os.File, uint32, uint32) error { return errors.ErrUnsupported }

func waitExit(int) error { return errors.ErrUnsupported }

func signalGroup(int, syscall.Signal) error { return errors.ErrUnsupported }
