//go:build !linux

package cli

import (
	"errors"
	"fmt"
	"io"
)

// terminal is the local terminal; sandbox shell supports Linux only.
type terminal struct{}

func openTerminal(io.Reader) (*terminal, error) {
	return nil, fmt.Errorf("sandbox shell: %w on this platform", errors.ErrUnsupported)
}

func (*terminal) size() (cols, rows int, err error)   { return 0, 0, errors.ErrUnsupported }
func (*terminal) makeRaw() error                      { return errors.ErrUnsupported }
func (*terminal) restore() error                      { return errors.ErrUnsupported }
func (*terminal) notifyResize(chan<- struct{}) func() { return func() {} }
