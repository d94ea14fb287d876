//go:build !linux

package template

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/agent-sandbox/agent-sandbox/internal/template/oci"
)

func preflight(bool) error { return errors.ErrUnsupported }

func (b *Builder) build(ctx context.Context, spec Spec, from *Template, hash, dir, nonce string) (*Template, error) {
	return nil, errors.ErrUnsupported
}

func lockFile(ctx context.Context, path string) (func(), error) { return nil, errors.ErrUnsupported }

func removeTree(dir string) error { return os.RemoveAll(dir) }

func terminalWidth(w io.Writer) (bool, int) { return false, 0 }

func (b *Builder) imageBase(ctx context.Context, ref string, auth *oci.Auth) (*Template, error) {
	return nil, errors.ErrUnsupported
}
