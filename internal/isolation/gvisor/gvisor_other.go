//go:build !linux

package gvisor

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
)

// Backend is the gvisor isolation backend; it needs Linux.
type Backend struct{}

var _ isolation.Backend = (*Backend)(nil)

// New fails after validating cfg: the gvisor backend needs Linux.
func New(cfg Config) (*Backend, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, errors.ErrUnsupported
}

// Name implements isolation.Backend.
func (b *Backend) Name() string { return "gvisor" }

// Platform is the gVisor platform the backend's sandboxes run on.
func (b *Backend) Platform() string { return "" }

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

// Leftovers fails: the gvisor backend needs Linux.
func (b *Backend) Leftovers(map[string]bool) ([]string, error) { return nil, errors.ErrUnsupported }
