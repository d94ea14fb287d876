//go:build !linux

package gvinit

import (
	"fmt"
	"os"
)

// Main exits: gVisor and its sandboxes' init are Linux's.
func Main() {
	fmt.Fprintln(os.Stderr, ReasonPrefix+"runs only on Linux")
	os.Exit(2)
}
