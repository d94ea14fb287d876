//go:build !linux

package vminit

import (
	"fmt"
	"os"
)

// Main exits: the guest's init is Linux's.
func Main() {
	fmt.Fprintln(os.Stderr, "vminit: the guest's init runs only on Linux")
	os.Exit(2)
}
