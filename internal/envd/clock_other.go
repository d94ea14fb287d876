//go:build !linux

package envd

import (
	"errors"
	"time"
)

func setClock(time.Time) error { return errors.ErrUnsupported }
