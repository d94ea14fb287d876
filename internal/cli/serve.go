package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

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
answers 204 once sandboxes can be created.

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
		apiKey := fs.String("api-key", "", "an API `KEY` to accept (e2b_ + 40 hex digits), for automation")
		fs.BoolVar(&cfg.TLS, "tls", false, "serve HTTPS with a certificate for DOMAIN and *.DOMAIN from a CA in DIR/tls")
		fs.StringVar(&cfg.EnvdPath, "envd", "", "envd `BINARY` mounted into sandboxes; default: envd next to this executable")
		fs.StringVar(&cfg.Mirror, "mirror", "", "Debian mirror `URL` templates are built from; default http://deb.debian.org/debian")
		fs.StringVar(&cfg.EgressPolicy, "egress-policy", "", "JSON `FILE` with the egress ceiling for every sandbox (see docs/NETWORK.md); default: deny all but package registries")
		fs.StringVar(&cfg.DNSUpstream, "dns-upstream", "", "`IP:PORT` of the resolver for names sandboxes may use; default: first nameserver in /etc/resolv.conf")
		fs.Float64Var(&cfg.BandwidthMbit, "bandwidth-mbit", cfg.BandwidthMbit, "each sandbox's bandwidth cap each way, in `MBIT`/s: the default and the most a create may ask for; 0 = unlimited")
		fs.Func("warm-pool", "sandboxes kept booted per template, `POOLS` like base=2,code-interpreter-v1=1:4 (N or N:MAX; grows toward MAX, default 4N, under demand); none to disable (default "+sandbox.FormatWarmPools(cfg.WarmPools)+")", func(s string) (err error) {
			cfg.WarmPools, err = sandbox.ParseWarmPools(s)
			return err
		})
		fs.IntVar(&cfg.MaxSandboxes, "max-sandboxes", 0, "most sandboxes running at once, warm pool members included; 0 = no cap")
		fs.IntVar(&cfg.CPUCount, "cpu-count", cfg.CPUCount, "`CPUS` of each sandbox whose template sets no cpuCount (what nproc shows in it)")
		fs.IntVar(&cfg.MaxCPUCount, "max-cpu-count", cfg.MaxCPUCount, "most `CPUS` a template may give its sandboxes, by default this host's count; a template asking for more is refused; 0 = no maximum")
		fs.IntVar(&cfg.MemoryMB, "memory-mb", cfg.MemoryMB, "memory in `MIB` of each sandbox whose template sets no memoryMB")
		fs.IntVar(&cfg.MaxMemoryMB, "max-memory-mb", cfg.MaxMemoryMB, "most memory in `MIB` a template may give its sandboxes; a template asking for more is refused; 0 = no maximum")
		diskIOFlag(fs, &cfg.DiskIO, "disk-io", "each sandbox's disk I/O cap where its template sets none, `CAPS` like read=200,write=100,read-iops=4000,write-iops=2000 (MiB/s and I/O per second; a key left out is uncapped; none)")
		diskIOFlag(fs, &cfg.MaxDiskIO, "max-disk-io", "most disk I/O a template may give its sandboxes, `CAPS` as for --disk-io; none = no maximum")
		fs.StringVar(&cfg.Userns, "userns", "auto", "run sandboxes in user namespaces, root mapped to an unprivileged host uid range: `MODE` auto (where the host allows; else without, with a warning), on or off")
		var templates list
		fs.Var(&templates, "templates", "built-in `TEMPLATES` to build before serving, besides base (comma-separated: code-interpreter-v1, desktop, browser)")
		debug := fs.Bool("debug", false, "log at debug level")
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q", args[0])
			}
			cfg.Templates = templates
			if *apiKey == "" {
				*apiKey = os.Getenv("AGENT_SANDBOX_API_KEY")
			}
			if *apiKey != "" {
				cfg.APIKeys = []string{*apiKey}
			}
			if os.Geteuid() != 0 {
				return errors.New("needs root: sandboxes use namespaces, cgroups and mounts (run it with sudo)")
			}
			level := slog.LevelInfo
			if *debug {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(std.stderr, &slog.HandlerOptions{Level: level}))
			srv, err := server.New(ctx, cfg, log, std.stderr)
			if err != nil {
				return err
			}
			return srv.Run(ctx, std.stdout)
		}
	},
}
