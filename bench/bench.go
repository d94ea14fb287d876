package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// Options configures a run. Zero fields take the defaults in setDefaults.
type Options struct {
	// ServerURL and APIKey name a running server to measure; empty: the
	// run starts its own from Binary, twice (with and without the pool).
	ServerURL, APIKey string
	Binary            string   // agent-sandbox to start; default: this executable
	DataDir           string   // the own servers' data dir; default /var/lib/agent-sandbox-bench
	VMDataDir         string   // the vm figures' servers' data dir; default DataDir-vm, seeded from DataDir's template
	GvisorDataDir     string   // the gvisor figures' servers' data dir; default DataDir-gvisor, likewise
	Listen            string   // the own servers' address; default a free loopback port
	ServeArgs         []string // further flags for serve
	StartTimeout      time.Duration
	// WaitHost: a server that finds the host's sandbox networking in use
	// (another server, a networking test) waits for it instead of failing.
	WaitHost bool
	Template string // default base
	Pool     string // --warm-pool of the pooled server; default TEMPLATE=2
	Quick    bool   // smoke mode: a few samples of every figure
	// Only names the groups of figures to measure (Groups); empty: all.
	Only []string
	// Cluster starts the cluster of the "cluster" figures; nil: they are
	// not measured.
	Cluster ClusterStart

	Samples       int           // serial samples per latency figure (default 50, quick 3)
	VMSamples     int           // the same for the vm figures (default 20, quick 2)
	VMMaxIdle     int           // most idle VMs the vm density figure starts (default 10, quick 2)
	Gap           time.Duration // pause between pooled serial creates so the pool refills
	MemoryBudget  int64         // host memory the density figure may fill (default 2 GiB)
	MaxIdle       int           // most idle sandboxes the density figure starts (default 1000)
	Progress      io.Writer     // progress lines; nil: none
	now           func() time.Time
	progressStart time.Time
}

// Groups are the groups of figures a run measures, for Options.Only.
var Groups = []string{"baselines", "pooled", "cold", "neighbours", "disk", "lifecycle", "browser", "vm", "gvisor", "cluster"}

// runs reports whether the run measures group.
func (o *Options) runs(group string) bool { return len(o.Only) == 0 || slices.Contains(o.Only, group) }

func (o *Options) setDefaults() error {
	for _, g := range o.Only {
		if !slices.Contains(Groups, g) {
			return fmt.Errorf("figure group %q: want one of %s", g, strings.Join(Groups, ", "))
		}
	}
	if o.Binary == "" && o.ServerURL == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding the agent-sandbox binary: %w", err)
		}
		o.Binary = exe
	}
	if o.DataDir == "" {
		o.DataDir = "/var/lib/agent-sandbox-bench"
	}
	if o.VMDataDir == "" {
		o.VMDataDir = o.DataDir + "-vm"
	}
	if o.GvisorDataDir == "" {
		o.GvisorDataDir = o.DataDir + "-gvisor"
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 15 * time.Minute // a first start builds the template
	}
	if o.Template == "" {
		o.Template = client.DefaultTemplate
	}
	if o.Pool == "" {
		o.Pool = fmt.Sprintf("%s=%d", o.Template, sandbox.DefaultPoolMembers)
	}
	if o.Samples <= 0 {
		o.Samples = 50
		if o.Quick {
			o.Samples = 3
		}
	}
	if o.VMSamples <= 0 {
		o.VMSamples = o.scale(20, 2)
	}
	if o.VMMaxIdle <= 0 {
		o.VMMaxIdle = o.scale(10, 2)
	}
	if o.Gap <= 0 {
		o.Gap = 500 * time.Millisecond
	}
	if o.MemoryBudget <= 0 {
		o.MemoryBudget = 2 << 30
		if o.Quick {
			o.MemoryBudget = 256 << 20
		}
	}
	if o.MaxIdle <= 0 {
		o.MaxIdle = 1000
		if o.Quick {
			o.MaxIdle = 10
		}
	}
	o.now = time.Now
	o.progressStart = o.now()
	return nil
}

