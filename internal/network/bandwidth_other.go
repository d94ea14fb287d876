//go:build !linux

package network

import (
	"errors"
	"fmt"
)

// SetBandwidth is not supported on this platform.
func SetBandwidth(hostIf string, bw Bandwidth) error {
	return fmt.Errorf("setting bandwidth of %s: %w", hostIf, errors.ErrUnsupported)
}
