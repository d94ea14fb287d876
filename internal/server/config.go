package server

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Config is the whole server configuration. Defaults are in DefaultConfig;
// the CLI applies the environment and then flags on top.
type Config struct {
	Listen  string   // address of the one listener (API and sandbox traffic)
	Domain  string   // E2B_DOMAIN clients use; "" = derived from Listen
	DataDir string   // store, templates, sandboxes, TLS material
	APIKeys []string // keys to accept in addition to the stored ones
	TLS     bool     // serve HTTPS with a CA kept under DataDir/tls
	// EnvdPath is the envd binary mounted into sandboxes; "" = "envd" next
	// to the running executable.
	EnvdPath string
	// Mirror is the Debian mirror templates are built from ("" = default).
	Mirror string
	// Templates are the built-in templates built (if missing) before the
	// server is ready; base always is.
	Templates []string
	// CodeInterpPath is the code interpreter server binary mounted into
	// sandboxes; "" = "codeinterp" next to envd.
	CodeInterpPath string
	// EgressPolicy is a JSON file holding the operator's egress ceiling
	// (egress.Ceiling); "" = deny all but the package registries.
	EgressPolicy string
	// DNSUpstream is the resolver (host:port) that answers the names a
	// sandbox may use; "" = the first nameserver of /etc/resolv.conf.
	DNSUpstream string
	// BandwidthMbit caps each sandbox's traffic, each way: the default
	// and the most a create request may ask for. 0 = unlimited.
	BandwidthMbit float64
	// Userns is whether sandboxes run in user namespaces: auto (where
	// the host allows, else without and a warning), on or off; "" = auto.
	Userns string
	// WarmPools sizes each template's pool of sandboxes booted ahead of
	// demand; empty: no pools.
	WarmPools map[string]sandbox.PoolSize
	// MaxSandboxes caps the sandboxes running at once, pool members
	// included; 0 = no cap.
	MaxSandboxes int

	// Template builds run each step that runs a command in a sandbox of
	// its own (sandbox.Manager.RunStep). BuildEgressPolicy is a JSON file
	// holding the egress ceiling of those sandboxes (egress.Ceiling); "" =
	// the package registries only. The Debian mirror is allowed either way.
	BuildEgressPolicy string
	// BuildStepTimeout bounds each step and BuildTimeout each template's
	// build; 0 = no bound.
	BuildStepTimeout, BuildTimeout time.Duration
	// BuildMemoryMB and BuildDiskMB are each step sandbox's memory limit
	// and disk size; 0 = sandbox.DefaultStep*.
	BuildMemoryMB, BuildDiskMB int
}

// Defaults of the build settings.
const (
	DefaultBuildStepTimeout = 30 * time.Minute
	DefaultBuildTimeout     = 2 * time.Hour
)

// DefaultBandwidthMbit is each sandbox's default bandwidth cap, each way.
const DefaultBandwidthMbit = 100

// DefaultConfig returns the embedded defaults.
func DefaultConfig() Config {
	return Config{
		Listen: "127.0.0.1:3000", DataDir: "/var/lib/agent-sandbox", BandwidthMbit: DefaultBandwidthMbit,
		WarmPools:        map[string]sandbox.PoolSize{template.BaseName: {Min: 2, Max: 8}},
		BuildStepTimeout: DefaultBuildStepTimeout, BuildTimeout: DefaultBuildTimeout,
		BuildMemoryMB: sandbox.DefaultStepMemoryMB, BuildDiskMB: sandbox.DefaultStepDiskMB,
	}
}

// DBPath is the SQLite database inside dataDir; the keys commands open it
// directly.
func DBPath(dataDir string) string { return filepath.Join(dataDir, "agent-sandbox.db") }

// Validate checks c and fills in derived values.
func (c *Config) Validate() error {
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("--listen %q: want host:port: %w", c.Listen, err)
	}
	if c.Domain == "" {
		c.Domain = deriveDomain(host, port)
	}
	if strings.Contains(c.Domain, "/") || strings.HasPrefix(c.Domain, ".") {
		return fmt.Errorf("--domain %q: want a host name with an optional :port, e.g. sandbox.example.com", c.Domain)
	}
	switch c.Userns {
	case "", "auto", "on", "off":
	default:
		return fmt.Errorf("--userns %q: want auto, on or off", c.Userns)
	}
	if c.BandwidthMbit < 0 {
		return fmt.Errorf("--bandwidth-mbit %g: want 0 (unlimited) or more", c.BandwidthMbit)
	}
	if c.MaxSandboxes < 0 {
		return fmt.Errorf("--max-sandboxes %d: want 0 (no cap) or more", c.MaxSandboxes)
	}
	if c.BuildStepTimeout < 0 || c.BuildTimeout < 0 {
		return fmt.Errorf("--build-step-timeout %s, --build-timeout %s: want 0 (no bound) or more", c.BuildStepTimeout, c.BuildTimeout)
	}
	if c.BuildMemoryMB < 0 || c.BuildDiskMB < 0 {
		return fmt.Errorf("--build-memory-mb %d, --build-disk-mb %d: want 0 (the default) or more", c.BuildMemoryMB, c.BuildDiskMB)
	}
	if c.DNSUpstream != "" {
		if _, err := netip.ParseAddrPort(c.DNSUpstream); err != nil {
			return fmt.Errorf("--dns-upstream %q: want ip:port, e.g. 192.0.2.53:53: %w", c.DNSUpstream, err)
		}
	}
	if !filepath.IsAbs(c.DataDir) {
		return fmt.Errorf("--data-dir %q must be an absolute path", c.DataDir)
	}
	if c.EnvdPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding envd next to the executable: %w", err)
		}
		c.EnvdPath = filepath.Join(filepath.Dir(exe), "envd")
	}
	if _, err := os.Stat(c.EnvdPath); err != nil {
		return fmt.Errorf("envd binary: %w (build it with `make build`, or pass --envd)", err)
	}
	if c.CodeInterpPath == "" {
		c.CodeInterpPath = filepath.Join(filepath.Dir(c.EnvdPath), "codeinterp")
	}
	if _, err := os.Stat(c.CodeInterpPath); err != nil {
		return fmt.Errorf("code interpreter binary: %w (build it with `make build`)", err)
	}
	builtIn := template.BuiltIn()
	for _, name := range c.Templates {
		if _, ok := builtIn[name]; !ok {
			return fmt.Errorf("--templates: %q is not a built-in template (%s)", name, strings.Join(slices.Sorted(maps.Keys(builtIn)), ", "))
		}
	}
	return nil
}

// deriveDomain makes the domain clients use from the listen address: a
// loopback or unspecified host becomes localhost, so <port>-<id>.localhost
// names resolve to this machine on resolvers that map *.localhost to
// loopback.
func deriveDomain(host, port string) string {
	ip := net.ParseIP(host)
	if host == "" || host == "localhost" || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified())) {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
