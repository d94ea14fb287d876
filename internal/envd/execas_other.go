//go:build !linux

package envd

import "errors"

func execAs([]string) error { return errors.ErrUnsupported }