func (o *Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "[%5.1fs] %s\n", time.Since(o.progressStart).Seconds(), fmt.Sprintf(format, args...))
	}
}

// scale picks the full or the quick count.
func (o *Options) scale(full, quick int) int {
	if o.Quick {
		return quick
	}
	return full
}

// Names of the figures that others use as their baseline.
const (
	figFloor       = "floor: fork+namespaces+exec true"
	figFloorRate10 = "floor: processes/s, c=10"
	figFloorRate50 = "floor: processes/s, c=50"
	figBwrap       = "bwrap start (true)"
	figHostBash    = "host: bash -l -c true"
	figSandboxBash = "in sandbox: bash -l -c true"
	figLoopback    = "loopback HTTP, 100 MiB"
	figFloorMem    = "floor: idle namespaced process"
	figPoolCreate  = "create→ready, warm pool, serial"
	figColdCreate  = "create→ready, no pool, serial"
	figRoundTrip   = "commands.run('true') round trip"
	figIdleMemory  = "host memory per idle sandbox"
	figPoolHits    = "serial creates without a gap served by the pool"
)

// group is one group of figures (Groups) and what measures it.
type group struct {
	name    string
	measure func() ([]*Figure, error)
}

// Run measures everything and returns the report. It fails only when it
// cannot measure; a missed target is a figure like any other.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	r := &Report{StartedAt: opts.now(), Host: hostInfo(), Template: opts.Template, Quick: opts.Quick}
	if opts.runs("baselines") {
		base, err := baselines(ctx, &opts)
		if err != nil {
			return nil, fmt.Errorf("measuring baselines: %w", err)
		}
		r.Figures = append(r.Figures, base...)
	}
	// measure runs the measurements of the groups asked for, in order.
	measure := func(ms ...group) ([]*Figure, error) {
		var figs []*Figure
		for _, m := range ms {
			if !opts.runs(m.name) {
				continue
			}
			more, err := m.measure()
			if err != nil {
				return nil, err
			}
			figs = append(figs, more...)
		}
		return figs, nil
	}
	// neighbours are the groups measured on the pooled server after
	// create→ready, named createName there.
	neighbours := func(c *client.Client, createName string) []group {
		return []group{
			{"neighbours", func() ([]*Figure, error) { return measureNeighbours(ctx, &opts, c) }},
			{"disk", func() ([]*Figure, error) { return measureDiskNeighbour(ctx, &opts, c) }},
			{"lifecycle", func() ([]*Figure, error) { return measureLifecycle(ctx, &opts, c, createName) }},
			{"browser", func() ([]*Figure, error) { return measureBrowser(ctx, &opts, c) }},
		}
	}
	if opts.ServerURL != "" {
		r.Server = opts.ServerURL
		c, err := newClient(opts.ServerURL, opts.APIKey)
		if err != nil {
			return nil, err
		}
		const createName = "create→ready, serial (server as configured)"
		figs, err := measure(append([]group{
			{"pooled", func() ([]*Figure, error) {
				return measurePooled(ctx, &opts, nil, c, createName)
			}},
			{"cold", func() ([]*Figure, error) {
				figs, err := measureCold(ctx, &opts, c, false)
				return append([]*Figure{skipped(figColdCreate, "needs a server of its own (run without --server)")}, figs...), err
			}},
		}, append(neighbours(c, createName), group{"vm", func() ([]*Figure, error) {
			return []*Figure{skipped("vm figures", "need servers of their own, with --backend vm (run without --server)")}, nil
		}}, group{"gvisor", func() ([]*Figure, error) {
			return []*Figure{skipped("gvisor figures", "need servers of their own, with --backend gvisor (run without --server)")}, nil
		}})...)...)
		if err != nil {
			return nil, err
		}
		r.Figures = append(r.Figures, figs...)
	} else {
		r.Server = fmt.Sprintf("own: %s serve --data-dir %s (--warm-pool %s, then none)", opts.Binary, opts.DataDir, opts.Pool)
		if opts.runs("vm") {
			r.Server += fmt.Sprintf("; vm: --backend vm --data-dir %s (from snapshots without a pool, --warm-pool %s, then --vm-cold-boot)", opts.VMDataDir, opts.Pool)
		}
		if opts.runs("gvisor") {
			r.Server += fmt.Sprintf("; gvisor: --backend gvisor --data-dir %s (without a pool, then --warm-pool %s)", opts.GvisorDataDir, opts.Pool)
		}
		jail := serverSpec{dataDir: opts.DataDir, pool: opts.Pool}
		if opts.runs("pooled") || opts.runs("neighbours") || opts.runs("disk") || opts.runs("lifecycle") || opts.runs("browser") {
			figs, err := withServer(ctx, &opts, jail, func(s *server, c *client.Client) ([]*Figure, error) {
				return measure(append([]group{{"pooled", func() ([]*Figure, error) {
					return measurePooled(ctx, &opts, s, c, figPoolCreate)
				}}}, neighbours(c, figPoolCreate)...)...)
			})
			if err != nil {
				return nil, err
			}
			r.Figures = append(r.Figures, figs...)
		}
		if opts.runs("cold") {
			jail.pool = "none"
			figs, err := withServer(ctx, &opts, jail, func(_ *server, c *client.Client) ([]*Figure, error) {
				return measureCold(ctx, &opts, c, true)
			})
			if err != nil {
				return nil, err
			}
			r.Figures = append(r.Figures, figs...)
		}
		if opts.runs("vm") {
			figs, err := measureVM(ctx, &opts)
			if err != nil {
				return nil, fmt.Errorf("vm figures: %w", err)
			}
			r.Figures = append(r.Figures, figs...)
		}
		if opts.runs("gvisor") {
			figs, err := measureGvisor(ctx, &opts)
			if err != nil {
				return nil, fmt.Errorf("gvisor figures: %w", err)
			}
			r.Figures = append(r.Figures, figs...)
		}
	}
	if opts.runs("cluster") {
		figs, err := measureCluster(ctx, &opts)
		if err != nil {
			return nil, fmt.Errorf("cluster figures: %w", err)
		}
		r.Figures = append(r.Figures, figs...)
	}
	r.Duration = opts.now().Sub(r.StartedAt).Round(time.Second).String()
	r.finish()
	return r, nil
}

