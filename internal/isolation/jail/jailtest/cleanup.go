package jailtest

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"golang.org/x/sys/unix"
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
	for _, m := range mountsUnder(runDir) {
		_ = unix.Unmount(m, unix.MNT_DETACH)
	}
	for _, d := range CgroupParentDirs(cgParent) {
		_ = unix.Rmdir(d)
	}
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			mounts = append(mounts, p)
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	return mounts
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
