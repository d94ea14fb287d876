//go:build !linux

package bench

import (
	"context"
	"errors"
	"runtime"
)

// baselines needs Linux namespaces.
func baselines(context.Context, *Options) ([]*Figure, error) {
	return nil, errors.ErrUnsupported
}

func memAvailable() (int64, error) { return 0, errors.ErrUnsupported }

func hostInfo() Host { return Host{Cores: runtime.NumCPU()} }
