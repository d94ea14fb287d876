package sandboxtest

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/gateway"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/inet"
)

// Config is what the tests that use a stack differ in. The zero value of
// a field is the server's default, or nothing of that kind.
type Config struct {
	// Backend names the isolation backend sandboxes run on: Jail
	// (default), VM or Gvisor.
	Backend string
	// Name tells this test's host objects from those of tests running
	// beside it: the backend's cgroup parent is
	// agent-sandbox-<Name>-<pid>.
	Name string
	// Pool is the sandboxes' address pool. Each test package has its own,
	// away from the server's default, so that a leftover of one never
	// holds an address another hands out.
	Pool netip.Prefix
	// Ceiling is the operator's egress policy for sandboxes, served by
	// their gateway (Stack.Gateway); nil: no gateway, so the firewall's
	// redirects lead nowhere and sandboxes reach nothing outside.
	Ceiling *egress.Ceiling
	// BuildCeiling is the egress policy of template build steps
	// (sandbox.Config.BuildNetwork); nil: build steps reach no network.
	BuildCeiling *egress.Ceiling
	// Internet, when set, is a test Internet (internal/testenv/inet) the
	// stack starts once it holds the host lock: the gateways resolve with
	// its DNS server and verify its servers' certificates with its CA
	// where their proxies terminate TLS (header rules), and the probe
	// template trusts that CA (CAFile). Without one they resolve with the
	// host's first nameserver in /etc/resolv.conf and verify with the
	// host's roots.
	Internet *inet.Config
	// DropLogGroup is the NFLOG group of the firewall's drops, read into
	// the sandboxes' audit trail; 0: drops are not logged. It must differ
	// from a running server's.
	DropLogGroup uint16
	// MaxConnsPerSandbox caps each sandbox's conntrack entries; 0: no cap.
	MaxConnsPerSandbox uint32
	// Userns is the jail's user namespace mode (the jail only). On a host
	// that cannot have user namespaces, UsernsOn skips the test with the
	// reason (fails it under CI=true).
	Userns jail.UsernsMode
	// Probe adds the template "probe" (Stack.Probe) that sandboxes are
	// created from: a small root filesystem with the test binary as
	// /usr/bin/probe, and ProbeFiles. Without it the manager knows no
	// template and only runs build steps.
	Probe      bool
	ProbeFiles []File
	// Templates are further templates sandboxes may be created from,
	// built ones (the browser template from the test cache, say).
	Templates []*template.Template
	// Resources are the default CPUs, memory and disk of sandboxes and of
	// build step sandboxes; zero fields: the manager's defaults.
	Resources isolation.Resources
	// LogLevel is the least level of the stack's logs, which go to the
	// test's output.
	LogLevel slog.Level
	// Manager, if set, changes the manager's configuration last (warm
	// pools, say).
	Manager func(*sandbox.Config)
}

// Stack is a sandbox manager over real host networking and a real
// backend, and where its pieces are.
type Stack struct {
	Manager *sandbox.Manager
	Store   *store.Store
	// Gateway serves the sandboxes' egress policy; nil without
	// Config.Ceiling.
	Gateway *gateway.Gateway
	// Internet is the test Internet; nil without Config.Internet.
	Internet *inet.Internet
	// Probe is the probe template; nil without Config.Probe.
	Probe *template.Template
	// Backend is the backend's name (Config.Backend).
	Backend string
	// Dir is the test's directory the stack keeps its files in.
	Dir string
	// StateDir holds the backend's directory of each sandbox.
	StateDir string
	// RunDir holds the network namespaces and the jail's binaries.
	RunDir string
	// CgroupParent is the parent cgroup of the backend's sandboxes.
	CgroupParent string
	// EnvdPath is the envd binary the sandboxes run.
	EnvdPath string
}

