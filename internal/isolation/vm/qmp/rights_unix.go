//go:build unix

package qmp

import (
	"os"
	"syscall"
)

// unixRights is the control message that passes f's descriptor.
func unixRights(f *os.File) ([]byte, error) {
	return syscall.UnixRights(int(f.Fd())), nil
}
