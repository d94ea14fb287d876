//go:build !linux

package vm

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
)

// Backend is the vm isolation backend; it needs Linux.
type Backend struct{}

var _ isolation.Backend = (*Backend)(nil)

// New fails after validating cfg: the vm backend needs Linux.
func New(cfg Config) (*Backend, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, errors.ErrUnsupported
}

// Name implements isolation.Backend.
func (b *Backend) Name() string { return "vm" }

// Capabilities implements isolation.Backend.
func (b *Backend) Capabilities() isolation.Capabilities { return isolation.Capabilities{} }

// Start implements isolation.Backend.
func (b *Backend) Start(context.Context, isolation.Spec) (isolation.Instance, error) {
	return nil, errors.ErrUnsupported
}

// Adopt implements isolation.Backend.
func (b *Backend) Adopt(context.Context, string, json.RawMessage) (isolation.Instance, error) {
	return nil, errors.ErrUnsupported
}

// Cleanup implements isolation.Backend.
func (b *Backend) Cleanup(context.Context, string, json.RawMessage) error {
	return errors.ErrUnsupported
}
