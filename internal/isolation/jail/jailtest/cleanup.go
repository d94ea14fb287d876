package jailtest

import (
	"context"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/mountinfo"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// CleanupRunDir has t, when it ends, remove what a backend on runDir with
// cgroup parent cgParent leaves on the host by design (mounts a restarted
// server would adopt, the parent groups): see Release.
func CleanupRunDir(t testing.TB, runDir, cgParent string) {
	t.Cleanup(func() { Release(runDir, cgParent) })
}

// Release detaches every mount under runDir (the network namespaces'
// directory, the binaries tmpfs, whatever a backend adds later), deepest
// first, and removes the parent cgroups of cgParent. A server keeps these
// across restarts; a test must not, or its temporary directory cannot be
// removed.
func Release(runDir, cgParent string) {
	mounts, _ := mountinfo.Under(runDir)
	for _, m := range mounts {
		_ = unix.Unmount(m, unix.MNT_DETACH)
	}
	for _, d := range CgroupParentDirs(cgParent) {
		_ = unix.Rmdir(d)
	}
}

// Network returns prepared host networking (network.Host) over pool and
// fw with its namespaces under runDir, for a test backend's
// Config.Network; Release covers what it leaves.
func Network(t testing.TB, runDir string, pool *network.Pool, fw *network.Firewall) *network.Host {
	t.Helper()
	host, err := network.NewHost(network.HostConfig{RunDir: runDir, Pool: pool, Firewall: fw})
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return host
}

// FirewalledNetwork is Network over pool and the host firewall, for a
// backend test whose sandboxes have addresses: it takes
// the host-wide firewall lock for the test (testenv.LockFirewall) and
// deletes the firewall table when the test ends, unless the table was
// there before (it then belongs to a server's sandboxes).
func FirewalledNetwork(t testing.TB, runDir string, pool *network.Pool) *network.Host {
	t.Helper()
	testenv.LockFirewall(t)
	fw, err := network.NewFirewall(network.FirewallConfig{})
	if err != nil {
		t.Fatal(err)
	}
	existed, _, err := network.FirewallChains()
	if err != nil {
		t.Fatal(err)
	}
	if !existed {
		t.Cleanup(func() {
			if err := fw.Delete(context.Background()); err != nil {
				t.Errorf("deleting firewall: %v", err)
			}
		})
	}
	return Network(t, runDir, pool, fw)
}
