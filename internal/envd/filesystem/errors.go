package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"connectrpc.com/connect"
)

// pathError turns err, met while doing step on path, into a Connect error:
// a missing path is not_found, a refused one permission_denied, anything
// else internal. The message names the step and the path.
func pathError(step, path string, err error) *connect.Error {
	return connect.NewError(errorCode(err), fmt.Errorf("%s '%s': %w", step, path, bareError(path, err)))
}

func errorCode(err error) connect.Code {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		// ENOTDIR: a component of the path is a file, so the path is missing.
		return connect.CodeNotFound
	case errors.Is(err, fs.ErrPermission): // EACCES and EPERM
		return connect.CodePermissionDenied
	default:
		return connect.CodeInternal
	}
}

// bareError drops the *fs.PathError or *os.LinkError wrapper when it
// repeats path, so the message does not name the path twice.
func bareError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == path {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) && le.Old == path {
		return le.Err
	}
	return err
}

// mkdirError turns an error of (*identity.User).MkdirAll into a Connect
// error: a path component that exists but is not a directory makes the
// request invalid; otherwise as pathError.
func mkdirError(step, path string, err error) *connect.Error {
	if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTDIR) {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%s '%s': %w", step, path, err))
	}
	return pathError(step, path, err)
}
