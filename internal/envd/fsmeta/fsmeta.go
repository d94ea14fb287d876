// Package fsmeta stores the user metadata of files (E2B "file metadata") as
// extended attributes named user.e2b.<key>.
package fsmeta

import (
	"errors"
	"fmt"
	"strings"
)

// Prefix is the xattr namespace metadata keys live under.
const Prefix = "user.e2b."

// Limits from the wire contract: a key of at most 246 bytes (255, the xattr
// name limit, minus the prefix) and 4096 bytes of keys and values in total.
const (
	MaxKeyLen   = 255 - len(Prefix)
	MaxTotalLen = 4096
)

// ErrInvalid is returned (wrapped) for metadata that breaks the limits.
var ErrInvalid = errors.New("invalid metadata")

// Validate checks md against the wire contract's limits: printable ASCII
// keys and values, bounded sizes.
func Validate(md map[string]string) error {
	total := 0
	for k, v := range md {
		if k == "" {
			return fmt.Errorf("%w: empty key", ErrInvalid)
		}
		if len(k) > MaxKeyLen {
			return fmt.Errorf("%w: key %q is longer than %d bytes", ErrInvalid, k, MaxKeyLen)
		}
		if !printable(k) || !printable(v) {
			return fmt.Errorf("%w: key %q: keys and values must be printable ASCII", ErrInvalid, k)
		}
		total += len(k) + len(v)
	}
	if total > MaxTotalLen {
		return fmt.Errorf("%w: %d bytes in total, more than %d", ErrInvalid, total, MaxTotalLen)
	}
	return nil
}

func printable(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e }) < 0
}
