//go:build !linux

package fsmeta

import "errors"

// Read is unsupported off Linux.
func Read(string) (map[string]string, error) { return nil, errors.ErrUnsupported }

// Replace is unsupported off Linux, except clearing metadata, which there is
// none of.
func Replace(_ string, md map[string]string) error {
	if len(md) == 0 {
		return nil
	}
	return errors.ErrUnsupported
}
