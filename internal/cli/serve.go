package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/pprofserve"

	"github.com/agent-sandbox/agent-sandbox/internal/bytesize"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/control"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/server"
)

// diskIOFlag defines a disk I/O quota flag (sandbox.ParseDiskIO) whose
// default is *d.
func diskIOFlag(fs *flag.FlagSet, d *isolation.DiskIO, name, usage string) {
	fs.Func(name, usage+" (default "+sandbox.FormatDiskIO(*d)+")", func(s string) (err error) {
		*d, err = sandbox.ParseDiskIO(s)
		return err
	})
}

var serveCommand = &command{
	name:    "serve",
	summary: "run the server (API, sandbox router, sandboxes); needs root",
	detail: `Run the server: the E2B-compatible control plane (REST API) and the router
for sandbox traffic, on one listener. On first start it builds the base
template (a few minutes; progress is shown) and creates an API key, then
prints the environment variables that point the E2B SDKs at it. GET /health
answers 204 once sandboxes can be created. The other built-in templates
(code-interpreter-v1, desktop, browser) are built in the background, on
first use or as --templates says: until one is built, its creates are
answered 503 with the build's progress and Retry-After.

Sandbox traffic is routed by host (<port>-<sandboxID>.<domain>) or by the
E2b-Sandbox-Id and E2b-Sandbox-Port headers (with E2B_SANDBOX_URL).
Sandboxes keep running when the server stops and are adopted when it starts
again. Needs root: sandboxes use namespaces, cgroups and mounts.

Environment:
  AGENT_SANDBOX_API_KEY   an API key to accept, like --api-key`,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		cfg := server.DefaultConfig()
		fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "`ADDR` to listen on (API and sandbox traffic)")
		fs.StringVar(&cfg.Domain, "domain", "", "`DOMAIN` the SDKs use (E2B_DOMAIN); default: from --listen, e.g. localhost:3000")
		fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "`DIR` for the database, templates, sandboxes and TLS files")
		fs.StringVar(&cfg.Backend, "backend", cfg.Backend, "isolation `BACKEND` of new sandboxes: jail (namespaces), gvisor (runsc: a user-space kernel between the sandbox and the host's; no sudo, no snapshots yet), vm (a microVM each: QEMU, KVM where usable, else emulation) or auto (vm where KVM is usable, else jail); each sandbox keeps the backend that started it")
		fs.Func("template-backend", "`PAIRS` like code-interpreter-v1=vm,base=jail: the backend that starts a template's sandboxes instead of --backend's", func(s string) (err error) {
			cfg.TemplateBackends, err = server.ParseTemplateBackends(s)
			return err
		})
		apiKey := fs.String("api-key", "", "an API `KEY` to accept (e2b_ + 40 hex digits), for automation")
		fs.BoolVar(&cfg.TLS, "tls", false, "serve HTTPS with a certificate for DOMAIN and *.DOMAIN from a CA in DIR/tls")
		fs.StringVar(&cfg.EnvdPath, "envd", "", "envd `BINARY` mounted into sandboxes; default: envd next to this executable")
		fs.StringVar(&cfg.VMKernel, "vm-kernel", "", "`DIR` of the unpacked guest kernel of vm sandboxes; default /var/lib/agent-sandbox/kernels/current (scripts/install-deps.sh --vm)")
		fs.BoolVar(&cfg.VMColdBoot, "vm-cold-boot", false, "boot every vm sandbox's kernel; by default a sandbox is restored from a memory snapshot of a VM of its shape (template, CPUs, memory, disk), made when the first of that shape boots")
		fs.StringVar(&cfg.VMInit, "vm-init", "", "guest init `BINARY` of vm sandboxes; default: vminit next to envd")
		fs.StringVar(&cfg.Mirror, "mirror", "", "Debian mirror `URL` templates are built from; default http://deb.debian.org/debian")
		fs.StringVar(&cfg.EgressPolicy, "egress-policy", "", "JSON `FILE` with the egress ceiling for every sandbox (see docs/NETWORK.md); default: deny all but package registries")
		fs.StringVar(&cfg.DNSUpstream, "dns-upstream", "", "`IP:PORT` of the resolver for names sandboxes may use; default: first nameserver in /etc/resolv.conf")
		fs.Float64Var(&cfg.BandwidthMbit, "bandwidth-mbit", cfg.BandwidthMbit, "each sandbox's bandwidth cap each way, in `MBIT`/s: the default and the most a create may ask for; 0 = unlimited")
		fs.Func("warm-pool", "sandboxes kept booted per template, `POOLS` like base=3,code-interpreter-v1=1:4 (N or N:MAX; grows toward MAX, default 4N, under demand); none to disable (default "+sandbox.FormatWarmPools(cfg.WarmPools)+")", func(s string) (err error) {
			cfg.WarmPools, err = sandbox.ParseWarmPools(s)
			return err
		})
		fs.Func("address-pool", "IPv4 `CIDR` the sandboxes' addresses come from, a /30 each (default "+cfg.AddressPool.String()+"); pick one your network does not use", func(s string) (err error) {
			cfg.AddressPool, err = netip.ParsePrefix(s)
			return err
		})
		fs.Var(funcValue{set: func(v string) error { return parseMaxSandboxes(v, &cfg.MaxSandboxes) }, get: func() string { return formatMaxSandboxes(cfg.MaxSandboxes) }},
			"max-sandboxes", "most sandboxes running at once, warm pool members included: `N`, 0 for no cap, or auto: the host's memory less an eighth (at least 1GiB) kept for the host, over the --memory-mb each sandbox may use"+hostMaxSandboxes(cfg.MemoryMB))
		fs.Var(funcValue{set: func(v string) (err error) { cfg.DiskReserve, err = sandbox.ParseDiskReserve(v); return err }, get: cfg.DiskReserve.String},
			"disk-reserve", "free disk kept under DIR/sandboxes: a create is refused (507) while less than this plus the sandbox's disk size is free; `SIZE` like 4GiB, or a percentage of the file system like 5%")
		fs.Var(funcValue{set: func(v string) (err error) { cfg.MaxTimeout, err = parseLongDuration(v); return err }, get: func() string { return formatLongDuration(cfg.MaxTimeout) }},
			"max-timeout", "longest sandbox lifetime a create, connect or setTimeout may ask for: `DURATION` like 1h, 72h or 30d; 0 = no limit (a request beyond it is answered 400 naming the limit; keys create --max-timeout sets one per API key, and the tighter applies)")
		fs.Var(funcValue{set: func(v string) (err error) { cfg.DefaultTimeout, err = parseLongDuration(v); return err }, get: func() string { return formatLongDuration(cfg.DefaultTimeout) }},
			"default-timeout", "lifetime of a sandbox whose create (or connect) names none, as the v2 SDKs do: `DURATION` in whole seconds, at most --max-timeout")
		fs.Var(funcValue{set: func(v string) (err error) { cfg.PausedRetention, err = parseLongDuration(v); return err }, get: func() string { return formatLongDuration(cfg.PausedRetention) }},
			"paused-retention", "how long a sandbox stays paused before it is killed, the reason recorded: `DURATION` like 30d or 12h; 0 = until killed")
		fs.DurationVar(&cfg.PauseInRAM, "pause-in-ram", cfg.PauseInRAM, "how long a paused sandbox stays frozen in memory before it is saved to disk with its memory and stopped, where its backend can (vm): `DURATION`; 0 = at once")
		fs.Var(funcValue{set: func(v string) (err error) { cfg.SnapshotBudget, err = bytesize.Parse(v); return err }, get: func() string { return bytesize.Format(cfg.SnapshotBudget) }},
			"snapshot-budget", "most disk the snapshots may take under DIR/snapshots, `SIZE` like 20GiB; a snapshot beyond is refused (507); 0 = no bound")
		fs.Var(funcValue{set: func(v string) (err error) { cfg.VolumeSize, err = bytesize.Parse(v); return err }, get: func() string { return bytesize.Format(cfg.VolumeSize) }},
			"volume-size", "capacity of each new volume, `SIZE` like 1GiB: a write beyond fails (no space left)")
		fs.Var(funcValue{set: func(v string) error {
			n, err := bytesize.Parse(v)
			if err == nil && (n == 0 || n > math.MaxInt64) {
				err = fmt.Errorf("build context limit %q: want a size above 0", v)
			}
			cfg.MaxBuildContext = int64(n)
			return err
		}, get: func() string { return bytesize.Format(uint64(cfg.MaxBuildContext)) }},
			"max-build-context", "most bytes an uploaded template build context may hold, both uploaded and as a tar uncompressed (a gzip bomb is refused with 413): `SIZE`")
		fs.BoolVar(&cfg.NoNewPrivs, "no-new-privs", false, "set no_new_privs in every sandbox: setuid programs such as sudo stop raising privileges, so templates' passwordless sudo no longer works (see docs/SECURITY.md)")
		fs.IntVar(&cfg.MaxConnsPerSandbox, "max-conns-per-sandbox", cfg.MaxConnsPerSandbox, "most `N` entries each sandbox may hold in the host's conntrack table (its connections out and to the DNS filter and proxy); new ones beyond are dropped; 0 = no cap")
		fs.IntVar(&cfg.CPUCount, "cpu-count", cfg.CPUCount, "`CPUS` of each sandbox whose template sets no cpuCount (what nproc shows in it)")
		fs.IntVar(&cfg.MaxCPUCount, "max-cpu-count", cfg.MaxCPUCount, "most `CPUS` a template may give its sandboxes, by default this host's count; a template asking for more is refused; 0 = no maximum")
		fs.IntVar(&cfg.MemoryMB, "memory-mb", cfg.MemoryMB, "memory in `MIB` of each sandbox whose template sets no memoryMB")
		fs.IntVar(&cfg.MaxMemoryMB, "max-memory-mb", cfg.MaxMemoryMB, "most memory in `MIB` a template may give its sandboxes; a template asking for more is refused; 0 = no maximum")
		diskIOFlag(fs, &cfg.DiskIO, "disk-io", "each sandbox's disk I/O cap where its template sets none, `CAPS` like read=200,write=100,read-iops=4000,write-iops=2000 (MiB/s and I/O per second; a key left out is uncapped; none)")
		diskIOFlag(fs, &cfg.MaxDiskIO, "max-disk-io", "most disk I/O a template may give its sandboxes, `CAPS` as for --disk-io; none = no maximum")
		addBuildFlags(fs, &cfg)
		fs.StringVar(&cfg.Userns, "userns", "auto", "run sandboxes in user namespaces, root mapped to an unprivileged host uid range: `MODE` auto (where the host allows; else without, with a warning), on or off")
		var registries []string
		fs.Func("registry", "`HOST[:PORT]` of a registry fromImage may pull from although it resolves to a loopback, private, link-local or this host's address (refused otherwise); repeat for more; without PORT any port; default none", func(s string) error {
			registries = append(registries, s)
			return nil
		})
		var templates list
		fs.Var(&templates, "templates", "built-in `TEMPLATES` to build in the background once the server is up, besides base (comma-separated: code-interpreter-v1, desktop, browser); the others are built on first use")
		addClusterFlags(fs, &cfg.Cluster)
		debug := fs.Bool("debug", false, "log at debug level")
		pprofAddr := fs.String("pprof", "", "serve Go's runtime profiles (net/http/pprof: CPU, heap, goroutines) at http://`IP:PORT`/debug/pprof/, a loopback address only, e.g. 127.0.0.1:6060; default: off")
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q", args[0])
			}
			if *pprofAddr != "" {
				if err := pprofserve.CheckAddr(*pprofAddr); err != nil {
					return err
				}
			}
			cfg.Templates = templates
			cfg.Registries = registries
			if *apiKey == "" {
				*apiKey = os.Getenv("AGENT_SANDBOX_API_KEY")
			}
			if *apiKey != "" {
				cfg.APIKeys = []string{*apiKey}
			}
			apiRole := cfg.Cluster.Role == server.RoleAPI
			if os.Geteuid() != 0 && !apiRole {
				return errors.New("needs root: sandboxes use namespaces, cgroups and mounts (run it with sudo)")
			}
			level := slog.LevelInfo
			if *debug {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(std.stderr, &slog.HandlerOptions{Level: level}))
			if *pprofAddr != "" {
				if err := pprofserve.Start(ctx, *pprofAddr, log); err != nil {
					return err
				}
			}
			cfg.Version = version
			if apiRole {
				return server.RunAPI(ctx, cfg, log, std.stdout)
			}
			srv, err := server.New(ctx, cfg, log, std.stderr)
			if err != nil {
				return err
			}
			return srv.Run(ctx, std.stdout)
		}
	},
}

