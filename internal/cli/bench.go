package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/pprofserve"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"

	"github.com/agent-sandbox/agent-sandbox/bench"
)

var benchCommand = &command{
	name:    "bench",
	summary: "measure create latency, throughput, round trips, transfers and density; needs root",
	detail: `Measure this host: create→ready as an SDK sees it (the create call, then
the first commands.run('true')) serially with the warm pool and without,
creates per second at concurrency 10 and 50, the round trip of
commands.run('true') through the router, 1 MiB and 100 MiB uploads and
downloads, kill latency, and the host memory of idle sandboxes; then the
same kinds of figure for the vm backend (create from a memory snapshot,
from the warm pool and by a cold boot, the round trip, the host memory of
idle VMs), each shown against the jail's; and on browser sandboxes the
browser action API (the DevTools attach of a sandbox's first action, the
click round trip, the screenshot), each against the command round trip or
the click of the same run; and, where the run is given a cluster, the
cluster's create→ready through an API replica with warm pools on the
nodes and without, and creates per second at concurrency 50 across them,
each against the single host's (only make bench-cluster gives it one: a
kube-apiserver and node agents on stand-in hosts; here those figures are
listed as not measured). Baselines are measured in the same run: the bare
isolation floor (fork, the jail's namespaces, exec of /bin/true), bwrap
and runsc where installed, the host running bash -l -c true, and a
loopback HTTP transfer; each figure is shown as a ratio to its baseline,
with the target it is held to; a target computed from a baseline that was
not measured (bwrap not installed, a group left out by --only) is printed
as not judged.

By default it starts its own server from this binary, twice (with
--warm-pool, then with none), on a free loopback port with its own data
dir; a first run there builds the template. The vm figures start three
more, with --backend vm, on a data dir of their own (--vm-data-dir, seeded
with hard links to the template of --data-dir). With --server it measures
that server as it is configured, without the vm figures. Figures are
noisy when other work shares the host. The table goes to stdout, progress
to stderr.`,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		var opts bench.Options
		fs.StringVar(&opts.ServerURL, "server", "", "measure the server at `URL` instead of starting one")
		fs.StringVar(&opts.APIKey, "api-key", os.Getenv("E2B_API_KEY"), "API `KEY` for --server (default $E2B_API_KEY)")
		fs.StringVar(&opts.Binary, "binary", "", "agent-sandbox `BINARY` to start servers from (default: this one)")
		fs.StringVar(&opts.DataDir, "data-dir", "/var/lib/agent-sandbox-bench", "data `DIR` of the servers it starts")
		fs.StringVar(&opts.VMDataDir, "vm-data-dir", "", "data `DIR` of the vm servers it starts (default: --data-dir with -vm appended)")
		fs.StringVar(&opts.GvisorDataDir, "gvisor-data-dir", "", "data `DIR` of the gvisor servers it starts (default: --data-dir with -gvisor appended)")
		fs.StringVar(&opts.Listen, "listen", "", "`ADDR` of the servers it starts (default: a free loopback port)")
		fs.BoolVar(&opts.WaitHost, "wait-host", false, "when another server or a networking test holds the host's sandbox networking, wait for it before each server start instead of failing")
		fs.StringVar(&opts.Template, "template", "base", "`TEMPLATE` to create sandboxes from")
		fs.StringVar(&opts.Pool, "warm-pool", "", "`POOLS` of the pooled server, as serve's --warm-pool (default TEMPLATE="+strconv.Itoa(sandbox.DefaultPoolMembers)+", the server's default size)")
		fs.BoolVar(&opts.Quick, "quick", false, "smoke mode: a few samples of every figure, well under a minute")
		fs.IntVar(&opts.Samples, "samples", 0, "`N` serial samples per latency figure (default 50; --quick 3)")
		fs.IntVar(&opts.VMSamples, "vm-samples", 0, "`N` serial samples per vm create figure (default 20; --quick 2)")
		fs.IntVar(&opts.VMMaxIdle, "vm-max-idle", 0, "most idle VMs, `N`, the vm memory figure starts, within --memory-budget (default 10; --quick 2)")
		fs.DurationVar(&opts.Gap, "gap", 0, "pause, a `DURATION`, between serial pooled creates, so the pool refills (default 500ms)")
		budget := fs.Int64("memory-budget", 0, "host memory in `MIB` the density figure may fill (default 2048; --quick 256)")
		fs.IntVar(&opts.MaxIdle, "max-idle", 0, "most idle sandboxes, `N`, the density figure starts (default 1000; --quick 10)")
		fs.Func("only", "measure only these figure `GROUPS`, comma-separated: "+strings.Join(bench.Groups, ", ")+" (default all)", func(s string) error {
			opts.Only = strings.Split(s, ",")
			return nil
		})
		fs.Func("server-pprof", "start the servers it starts with --pprof `IP:PORT` (loopback), one after another on that address, to take Go profiles of a group while it runs (go tool pprof http://IP:PORT/debug/pprof/profile?seconds=N)", func(addr string) error {
			if err := pprofserve.CheckAddr(addr); err != nil {
				return err
			}
			opts.ServeArgs = append(opts.ServeArgs, "--pprof", addr)
			return nil
		})
		jsonOut := fs.String("json", "", "also write the report as JSON to `FILE` (- for stdout, the table then goes to stderr)")
		htmlOut := fs.String("html", "", "also write an HTML report with latency histograms to `FILE`")
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q", args[0])
			}
			if opts.ServerURL == "" && os.Geteuid() != 0 {
				return fmt.Errorf("needs root to start its own server and the namespace baselines (or pass --server)")
			}
			opts.MemoryBudget = *budget << 20
			opts.Progress = std.stderr
			r, err := bench.Run(ctx, opts)
			if err != nil {
				return err
			}
			table := std.stdout
			if *jsonOut == "-" {
				table = std.stderr
				if err := r.WriteJSON(std.stdout); err != nil {
					return err
				}
			} else if *jsonOut != "" {
				if err := writeFile(*jsonOut, r.WriteJSON); err != nil {
					return err
				}
			}
			if *htmlOut != "" {
				if err := writeFile(*htmlOut, r.WriteHTML); err != nil {
					return err
				}
			}
			return r.WriteTable(table)
		}
	},
}

// writeFile creates path and fills it with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
