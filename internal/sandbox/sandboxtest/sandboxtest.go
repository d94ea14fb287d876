// Package sandboxtest gives tests outside internal/sandbox a template
// build step runner that runs each step in a real jail sandbox behind a
// build egress gateway, as the server wires it. It is imported only by
// tests, so it never ships in a binary; a test binary that uses it must
// call jail.ExitIfInit first in its TestMain.
package sandboxtest

import (
	"bufio"
	"context"
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
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// poolPrefix is the address pool of the step sandboxes; other test
// packages use other prefixes, and the host lock keeps runs apart.
var poolPrefix = netip.MustParsePrefix("10.247.0.0/24")

// StepRunner returns a sandbox manager whose RunStep runs build steps in
// jail sandboxes that may reach what ceiling allows, resolving names with
// the host's resolver (the first nameserver of /etc/resolv.conf). It needs
// root and holds the host lock on sandbox networking until t ends;
// everything it made is removed then.
func StepRunner(t testing.TB, ceiling egress.Ceiling) *sandbox.Manager {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.LockFirewall(t)
	ctx := context.Background()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	pool, err := network.NewPool(poolPrefix)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := network.NewFirewall(network.FirewallConfig{
		Redirects: gateway.Redirects(gateway.DefaultDNSPort, gateway.DefaultProxyPort),
	})
	if err != nil {
		t.Fatal(err)
	}
	reserved, err := network.HostPrefixes()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(reserved, pool.Prefix()) {
		ceiling.ReservedCIDRs = append(ceiling.ReservedCIDRs, p.String())
	}
	upstream, err := hostResolver()
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{
		Ceiling: ceiling, Upstream: &egress.Cache{Upstream: &egress.NetUpstream{Addr: upstream}}, Firewall: fw, Log: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	runDir := filepath.Join(dir, "run")
	cgParent := fmt.Sprintf("agent-sandbox-steptest-%d", os.Getpid())
	backend, err := jail.New(jail.Config{
		StateDir: filepath.Join(dir, "sandboxes"), RunDir: runDir, CgroupParent: cgParent, Log: log,
		Network: jailtest.Network(t, runDir, pool, fw),
	})
	if err != nil {
		t.Fatal(err)
	}
	jailtest.CleanupRunDir(t, runDir, cgParent)
	st, err := store.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	envd, err := jailtest.BuildEnvd(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := sandbox.New(sandbox.Config{
		Store: st, Backend: backend, Log: log, Templates: noTemplates{}, EnvdPath: envd, BuildNetwork: gw,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		if ids, err := backend.Leftovers(nil); err != nil || len(ids) > 0 {
			t.Errorf("build step sandboxes left behind: %v %v", ids, err)
		}
	})
	return m
}

// noTemplates knows no template: the manager only runs build steps.
type noTemplates struct{}

func (noTemplates) Lookup(ref string) (*template.Template, error) {
	return nil, fmt.Errorf("%q: %w", ref, template.ErrNotFound)
}

// hostResolver is the first nameserver of /etc/resolv.conf, as host:port.
func hostResolver() (string, error) {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				return netip.AddrPortFrom(a.WithZone(""), 53).String(), nil
			}
		}
	}
	return "", errors.New("/etc/resolv.conf names no nameserver")
}