// parseMaxSandboxes reads --max-sandboxes: auto or a count.
func parseMaxSandboxes(v string, dst *int) error {
	if v == "auto" {
		*dst = server.MaxSandboxesAuto
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("%q: want auto, 0 (no cap) or a count", v)
	}
	*dst = n
	return nil
}

func formatMaxSandboxes(n int) string {
	if n == server.MaxSandboxesAuto {
		return "auto"
	}
	return strconv.Itoa(n)
}

// hostMaxSandboxes says what auto is on this host, for --help.
func hostMaxSandboxes(memoryMB int) string {
	n, err := server.HostMaxSandboxes(memoryMB)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (%d on this host)", n)
}

// parseLongDuration reads a duration in whole days ("30d") or as Go writes
// durations ("12h", "90m").
func parseLongDuration(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q: want a count of days such as 30d, or a duration such as 12h", v)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q: want a count of days such as 30d, or a duration such as 12h", v)
	}
	return d, nil
}

// formatLongDuration is the inverse of parseLongDuration.
func formatLongDuration(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// addClusterFlags defines the flags of cluster mode; their defaults come
// from the environment a DaemonSet's pod sets (deploy/kubernetes).
func addClusterFlags(fs *flag.FlagSet, c *server.ClusterConfig) {
	fs.StringVar(&c.Mode, "cluster", "", "join a cluster: `MODE` kubernetes; as a node, keeps this host's Lease renewed, publishes it as a SandboxNode and runs the Sandboxes placed on it (docs/KUBERNETES.md); default: a host on its own")
	fs.StringVar(&c.Role, "role", server.RoleNode, "`ROLE` in the cluster: node (runs sandboxes; needs root) or api (an API replica: the E2B API over the cluster's Sandbox objects, placing each on a node, and their traffic forwarded to it, which routes it by the same --domain; no root, no data; needs --api-key)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig `FILE` to reach the API server with in cluster mode; default: the pod's service account")
	fs.StringVar(&c.Namespace, "cluster-namespace", cmp.Or(os.Getenv("POD_NAMESPACE"), "agent-sandbox"), "`NAMESPACE` of the cluster's objects (Leases, SandboxNodes, Sandboxes) in cluster mode")
	host, _ := os.Hostname()
	fs.StringVar(&c.NodeName, "node-name", cmp.Or(os.Getenv("NODE_NAME"), host), "`NAME` of this node in cluster mode: its Lease's and SandboxNode's")
	fs.DurationVar(&c.Retention, "ended-retention", control.DefaultRetention, "how long the leading API replica keeps a Sandbox object that ended (Killed, Lost, Error: get says why) before it deletes it, as a `DURATION`, in cluster mode with --role api")
	fs.StringVar(&c.NodeAddress, "node-address", "", "`HOST:PORT` API replicas reach this node's sandboxes at, in cluster mode; default: --listen")
	fs.Float64Var(&c.APIQPS, "kube-api-qps", 200, "most requests per second, a `RATE`, to the API server in cluster mode (a create is several writes); negative: no bound but the API server's priority and fairness")
	fs.IntVar(&c.APIBurst, "kube-api-burst", 400, "most requests, a `COUNT`, to the API server at once above --kube-api-qps in cluster mode")
}

// addBuildFlags defines the flags of template builds, which run each step
// in a sandbox, on cfg.
func addBuildFlags(fs *flag.FlagSet, cfg *server.Config) {
	fs.StringVar(&cfg.BuildEgressPolicy, "build-egress-policy", "", "JSON `FILE` with the egress ceiling of template build steps, as for --egress-policy; default: the package registries (the --mirror is always allowed)")
	fs.DurationVar(&cfg.BuildStepTimeout, "build-step-timeout", cfg.BuildStepTimeout, "longest a template build step (RUN, package install) may run, as a `DURATION`; 0 = no bound")
	fs.DurationVar(&cfg.BuildTimeout, "build-timeout", cfg.BuildTimeout, "longest one template's build may take, as a `DURATION`; 0 = no bound")
	fs.DurationVar(&cfg.BuildReadyTimeout, "build-ready-timeout", cfg.BuildReadyTimeout, "longest a build waits for its template's ready command (the Template SDK's setReadyCmd, waitFor*) to succeed, as a `DURATION`")
	fs.IntVar(&cfg.BuildMemoryMB, "build-memory-mb", cfg.BuildMemoryMB, "memory limit of each template build step's sandbox, in `MB`")
	fs.IntVar(&cfg.BuildDiskMB, "build-disk-mb", cfg.BuildDiskMB, "disk size of each template build step's sandbox, in `MB`: the most one step may write")
}