// Start builds the stack cfg describes and starts its manager. It needs
// root and holds the host lock on sandbox networking until t ends; then
// everything it made is removed, and a sandbox the backend still has is
// an error of the test.
func Start(t testing.TB, cfg Config) *Stack {
	t.Helper()
	testenv.RequireRoot(t)
	switch cfg.Backend {
	case VM:
		RequireVM(t)
	case Gvisor:
		RequireGvisor(t)
	}
	testenv.LockFirewall(t)
	ctx := context.Background()
	dir := t.TempDir()
	s := &Stack{
		Backend:      cmp.Or(cfg.Backend, Jail),
		Dir:          dir,
		StateDir:     filepath.Join(dir, "sandboxes"),
		RunDir:       filepath.Join(dir, "run"),
		CgroupParent: fmt.Sprintf("agent-sandbox-%s-%d", cfg.Name, os.Getpid()),
	}
	if cfg.Internet != nil {
		s.Internet = inet.Start(t, *cfg.Internet)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: cfg.LogLevel}))

	pool, err := network.NewPool(cfg.Pool)
	if err != nil {
		t.Fatalf("making the address pool: %v", err)
	}
	fwExisted, _, err := network.FirewallChains()
	if err != nil {
		t.Fatalf("looking for the firewall table: %v", err)
	}
	fw, err := network.NewFirewall(network.FirewallConfig{
		Redirects:          gateway.Redirects(gateway.DefaultDNSPort, gateway.DefaultProxyPort),
		MaxConnsPerSandbox: cfg.MaxConnsPerSandbox,
		LogGroup:           cfg.DropLogGroup,
	})
	if err != nil {
		t.Fatalf("making the firewall: %v", err)
	}
	// A table that was there belongs to a server's sandboxes.
	if !fwExisted {
		t.Cleanup(func() {
			if err := fw.Delete(context.Background()); err != nil {
				t.Errorf("deleting the firewall table: %v", err)
			}
		})
	}
	jailtest.CleanupRunDir(t, s.RunDir, s.CgroupParent)
	host := jailtest.Network(t, s.RunDir, pool, fw)

	build := s.gateways(t, cfg, pool, fw, log)
	backend := s.backend(t, cfg, host, log)
	if s.Store, err = store.Open(ctx, filepath.Join(dir, "db.sqlite")); err != nil {
		t.Fatalf("opening the store: %v", err)
	}
	t.Cleanup(func() { s.Store.Close() })
	if s.EnvdPath, err = jailtest.BuildEnvd(dir); err != nil {
		t.Fatal(err)
	}
	var tmpls templates
	if cfg.Probe {
		s.Probe = s.probeTemplate(t, cfg.ProbeFiles)
		tmpls = append(tmpls, s.Probe)
	}
	tmpls = append(tmpls, cfg.Templates...)
	mcfg := sandbox.Config{
		Store: s.Store, Backend: backend, Log: log, Templates: tmpls,
		Images: &template.Builder{}, EnvdPath: s.EnvdPath,
		DefaultCPU: cfg.Resources.CPUCount, DefaultMemory: cfg.Resources.MemoryMB, DefaultDisk: cfg.Resources.DiskSizeMB,
		StepResources: cfg.Resources,
	}
	// Only set, never a nil pointer in the interface.
	if s.Gateway != nil {
		mcfg.Network = s.Gateway
	}
	if build != nil {
		mcfg.BuildNetwork = build
	}
	if cfg.Manager != nil {
		cfg.Manager(&mcfg)
	}
	if s.Manager, err = sandbox.New(mcfg); err != nil {
		t.Fatalf("making the manager: %v", err)
	}
	t.Cleanup(func() {
		// Closing the manager closes the backend, which waits for the
		// VMs of memory snapshots in the making.
		if err := s.Manager.Close(); err != nil {
			t.Errorf("closing the manager: %v", err)
		}
		if ids, err := backend.(leftovers).Leftovers(nil); err != nil || len(ids) > 0 {
			t.Errorf("sandboxes left behind by the %s backend: %v %v", s.Backend, ids, err)
		}
	})
	if err := s.Manager.Start(ctx); err != nil {
		t.Fatalf("starting the manager: %v", err)
	}
	return s
}

// leftovers is what both backends have beyond the contract: the sandboxes
// their state directory still holds.
type leftovers interface {
	Leftovers(known map[string]bool) ([]string, error)
}

// gateways makes the sandboxes' gateway (s.Gateway) and returns the build
// steps' one, as cfg asks; both are closed when t ends.
func (s *Stack) gateways(t testing.TB, cfg Config, pool *network.Pool, fw *network.Firewall, log *slog.Logger) (build *gateway.Gateway) {
	t.Helper()
	if cfg.Ceiling == nil && cfg.BuildCeiling == nil {
		return nil
	}
	reserved, err := network.HostPrefixes()
	if err != nil {
		t.Fatalf("reading the host's prefixes: %v", err)
	}
	reserved = append(reserved, pool.Prefix())
	var upstream string
	var roots *x509.CertPool
	if s.Internet != nil {
		upstream = s.Internet.DNS.String()
		roots = x509.NewCertPool()
		roots.AppendCertsFromPEM(s.Internet.CACert)
	} else if upstream, err = hostResolver(); err != nil {
		t.Fatalf("finding the host's resolver: %v", err)
	}
	newGateway := func(c egress.Ceiling) *gateway.Gateway {
		for _, p := range reserved {
			c.ReservedCIDRs = append(c.ReservedCIDRs, p.String())
		}
		gw, err := gateway.New(gateway.Config{
			Ceiling: c, Upstream: &egress.Cache{Upstream: &egress.NetUpstream{Addr: upstream}}, Firewall: fw, Log: log,
			UpstreamRoots: roots,
		})
		if err != nil {
			t.Fatalf("making a gateway: %v", err)
		}
		t.Cleanup(gw.Close)
		return gw
	}
	if cfg.Ceiling != nil {
		s.Gateway = newGateway(*cfg.Ceiling)
		if cfg.DropLogGroup != 0 {
			recordDrops(t, s.Gateway, cfg.DropLogGroup)
		}
	}
	if cfg.BuildCeiling != nil {
		build = newGateway(*cfg.BuildCeiling)
	}
	return build
}

// recordDrops reads the firewall's drop log into gw's audit trail until t
// ends.
func recordDrops(t testing.TB, gw *gateway.Gateway, group uint16) {
	t.Helper()
	dl, err := network.OpenDropLog(group)
	if err != nil {
		t.Fatalf("opening the drop log: %v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := gw.RecordDrops(ctx, dl); err != nil {
			t.Errorf("reading the drop log: %v", err)
		}
	}()
	t.Cleanup(func() {
		stop()
		<-done
		dl.Close()
	})
}

// templates is a fixed template set, by name.
type templates []*template.Template

// Lookup implements sandbox.Templates.
func (ts templates) Lookup(ref string) (*template.Template, error) {
	for _, t := range ts {
		if t.Name == ref {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%q: %w", ref, template.ErrNotFound)
}

// hostResolver is the first nameserver of /etc/resolv.conf, as host:port.
func hostResolver() (string, error) {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				return netip.AddrPortFrom(a.WithZone(""), 53).String(), nil
			}
		}
	}
	return "", errors.New("/etc/resolv.conf names no nameserver")
}