// withServer runs f against a server of its own, started as spec says.
func withServer(ctx context.Context, opts *Options, spec serverSpec, f func(*server, *client.Client) ([]*Figure, error)) ([]*Figure, error) {
	s, err := startServer(ctx, opts, spec)
	if err != nil {
		return nil, err
	}
	return measureAt(s.url, s.apiKey, "the server", s.stop, func(c *client.Client) ([]*Figure, error) { return f(s, c) })
}

// measureAt runs f with a client of the server at url, then stops what
// serves there (named what) whatever f did.
func measureAt(url, apiKey, what string, stop func() error, f func(*client.Client) ([]*Figure, error)) ([]*Figure, error) {
	c, err := newClient(url, apiKey)
	var figs []*Figure
	if err == nil {
		figs, err = f(c)
	}
	if serr := stop(); err == nil && serr != nil {
		err = fmt.Errorf("stopping %s: %w", what, serr)
	}
	return figs, err
}

// newClient talks to the server at url, routing sandbox traffic by header
// through the same URL, with enough idle connections for c=50.
func newClient(url, apiKey string) (*client.Client, error) {
	return client.New(client.Config{
		APIURL: url, SandboxURL: url, APIKey: apiKey,
		HTTPClient: &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 64,
			DisableCompression:  true,
		}},
	})
}
