//go:build !unix

package qmp

import (
	"errors"
	"os"
)

func unixRights(*os.File) ([]byte, error) {
	return nil, errors.ErrUnsupported
}
