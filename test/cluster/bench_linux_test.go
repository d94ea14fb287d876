package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/bench"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// benchFullEnv asks TestBenchCluster for the bench's full sample counts
// (make bench-cluster); without it the run is a smoke run (--quick), so
// that the cluster figures cannot rot.
const benchFullEnv = "AGENT_SANDBOX_BENCH_FULL"

// TestBenchCluster runs the bench's baselines, its single-host figures
// (its own servers, with a warm pool and without) and its cluster figures
// in one run: three real node agents on stand-in hosts behind one real
// API replica, started with warm pools of the base template and again
// without. It prints the report and where the creates landed, and fails
// when a cluster figure was not measured or has no single-host figure of
// the same run beside it; never on a figure's value.
func TestBenchCluster(t *testing.T) {
	testenv.RequireRoot(t)
	c, hosts, kubeconfig := standInCluster(t, 3)
	bin := servertest.Build(t)
	names := []string{"node-a", "node-b", "node-c"}
	start := func(ctx context.Context, pool string) (*bench.ClusterEndpoint, error) {
		var nodes []*servertest.Server
		for i, name := range names {
			nodes = append(nodes, hosts[i].agent(t, name, kubeconfig, "--warm-pool", pool, "--domain", trafficDomain, "--max-sandboxes", "0"))
		}
		waitJoined(t, c, names...)
		r := startAPIReplica(t, c, bin, "--domain", trafficDomain)
		stop := func() error {
			r.kill()
			var landed []string
			for i, n := range nodes {
				out := string(n.Output())
				landed = append(landed, fmt.Sprintf("%s %d (%d from its pool)", names[i],
					strings.Count(out, "sandbox created for its object"), strings.Count(out, "creating sandbox from the warm pool")))
				n.Stop()
			}
			t.Logf("--warm-pool %s: creates per node: %s", pool, strings.Join(landed, ", "))
			return nil
		}
		return &bench.ClusterEndpoint{URL: r.url, APIKey: testAPIKey, Nodes: len(nodes), Stop: stop}, nil
	}

	r, err := bench.Run(t.Context(), bench.Options{
		Binary: bin, DataDir: servertest.DataDirWithBase(t), WaitHost: true,
		Quick: os.Getenv(benchFullEnv) == "", Only: []string{"baselines", "pooled", "cold", "cluster"},
		Cluster: start, Progress: logWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("the bench's report:\n%s", table.String())
	var cluster int
	for _, f := range r.Figures {
		if !strings.HasPrefix(f.Name, "cluster") {
			continue
		}
		cluster++
		if f.Skipped != "" || f.N == 0 || f.Ratio == 0 {
			t.Errorf("figure %q: not measured beside a single-host figure (skipped %q, %d samples, ratio to %q %v)", f.Name, f.Skipped, f.N, f.Baseline, f.Ratio)
		}
	}
	if cluster != 3 {
		t.Errorf("%d cluster figures, want 3 (create→ready with warm pools and without, creates/s at c=50)", cluster)
	}
}

// logWriter logs each write (a line of the bench's progress) as it comes.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
