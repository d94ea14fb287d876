//go:build !linux

package network

import (
	"context"
	"errors"
)

// AttachVeth is not supported on this platform.
func (ns *Namespace) AttachVeth(ctx context.Context, cfg VethConfig) error {
	return errors.ErrUnsupported
}

// DetachVeth is not supported on this platform.
func DetachVeth(ctx context.Context, cfg VethConfig) error { return errors.ErrUnsupported }

// HostVeths is not supported on this platform.
func HostVeths() (map[string]VethAddrs, error) { return nil, errors.ErrUnsupported }

// TableName is the nftables table (family inet) the firewall owns.
const TableName = "agent_sandbox"

// Firewall is the host-side nftables isolation; only Linux has it.
type Firewall struct{}

// NewFirewall is not supported on this platform.
func NewFirewall(cfg FirewallConfig) (*Firewall, error) { return nil, errors.ErrUnsupported }

// EnsureBase is not supported on this platform.
func (f *Firewall) EnsureBase(ctx context.Context) error { return errors.ErrUnsupported }

// Delete is not supported on this platform.
func (f *Firewall) Delete(ctx context.Context) error { return errors.ErrUnsupported }

// AddSandbox is not supported on this platform.
func (f *Firewall) AddSandbox(ctx context.Context, hostIf string) error {
	return errors.ErrUnsupported
}

// SetRules is not supported on this platform.
func (f *Firewall) SetRules(ctx context.Context, hostIf string, rules SandboxRules) error {
	return errors.ErrUnsupported
}

// RemoveSandbox is not supported on this platform.
func (f *Firewall) RemoveSandbox(ctx context.Context, hostIf string) error {
	return errors.ErrUnsupported
}

// FirewallChains is not supported on this platform.
func FirewallChains() (bool, []string, error) { return false, nil, errors.ErrUnsupported }
