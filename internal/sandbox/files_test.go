package sandbox

import (
	"errors"
	"testing"

	"connectrpc.com/connect"
)

// An envd filesystem error is told apart: a missing path is ErrNoFile
// (404), a bad one ErrInvalid (400) with envd's message, others name the
// step.
func TestFileError(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		is   error
		msg  string
	}{
		{"missing", connect.NewError(connect.CodeNotFound, errors.New("path not found")), ErrNoFile, "no such file or directory: /nope"},
		{"bad", connect.NewError(connect.CodeInvalidArgument, errors.New("path is not a directory")), ErrInvalid, "invalid request: listing /nope: path is not a directory"},
		{"other", connect.NewError(connect.CodeUnavailable, errors.New("envd is down")), nil, "listing /nope: unavailable: envd is down"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := fileError("listing", "/nope", c.err)
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("%v is not %v", err, c.is)
			}
			if err.Error() != c.msg {
				t.Errorf("message %q, want %q", err, c.msg)
			}
		})
	}
}
