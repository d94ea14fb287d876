package server

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/api"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
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
	Version string   // of this build, reported to MCP clients at /mcp
	// Cluster makes the server a node of a cluster (docs/KUBERNETES.md).
	Cluster ClusterConfig
	// Backend is the isolation backend of new sandboxes: BackendAuto (the
	// default), BackendJail, BackendGvisor or BackendVM. Sandboxes keep
	// the backend that started them, which is recorded with each.
	Backend string
	// TemplateBackends names, by template name, the backend (jail, gvisor or vm)
	// that starts that template's sandboxes instead of Backend.
	TemplateBackends map[string]string
	// VMKernel is the unpacked guest kernel of vm sandboxes; "" =
	// kernel.DefaultDir, where scripts/install-deps.sh puts it.
	VMKernel string
	// VMInit is the guest init of vm sandboxes; "" = "vminit" next to
	// envd.
	VMInit string
	// JailInit is the init of jail sandboxes (cmd/jailinit); "" =
	// "jailinit" next to envd.
	JailInit string
	// GvisorInit is the helper of gvisor sandboxes (cmd/gvinit: their
	// init and launcher); "" = "gvinit" next to envd.
	GvisorInit string
	// VMColdBoot: every vm sandbox boots its kernel, none is restored
	// from a memory snapshot of its shape.
	VMColdBoot bool
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
	// included; 0 = no cap, MaxSandboxesAuto (the default) = derived from
	// the host's memory by Validate (AutoMaxSandboxes).
	MaxSandboxes int
	// AddressPool is the IPv4 prefix the sandboxes' veth links are carved
	// from, one /30 each (an operator whose network uses the default picks
	// another). A server restores leases only from veths within it.
	AddressPool netip.Prefix
	// DiskReserve is the free space creates leave on the file system of
	// DataDir/sandboxes, beyond the new sandbox's disk size.
	DiskReserve sandbox.DiskReserve
	// MaxTimeout is the longest timeout a create, connect or set-timeout
	// may ask for (beyond it: 400 naming the limit); 0 = no limit.
	// DefaultTimeout is the timeout of a create or connect that sends
	// none (what the v2 SDKs do).
	MaxTimeout     time.Duration
	DefaultTimeout time.Duration
	// PausedRetention is how long a sandbox stays paused before it is
	// killed; 0 = until it is killed or resumed.
	PausedRetention time.Duration
	// PauseInRAM is how long a paused sandbox stays frozen in RAM before
	// it is saved to disk with its memory and stopped, where its backend
	// can (the vm's); 0 = at once.
	PauseInRAM time.Duration
	// SnapshotBudget bounds the disk the snapshots (POST
	// /sandboxes/{id}/snapshots) take under DataDir/snapshots, in bytes;
	// 0 = no bound.
	SnapshotBudget uint64
	// VolumeSize is each new volume's capacity, in bytes; 0 =
	// DefaultVolumeSize.
	VolumeSize uint64
	// MaxBuildContext bounds an uploaded build context: its upload and
	// its tar uncompressed, in bytes.
	MaxBuildContext int64
	// NoNewPrivs sets no_new_privs in every sandbox: setuid programs
	// (sudo) no longer raise privileges (docs/SECURITY.md).
	NoNewPrivs bool
	// Registries are the hosts ("HOST" or "HOST:PORT") that fromImage
	// pulls may reach whatever they resolve to; any other private,
	// loopback, link-local or host address is refused (package fetch).
	Registries []string
	// MaxConnsPerSandbox caps each sandbox's entries in the host's
	// conntrack table (network.FirewallConfig.MaxConnsPerSandbox); 0 = no
	// cap.
	MaxConnsPerSandbox int

	// CPUCount, MemoryMB and DiskIO are each sandbox's resources where its
	// template does not set them; the Max fields bound what a template may
	// set (a template above one is refused, at build and at create).
	CPUCount, MaxCPUCount int
	MemoryMB, MaxMemoryMB int
	DiskIO, MaxDiskIO     isolation.DiskIO

	// Template builds run each step that runs a command in a sandbox of
	// its own (sandbox.Manager.RunStep). BuildEgressPolicy is a JSON file
	// holding the egress ceiling of those sandboxes (egress.Ceiling); "" =
	// the package registries only. The Debian mirror is allowed either way.
	BuildEgressPolicy string
	// BuildStepTimeout bounds each step and BuildTimeout each template's
	// build; 0 = no bound.
	BuildStepTimeout, BuildTimeout time.Duration
	// BuildReadyTimeout bounds a build's wait for its template's ready
	// command (template.Builder.ReadyTimeout); 0 = the default.
	BuildReadyTimeout time.Duration
	// BuildMemoryMB and BuildDiskMB are each step sandbox's memory limit
	// and disk size; 0 = sandbox.DefaultStep*.
	BuildMemoryMB, BuildDiskMB int
}

