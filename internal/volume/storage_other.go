//go:build !linux

package volume

import (
	"context"
	"errors"
)

// ImageStorage keeps volumes in ext4 images; it needs Linux.
type ImageStorage struct {
	Dir      string
	MountDir string
}

var _ Storage = (*ImageStorage)(nil)

// Create implements Storage.
func (s *ImageStorage) Create(context.Context, string, int64) error { return errors.ErrUnsupported }

// Path implements Storage.
func (s *ImageStorage) Path(context.Context, string) (string, error) {
	return "", errors.ErrUnsupported
}

// Remove implements Storage.
func (s *ImageStorage) Remove(context.Context, string) error { return errors.ErrUnsupported }

// List implements Storage.
func (s *ImageStorage) List(context.Context) ([]string, error) { return nil, errors.ErrUnsupported }

var _ Attacher = (*ImageStorage)(nil)

// Attach implements Attacher.
func (s *ImageStorage) Attach(context.Context, string, string) (string, error) {
	return "", errors.ErrUnsupported
}

// Detach implements Attacher.
func (s *ImageStorage) Detach(context.Context, string, string) error { return errors.ErrUnsupported }

// Attached implements Attacher.
func (s *ImageStorage) Attached(context.Context) (map[string]string, error) {
	return nil, errors.ErrUnsupported
}

// RemoveOrphans implements orphanRemover.
func (s *ImageStorage) RemoveOrphans(context.Context) error { return errors.ErrUnsupported }
