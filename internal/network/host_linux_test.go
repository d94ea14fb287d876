package network

import (
	"context"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// hostTestPrefix is away from DefaultPoolPrefix and the other tests' pools.
var hostTestPrefix = netip.MustParsePrefix("10.252.1.0/24")

// TestHost walks a sandbox's network through Setup, a restart (Prepare on
// a new Host, Adopt) and Release, and Release after a half-made Setup.
func TestHost(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.LockFirewall(t)
	ctx := context.Background()
	existed := tableListed(t)
	runDir := t.TempDir()
	t.Cleanup(func() { _ = unix.Unmount(Dir(runDir), unix.MNT_DETACH) })
	newHost := func() (*Host, *Pool) {
		pool, err := NewPool(hostTestPrefix)
		if err != nil {
			t.Fatal(err)
		}
		fw, err := NewFirewall(FirewallConfig{})
		if err != nil {
			t.Fatal(err)
		}
		h, err := NewHost(HostConfig{RunDir: runDir, Pool: pool, Firewall: fw})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		return h, pool
	}
	h, _ := newHost()
	if !existed {
		t.Cleanup(func() {
			fw, _ := NewFirewall(FirewallConfig{})
			if err := fw.Delete(context.Background()); err != nil {
				t.Errorf("deleting firewall: %v", err)
			}
		})
	}
	const id = "hosttest-a"
	t.Cleanup(func() { _ = h.Release(context.Background(), id) })
	ns, link, err := h.Setup(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if link.HostIf != VethName(id) || !hostTestPrefix.Contains(link.Gateway) || link.Address != link.Gateway.Next() {
		t.Fatalf("Setup link %+v, want %s with a /30 of %s", link, VethName(id), hostTestPrefix)
	}
	if err := ns.Do(func() error { _, err := netlink.LinkByName(PeerName); return err }); err != nil {
		t.Errorf("no %s inside: %v", PeerName, err)
	}

	// A restarted server: Prepare restores the lease from the veth, so a
	// new sandbox gets another address, and Adopt finds the namespace.
	h2, pool2 := newHost()
	if _, err := h2.Adopt(id, link); err != nil {
		t.Fatal(err)
	}
	const id2 = "hosttest-b"
	t.Cleanup(func() { _ = h2.Release(context.Background(), id2) })
	_, link2, err := h2.Setup(ctx, id2)
	if err != nil {
		t.Fatal(err)
	}
	if link2.Gateway == link.Gateway {
		t.Errorf("after a restart the new sandbox got the adopted one's address %s", link.Gateway)
	}

	for range 2 { // idempotent
		if err := h2.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := netlink.LinkByName(link.HostIf); !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("veth %s after Release: %v, want it gone", link.HostIf, err)
	}
	if _, err := os.Lstat(filepath.Join(Dir(runDir), id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("namespace file after Release: %v", err)
	}
	if err := pool2.Restore(map[string]VethAddrs{"probe": {Gateway: link.Gateway, Sandbox: link.Address}}); err != nil {
		t.Errorf("lease still held after Release: %v", err)
	}
	if _, err := h2.Adopt(id, link); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Adopt after Release: %v, want ErrNotExist", err)
	}

	// What a Create that stopped half-way leaves: the file without its mount.
	stray := filepath.Join(Dir(runDir), "hosttest-c")
	if err := os.WriteFile(stray, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := h2.Release(ctx, "hosttest-c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(stray); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stray namespace file after Release: %v", err)
	}
}

func TestHostLoopbackOnly(t *testing.T) {
	testenv.RequireRoot(t)
	runDir := t.TempDir()
	t.Cleanup(func() { _ = unix.Unmount(Dir(runDir), unix.MNT_DETACH) })
	h, err := NewHost(HostConfig{RunDir: runDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	ns, link, err := h.Setup(context.Background(), "hosttest-lo")
	if err != nil {
		t.Fatal(err)
	}
	if link != (Link{}) {
		t.Errorf("link %+v without a pool, want none", link)
	}
	if err := ns.Do(func() error { _, err := netlink.LinkByName(PeerName); return err }); err == nil {
		t.Errorf("%s inside a loopback-only namespace", PeerName)
	}
	if err := h.Release(context.Background(), "hosttest-lo"); err != nil {
		t.Fatal(err)
	}
}

func TestNewHostChecks(t *testing.T) {
	pool, err := NewPool(hostTestPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]HostConfig{
		"relative run dir":  {RunDir: "run"},
		"pool, no firewall": {Pool: pool},
		"firewall, no pool": {Firewall: &Firewall{}},
	} {
		if _, err := NewHost(cfg); err == nil {
			t.Errorf("%s: NewHost accepted it", name)
		}
	}
}