// Defaults of DefaultConfig.
const (
	// DefaultBandwidthMbit is each sandbox's default bandwidth cap, each way.
	DefaultBandwidthMbit = 100
	// DefaultMaxBuildContext bounds an uploaded build context.
	DefaultMaxBuildContext = api.DefaultMaxContextBytes
	// DefaultMaxConnsPerSandbox is each sandbox's default conntrack cap:
	// far more connections than a browser or a package manager keeps open
	// (closed TCP connections do not count), and 1/64 of a 262144-entry
	// table, the kernel's size on a host of 16 GiB or more.
	DefaultMaxConnsPerSandbox = 4096
)

// DefaultDiskReserve is the default Config.DiskReserve.
var DefaultDiskReserve = sandbox.DiskReserve{Percent: 5}

// Defaults of the pause and snapshot settings.
const (
	DefaultPauseInRAM     = 10 * time.Minute
	DefaultSnapshotBudget = 20 << 30
	DefaultVolumeSize     = 1 << 30
)

// Resource defaults and maxima of DefaultConfig; the CPU ones depend on
// the host (a sandbox cannot have more CPUs than nproc shows the server).
const (
	DefaultCPUCount    = 2
	DefaultMemoryMB    = 512
	DefaultMaxMemoryMB = 8192
)

// Default disk I/O quotas per sandbox, each way: the default leaves a
// neighbour's small fsync writes within 3× of their latency alone (see
// docs/PERFORMANCE.md); the maximum is 5× it.
var (
	DefaultDiskIO    = isolation.DiskIO{ReadBytesPerSec: 200 << 20, WriteBytesPerSec: 100 << 20, ReadIOPS: 4000, WriteIOPS: 2000}
	DefaultMaxDiskIO = isolation.DiskIO{ReadBytesPerSec: 1000 << 20, WriteBytesPerSec: 500 << 20, ReadIOPS: 20000, WriteIOPS: 10000}
)

// Defaults of the build settings.
const (
	DefaultBuildStepTimeout = 30 * time.Minute
	DefaultBuildTimeout     = 2 * time.Hour
)

// DefaultConfig returns the embedded defaults.
func DefaultConfig() Config {
	return Config{
		Listen: "127.0.0.1:3000", DataDir: "/var/lib/agent-sandbox", BandwidthMbit: DefaultBandwidthMbit,
		Backend:            BackendAuto,
		AddressPool:        network.DefaultPoolPrefix,
		WarmPools:          map[string]sandbox.PoolSize{template.BaseName: sandbox.GrowingPool(sandbox.DefaultPoolMembers)},
		MaxSandboxes:       MaxSandboxesAuto,
		DiskReserve:        DefaultDiskReserve,
		PausedRetention:    sandbox.DefaultPausedRetention,
		MaxTimeout:         sandbox.DefaultMaxTimeout,
		DefaultTimeout:     api.DefaultSandboxTimeout,
		PauseInRAM:         DefaultPauseInRAM,
		SnapshotBudget:     DefaultSnapshotBudget,
		VolumeSize:         DefaultVolumeSize,
		MaxBuildContext:    DefaultMaxBuildContext,
		MaxConnsPerSandbox: DefaultMaxConnsPerSandbox,
		CPUCount:           min(DefaultCPUCount, runtime.NumCPU()),
		MaxCPUCount:        runtime.NumCPU(),
		MemoryMB:           DefaultMemoryMB,
		MaxMemoryMB:        DefaultMaxMemoryMB,
		DiskIO:             DefaultDiskIO,
		MaxDiskIO:          DefaultMaxDiskIO,
		BuildStepTimeout:   DefaultBuildStepTimeout,
		BuildTimeout:       DefaultBuildTimeout,
		BuildReadyTimeout:  template.DefaultReadyTimeout,
		BuildMemoryMB:      sandbox.DefaultStepMemoryMB,
		BuildDiskMB:        sandbox.DefaultStepDiskMB,
	}
}

