package cluster

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// standInHost is what a sandbox host of its own gives a node agent, made
// on this machine so that several real nodes run side by side: a network
// namespace (its own firewall table, sandbox veths, address pool and
// listener), joined to the test's by a veth, and a mount namespace with a
// tmpfs of its own on /run/agent-sandbox (its host lock, the pins of its
// sandboxes' namespaces, its volumes). The one thing of /run/agent-sandbox
// kept shared is userns/, the reservations of user-namespace id ranges:
// every node's sandboxes run on this one kernel, so their ranges must not
// overlap, as they must not between two servers on one host. Cgroups stay
// shared too (each sandbox's group is named by its unique ID and nothing
// sweeps the parent). Both namespaces are pinned, so a node restarted or
// killed comes back to the same host, as a DaemonSet's pod does.
type standInHost struct {
	netns string // in /run/netns, for ip -n
	mntns string // the pinned mount namespace
	// Addr is the node's address on its veth, which the test's namespace
	// (the API replicas) reaches.
	Addr string
}

// newStandInHost makes stand-in host i (0..255) and removes it when the
// test ends, after the servers started in it (register it before them).
func newStandInHost(t *testing.T, i int) *standInHost {
	t.Helper()
	h := &standInHost{netns: fmt.Sprintf("standin-%d-%d", os.Getpid(), i)}
	hostIf := fmt.Sprintf("standin%d", i) // not asb*: those are sandboxes'
	prefix := fmt.Sprintf("10.250.%d", i)
	h.Addr = prefix + ".2"
	mustRun(t, "ip", "netns", "add", h.netns)
	t.Cleanup(func() { runCleanup(t, "ip", "netns", "del", h.netns) })
	mustRun(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", h.netns)
	t.Cleanup(func() { runCleanup(t, "ip", "link", "del", hostIf) })
	mustRun(t, "ip", "addr", "add", prefix+".1/30", "dev", hostIf)
	mustRun(t, "ip", "link", "set", hostIf, "up")
	mustRun(t, "ip", "-n", h.netns, "addr", "add", h.Addr+"/30", "dev", "eth0")
	mustRun(t, "ip", "-n", h.netns, "link", "set", "eth0", "up")
	mustRun(t, "ip", "-n", h.netns, "link", "set", "lo", "up")

	// A mount namespace is pinned by a bind mount of its nsfs file, which
	// must sit on a mount that is not shared.
	dir := t.TempDir()
	mustRun(t, "mount", "--bind", dir, dir)
	t.Cleanup(func() { runCleanup(t, "umount", dir) })
	mustRun(t, "mount", "--make-private", dir)
	h.mntns = filepath.Join(dir, "mnt")
	stage := filepath.Join(dir, "userns")
	if err := os.WriteFile(h.mntns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/run/agent-sandbox/userns", 0o700); err != nil {
		t.Fatal(err)
	}
	// Inside, the host's userns/ is set aside before the tmpfs hides it,
	// then moved into the tmpfs. The namespace is the host's slave: what
	// the host unmounts goes from it too (it pins nothing of others'),
	// and nothing mounted in it reaches the host.
	const setup = `set -e
mount --bind /run/agent-sandbox/userns "$1"
mount -t tmpfs -o mode=0755 standin-run /run/agent-sandbox
mkdir -m 0700 /run/agent-sandbox/userns
mount --move "$1" /run/agent-sandbox/userns`
	mustRun(t, "unshare", "--mount="+h.mntns, "--propagation", "slave", "sh", "-c", setup, "sh", stage)
	t.Cleanup(func() { runCleanup(t, "umount", h.mntns) })
	return h
}

// wrap is the command that runs a process in the host's namespaces
// (servertest.Server.Wrap); nsenter execs it.
func (h *standInHost) wrap() []string {
	return []string{"nsenter", "--net=/run/netns/" + h.netns, "--mount=" + h.mntns, "--"}
}

// relay forwards the TCP connections made inside the host to addr (on its
// loopback) to addr in the test's namespace, until the test ends: the
// nodes' way to the API server, which listens on the test's loopback.
func (h *standInHost) relay(t *testing.T, addr string) {
	t.Helper()
	ns, err := network.Open("/run", h.netns) // iproute2's /run/netns
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, h.netns, err)
	}
	forward(t, ln, addr)
}

// forward passes each TCP connection ln accepts to one of backends, in
// turn, or the next when one does not answer (a load balancer's way, as a
// Service's), until the test ends.
func forward(t *testing.T, ln net.Listener, backends ...string) {
	t.Cleanup(func() { ln.Close() })
	var next atomic.Uint32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			go func() {
				defer c.Close()
				first := int(next.Add(1))
				for i := range backends {
					up, err := net.Dial("tcp", backends[(first+i)%len(backends)])
					if err != nil {
						continue
					}
					defer up.Close()
					go func() {
						_, _ = io.Copy(up, c)
						_ = up.(*net.TCPConn).CloseWrite()
					}()
					_, _ = io.Copy(c, up)
					return
				}
			}()
		}
	}()
}

// standInCluster starts an API server with deploy/kubernetes applied and n
// stand-in hosts that reach it (relay); it returns them with the node
// role's kubeconfig.
func standInCluster(t *testing.T, n int) (*kubetest.Cluster, []*standInHost, string) {
	t.Helper()
	c := kubetest.Start(t)
	applyBase(t, c)
	kubeconfig, err := c.KubeconfigAs(nodeAccount.user, nodeAccount.groups...)
	if err != nil {
		t.Fatal(err)
	}
	apiServer, err := url.Parse(c.Admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	var hosts []*standInHost
	for i := range n {
		h := newStandInHost(t, i)
		h.relay(t, apiServer.Host)
		hosts = append(hosts, h)
	}
	return c, hosts, kubeconfig
}

// node prepares a node agent on the host: a real `serve --cluster
// kubernetes` of the jail backend listening on the host's address.
func (h *standInHost) node(t *testing.T, flags ...string) *servertest.Server {
	t.Helper()
	srv := servertest.New(t, flags...)
	srv.Wrap = h.wrap()
	srv.Listen = h.Addr + ":3000"
	return srv
}

// agent starts node agent name on the host, with kubeconfig and serve's
// flags besides the cluster's; it is stopped when the test ends.
func (h *standInHost) agent(t *testing.T, name, kubeconfig string, flags ...string) *servertest.Server {
	t.Helper()
	srv := h.node(t, append([]string{"--backend", "jail", "--cluster", "kubernetes", "--kubeconfig", kubeconfig,
		"--cluster-namespace", namespace, "--node-name", name}, flags...)...)
	srv.Start()
	t.Cleanup(func() {
		if srv.Running() { // else servertest's teardown restarts it to clean up
			srv.Stop()
		}
	})
	return srv
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

func runCleanup(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Errorf("cleaning up: %s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}
