//go:build !linux

package metrics

import (
	"context"
	"errors"
)

// Sample is unsupported off Linux.
func Sample(context.Context) (Snapshot, error) { return Snapshot{}, errors.ErrUnsupported }
