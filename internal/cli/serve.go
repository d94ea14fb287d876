package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/server"
)

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
		addBuildFlags(fs, &cfg)
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

// addBuildFlags defines the flags of template builds, which run each step
// in a sandbox, on cfg.
func addBuildFlags(fs *flag.FlagSet, cfg *server.Config) {
	fs.StringVar(&cfg.BuildEgressPolicy, "build-egress-policy", "", "JSON `FILE` with the egress ceiling of template build steps, as for --egress-policy; default: the package registries (the --mirror is always allowed)")
	fs.DurationVar(&cfg.BuildStepTimeout, "build-step-timeout", cfg.BuildStepTimeout, "longest a template build step (RUN, package install) may run, as a `DURATION`; 0 = no bound")
	fs.DurationVar(&cfg.BuildTimeout, "build-timeout", cfg.BuildTimeout, "longest one template's build may take, as a `DURATION`; 0 = no bound")
	fs.IntVar(&cfg.BuildMemoryMB, "build-memory-mb", cfg.BuildMemoryMB, "memory limit of each template build step's sandbox, in `MB`")
	fs.IntVar(&cfg.BuildDiskMB, "build-disk-mb", cfg.BuildDiskMB, "disk size of each template build step's sandbox, in `MB`: the most one step may write")
}