// MaxSandboxesAuto in Config.MaxSandboxes derives the cap from the host's
// memory.
const MaxSandboxesAuto = -1

// AutoMaxSandboxes is the sandbox cap of a host with memTotalMB of memory
// when each sandbox may use perSandboxMB: the memory less what the host
// keeps for itself (an eighth, at least 1 GiB), divided among sandboxes,
// and at least 1. Memory limits are then never overcommitted: every
// sandbox may fill its limit, and the OOM killer acts in a sandbox, not
// on the host.
func AutoMaxSandboxes(memTotalMB, perSandboxMB int) int {
	return max(1, (memTotalMB-max(memTotalMB/8, 1024))/perSandboxMB)
}

// HostMaxSandboxes is AutoMaxSandboxes for this host when each sandbox
// may use memoryMB.
func HostMaxSandboxes(memoryMB int) (int, error) {
	mem, err := hostMemoryMB("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return AutoMaxSandboxes(mem, memoryMB), nil
}

// hostMemoryMB reads MemTotal from a /proc/meminfo.
func hostMemoryMB(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading the host's memory: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.Atoi(f[0]); err == nil && kb > 0 {
					return kb >> 10, nil
				}
			}
			return 0, fmt.Errorf("%s: malformed MemTotal line %q", path, line)
		}
	}
	return 0, fmt.Errorf("%s has no MemTotal", path)
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
	if err := c.Cluster.validate(c.Listen); err != nil {
		return err
	}
	if c.Backend == "" {
		c.Backend = BackendAuto
	}
	if _, err := backendOrder(c.Backend, false); err != nil {
		return err
	}
	for tmpl, b := range c.TemplateBackends {
		if _, built := backendMakers[b]; !built {
			return fmt.Errorf("--template-backend %s=%s: want %s", tmpl, b, joinOr(slices.Sorted(maps.Keys(backendMakers))))
		}
	}
	switch c.Userns {
	case "", "auto", "on", "off":
	default:
		return fmt.Errorf("--userns %q: want auto, on or off", c.Userns)
	}
	if c.BandwidthMbit < 0 {
		return fmt.Errorf("--bandwidth-mbit %g: want 0 (unlimited) or more", c.BandwidthMbit)
	}
	if err := c.validateResources(); err != nil {
		return err
	}
	switch {
	case c.MaxSandboxes == MaxSandboxesAuto:
		n, err := HostMaxSandboxes(c.MemoryMB)
		if err != nil {
			return fmt.Errorf("--max-sandboxes auto: %w (give a number)", err)
		}
		c.MaxSandboxes = n
	case c.MaxSandboxes < 0:
		return fmt.Errorf("--max-sandboxes %d: want auto, 0 (no cap) or more", c.MaxSandboxes)
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = api.DefaultSandboxTimeout
	}
	if c.MaxTimeout < 0 {
		return fmt.Errorf("--max-timeout %s: want 0 (no limit) or more", c.MaxTimeout)
	}
	if c.DefaultTimeout < time.Second || c.DefaultTimeout%time.Second != 0 || (c.MaxTimeout > 0 && c.DefaultTimeout > c.MaxTimeout) {
		return fmt.Errorf("--default-timeout %s: want whole seconds, at least 1s and at most --max-timeout (%s)", c.DefaultTimeout, c.MaxTimeout)
	}
	if c.VolumeSize == 0 {
		c.VolumeSize = DefaultVolumeSize
	}
	if c.VolumeSize < 1<<20 || c.VolumeSize > 1<<44 {
		return fmt.Errorf("--volume-size %d: want from 1MiB to 16TiB", c.VolumeSize)
	}
	if c.PauseInRAM < 0 {
		return fmt.Errorf("--pause-in-ram %s: want 0 (to disk at once) or more", c.PauseInRAM)
	}
	if c.PausedRetention < 0 {
		return fmt.Errorf("--paused-retention %s: want 0 (until killed) or more", c.PausedRetention)
	}
	if c.MaxBuildContext < 0 {
		return fmt.Errorf("--max-build-context %d: want a size", c.MaxBuildContext)
	}
	if c.MaxConnsPerSandbox < 0 || c.MaxConnsPerSandbox > math.MaxUint32 {
		return fmt.Errorf("--max-conns-per-sandbox %d: want 0 (no cap) or more", c.MaxConnsPerSandbox)
	}
	if c.BuildStepTimeout < 0 || c.BuildTimeout < 0 {
		return fmt.Errorf("--build-step-timeout %s, --build-timeout %s: want 0 (no bound) or more", c.BuildStepTimeout, c.BuildTimeout)
	}
	if c.BuildReadyTimeout < 0 {
		return fmt.Errorf("--build-ready-timeout %s: want more than 0", c.BuildReadyTimeout)
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
	if c.JailInit == "" {
		c.JailInit = filepath.Join(filepath.Dir(c.EnvdPath), "jailinit")
	}
	if _, err := os.Stat(c.JailInit); err != nil {
		return fmt.Errorf("jail init binary: %w (build it with `make build`)", err)
	}
	if c.VMInit == "" {
		c.VMInit = filepath.Join(filepath.Dir(c.EnvdPath), "vminit")
	}
	if c.GvisorInit == "" {
		c.GvisorInit = filepath.Join(filepath.Dir(c.EnvdPath), "gvinit")
	}
	if c.VMKernel != "" && !filepath.IsAbs(c.VMKernel) {
		return fmt.Errorf("--vm-kernel %q must be an absolute path", c.VMKernel)
	}
	builtIn := template.BuiltIn()
	for _, name := range c.Templates {
		if _, ok := builtIn[name]; !ok {
			return fmt.Errorf("--templates: %q is not a built-in template (%s)", name, strings.Join(slices.Sorted(maps.Keys(builtIn)), ", "))
		}
	}
	return nil
}

