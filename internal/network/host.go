package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
)

// Link is a sandbox's network attachment as the host sees it: the host
// serves the sandbox's DNS and egress proxy on Gateway and applies its
// firewall rules and bandwidth caps to HostIf.
type Link struct {
	HostIf  string     // the host end of its veth
	Gateway netip.Addr // the host's address on it: the sandbox's route and nameserver
	Address netip.Addr // the sandbox's address
}

// HostConfig configures a Host.
type HostConfig struct {
	// RunDir holds the namespaces' bind mounts (Dir(RunDir)); default
	// /run/agent-sandbox. They must not outlive a reboot.
	RunDir string
	// Pool and Firewall give each sandbox a routed veth (eth0, an address
	// from Pool, a default route) isolated by Firewall. Both or neither:
	// nil means loopback only.
	Pool     *Pool
	Firewall *Firewall
}

// Host is the one owner of sandbox networking on this host, whatever the
// isolation backend: the network namespaces, the address pool's leases,
// the veths and their firewall pieces. The server builds one and hands it
// to every backend, which asks it for a sandbox's namespace (Setup), runs
// the sandbox in it (the jail's processes; a VM's QEMU process with its
// tap) and gives it back (Release). Its methods may be called
// concurrently.
type Host struct {
	runDir string
	pool   *Pool     // nil: loopback only
	fw     *Firewall // set with pool
}

// NewHost returns the host networking of cfg. Nothing is installed until
// Prepare.
func NewHost(cfg HostConfig) (*Host, error) {
	if cfg.RunDir == "" {
		cfg.RunDir = "/run/agent-sandbox"
	}
	if !filepath.IsAbs(cfg.RunDir) {
		return nil, fmt.Errorf("sandbox networking: run dir %q is not an absolute path", cfg.RunDir)
	}
	if (cfg.Pool == nil) != (cfg.Firewall == nil) {
		return nil, errors.New("sandbox networking: address pool and firewall go together: set both or neither")
	}
	return &Host{runDir: cfg.RunDir, pool: cfg.Pool, fw: cfg.Firewall}, nil
}

// RunDir returns the directory under which the namespaces are pinned.
func (h *Host) RunDir() string { return h.runDir }

// Prepare installs the firewall's base and restores the pool's leases from
// the sandbox veths on the host (those of surviving sandboxes, and of other
// servers' within the pool's prefix), so that Setup never hands out an
// address in use. Call it once, before any backend adopts or starts a
// sandbox; it does nothing without a pool.
func (h *Host) Prepare(ctx context.Context) error {
	if h.pool == nil {
		return nil
	}
	if err := h.fw.EnsureBase(ctx); err != nil {
		return fmt.Errorf("preparing sandbox networking: %w", err)
	}
	leases, err := HostVeths()
	if err != nil {
		return fmt.Errorf("preparing sandbox networking: reading sandbox veths: %w", err)
	}
	for id, a := range leases {
		if !h.pool.Prefix().Contains(a.Gateway) {
			delete(leases, id) // another pool's
		}
	}
	if err := h.pool.Restore(leases); err != nil {
		return fmt.Errorf("preparing sandbox networking: %w", err)
	}
	return nil
}

// Setup makes sandbox id's network namespace (named id) and, with a pool,
// leases it an address and attaches its routed veth, isolated by the
// firewall. The Link is the zero Link without a pool. On error nothing is
// left behind.
func (h *Host) Setup(ctx context.Context, id string) (_ *Namespace, _ Link, err error) {
	ns, err := Create(h.runDir, id)
	if err != nil {
		return nil, Link{}, err
	}
	if h.pool == nil {
		return ns, Link{}, nil
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ns.Delete())
		}
	}()
	addrs, err := h.pool.Allocate(id)
	if err != nil {
		return nil, Link{}, err
	}
	if err := ns.AttachVeth(ctx, VethConfig{SandboxID: id, Addrs: addrs, Firewall: h.fw}); err != nil {
		h.pool.Release(id)
		return nil, Link{}, err
	}
	return ns, Link{HostIf: VethName(id), Gateway: addrs.Gateway, Address: addrs.Sandbox}, nil
}

// Adopt opens the namespace of a sandbox that an earlier server process
// set up, and re-reserves its lease, link as Setup returned it (Prepare
// has usually restored it from the veth already). A namespace that is gone
// is an error wrapping fs.ErrNotExist.
func (h *Host) Adopt(id string, link Link) (*Namespace, error) {
	ns, err := Open(h.runDir, id)
	if err != nil {
		return nil, err
	}
	if h.pool != nil && link.Gateway.IsValid() {
		lease := map[string]VethAddrs{id: {Gateway: link.Gateway, Sandbox: link.Address}}
		if err := h.pool.Restore(lease); err != nil {
			return nil, fmt.Errorf("adopting the network of %s: %w", id, err)
		}
	}
	return ns, nil
}

// Release removes sandbox id's veth (found by the name derived from id)
// and its firewall pieces, frees its lease and deletes its namespace. It
// is idempotent, and works from nothing but the id: after a Setup that
// stopped half-way, or in another server process. The lease is kept while
// the veth may still hold it.
func (h *Host) Release(ctx context.Context, id string) error {
	var errs []error
	if h.pool != nil {
		if err := DetachVeth(ctx, VethConfig{SandboxID: id, Firewall: h.fw}); err != nil {
			errs = append(errs, err)
		} else {
			h.pool.Release(id)
		}
	}
	errs = append(errs, Remove(h.runDir, id))
	return errors.Join(errs...)
}
