//go:build !linux

package guest

import (
	"errors"
	"os"
)

// Confine fails: the confinement is Linux's.
func Confine(bool) error { return errors.ErrUnsupported }

// KeptCapsMask is zero: capabilities are Linux's.
func KeptCapsMask() uint64 { return 0 }

// KeptCapNames is empty: capabilities are Linux's.
func KeptCapNames() []string { return nil }

// Start fails: sandboxes need Linux.
func (e Envd) Start(stdin, output *os.File) (int, error) { return 0, errors.ErrUnsupported }

// Exec fails: sandboxes need Linux.
func (e Envd) Exec() error { return errors.ErrUnsupported }