// validateResources checks that every default is positive and within its
// maximum (a zero maximum is none).
func (c *Config) validateResources() error {
	for _, r := range []struct {
		flag     string
		def, max int
	}{{"cpu-count", c.CPUCount, c.MaxCPUCount}, {"memory-mb", c.MemoryMB, c.MaxMemoryMB}} {
		switch {
		case r.def < 1:
			return fmt.Errorf("--%s %d: want 1 or more", r.flag, r.def)
		case r.max < 0:
			return fmt.Errorf("--max-%s %d: want 0 (no maximum) or more", r.flag, r.max)
		case r.max > 0 && r.def > r.max:
			return fmt.Errorf("--%s %d is more than --max-%s %d", r.flag, r.def, r.flag, r.max)
		}
	}
	d, m := c.DiskIO, c.MaxDiskIO
	for _, pair := range [][2]uint64{
		{d.ReadBytesPerSec, m.ReadBytesPerSec}, {d.WriteBytesPerSec, m.WriteBytesPerSec},
		{d.ReadIOPS, m.ReadIOPS}, {d.WriteIOPS, m.WriteIOPS},
	} {
		if pair[1] != 0 && (pair[0] == 0 || pair[0] > pair[1]) {
			return fmt.Errorf("--disk-io %s is not within --max-disk-io %s: a key with a maximum needs a default of at most it",
				sandbox.FormatDiskIO(d), sandbox.FormatDiskIO(m))
		}
	}
	return nil
}

// maxima is what the manager and the template API bound templates with.
func (c *Config) maxima() sandbox.Maxima {
	return sandbox.Maxima{CPUCount: c.MaxCPUCount, MemoryMB: c.MaxMemoryMB, DiskIO: c.MaxDiskIO}
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

// ParseTemplateBackends parses --template-backend: TEMPLATE=BACKEND pairs
// separated by commas; "" or "none" for none.
func ParseTemplateBackends(s string) (map[string]string, error) {
	out := map[string]string{}
	if s = strings.TrimSpace(s); s == "" || s == "none" {
		return out, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		name, backend, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || backend == "" {
			return nil, fmt.Errorf("--template-backend %q: want TEMPLATE=BACKEND, e.g. code-interpreter-v1=vm", item)
		}
		if _, built := backendMakers[backend]; !built {
			return nil, fmt.Errorf("--template-backend %q: backend %q: want %s", item, backend, joinOr(slices.Sorted(maps.Keys(backendMakers))))
		}
		out[name] = backend
	}
	return out, nil
}
