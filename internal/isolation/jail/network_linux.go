package jail

import (
	"context"
	"fmt"

	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// PrepareNetwork installs the firewall's base and restores the pool's
// leases from the sandbox veths on the host (those of surviving sandboxes,
// and of other servers' within the pool's prefix), so that Start never
// hands out an address in use. Call it once, before Adopt and Start; it
// does nothing without networking.
func (b *Backend) PrepareNetwork(ctx context.Context) error {
	if b.cfg.Pool == nil {
		return nil
	}
	if err := b.cfg.Firewall.EnsureBase(ctx); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	leases, err := network.HostVeths()
	if err != nil {
		return fmt.Errorf("jail: reading sandbox veths: %w", err)
	}
	for id, a := range leases {
		if !b.cfg.Pool.Prefix().Contains(a.Gateway) {
			delete(leases, id) // another pool's
		}
	}
	if err := b.cfg.Pool.Restore(leases); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	return nil
}

// attachVeth leases id an address and gives ns its routed veth, isolated
// by the firewall. On error nothing is left behind.
func (b *Backend) attachVeth(ctx context.Context, id string, ns *network.Namespace) (network.VethAddrs, error) {
	addrs, err := b.cfg.Pool.Allocate(id)
	if err != nil {
		return network.VethAddrs{}, err
	}
	err = ns.AttachVeth(ctx, network.VethConfig{SandboxID: id, Addrs: addrs, Firewall: b.cfg.Firewall})
	if err != nil {
		b.cfg.Pool.Release(id)
		return network.VethAddrs{}, err
	}
	return addrs, nil
}

// detachVeth removes id's veth (found by the name derived from id) and its
// firewall pieces, then frees its lease. It is idempotent and does nothing
// without networking. The lease is kept while the veth may still hold it.
func (b *Backend) detachVeth(ctx context.Context, id string) error {
	if b.cfg.Pool == nil {
		return nil
	}
	if err := network.DetachVeth(ctx, network.VethConfig{SandboxID: id, Firewall: b.cfg.Firewall}); err != nil {
		return err
	}
	b.cfg.Pool.Release(id)
	return nil
}
