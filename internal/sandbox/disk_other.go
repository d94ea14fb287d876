//go:build !linux

package sandbox

import "errors"

func diskSpace(string) (avail, total uint64, err error) { return 0, 0, errors.ErrUnsupported }

func syncFS(string) error { return errors.ErrUnsupported }

func diskUsage(string) (int64, error) { return 0, errors.ErrUnsupported }
