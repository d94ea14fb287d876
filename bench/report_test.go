package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func latency(ms ...int) *Latency {
	l := &Latency{}
	for _, v := range ms {
		l.add(time.Duration(v) * time.Millisecond)
	}
	return l
}

func TestQuantile(t *testing.T) {
	l := latency(5, 1, 4, 2, 3, 10, 6, 7, 8, 9)
	for _, tc := range []struct {
		name string
		q    float64
		want time.Duration
	}{
		{"min", 0, time.Millisecond},
		{"median", 0.5, 5 * time.Millisecond},
		{"p90", 0.9, 9 * time.Millisecond},
		{"p99", 0.99, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.Quantile(tc.q); got != tc.want {
				t.Errorf("Quantile(%g) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	if got := (Latency{}).Quantile(0.5); got != 0 {
		t.Errorf("Quantile of no samples = %v, want 0", got)
	}
}

func TestHistogramHoldsEverySample(t *testing.T) {
	l := latency(1, 2, 2, 3, 50, 400)
	bins := l.histogram(10)
	total := 0
	for i, b := range bins {
		total += b.Count
		if b.Hi <= b.Lo || (i > 0 && b.Lo != bins[i-1].Hi) {
			t.Fatalf("bin %d is [%g, %g), previous ends at %g", i, b.Lo, b.Hi, bins[max(i-1, 0)].Hi)
		}
	}
	if total != len(l.Samples) {
		t.Errorf("bins hold %d samples, want %d", total, len(l.Samples))
	}
	if bins[0].Lo > 1 || bins[len(bins)-1].Hi <= 400 {
		t.Errorf("bins span [%g, %g), want 1 and 400 inside", bins[0].Lo, bins[len(bins)-1].Hi)
	}
}

func TestFinishRatiosAndTargets(t *testing.T) {
	floor := latencyFigure(figFloor, latency(2, 2, 2))
	fast := latencyFigure("fast", latency(4, 4, 4))
	fast.Baseline, fast.target = figFloor, p50Times(2, figFloor, "floor")
	slow := latencyFigure("slow", latency(60, 60, 60))
	slow.Baseline, slow.target = figFloor, p50AtMost(50)
	rate := &Figure{Name: "rate", Unit: "/s", Value: 20, N: 1, target: valueAtLeast(30, "/s")}
	orphan := latencyFigure("orphan", latency(1))
	orphan.Baseline = "not measured"
	r := &Report{Figures: []*Figure{floor, fast, slow, rate, orphan, skipped("skipped one", "not installed")}}
	r.finish()

	for _, tc := range []struct {
		f         *Figure
		wantRatio float64
		wantMet   *bool
	}{
		{fast, 2, ptr(true)},
		{slow, 30, ptr(false)},
		{rate, 0, ptr(false)},
		{orphan, 0, nil},
	} {
		t.Run(tc.f.Name, func(t *testing.T) {
			if tc.f.Ratio != tc.wantRatio {
				t.Errorf("ratio = %g, want %g", tc.f.Ratio, tc.wantRatio)
			}
			if (tc.f.Met == nil) != (tc.wantMet == nil) || (tc.f.Met != nil && *tc.f.Met != *tc.wantMet) {
				t.Errorf("met = %v, want %v", deref(tc.f.Met), deref(tc.wantMet))
			}
		})
	}

	var table, page strings.Builder
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fast", "p50 ≤ 2× floor = 4.00 ms", "yes", "NO", "skipped: not installed"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	// One histogram per measured latency figure.
	if got := strings.Count(page.String(), "<svg"); got != 4 {
		t.Errorf("page has %d histograms, want 4", got)
	}
}

func TestLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.log")
	if err := os.WriteFile(path, []byte("starting\nagent-sandbox: serve: in use\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := lastLine(path), "agent-sandbox: serve: in use"; got != want {
		t.Errorf("lastLine = %q, want %q", got, want)
	}
	if got := lastLine(filepath.Join(t.TempDir(), "missing")); !strings.HasPrefix(got, "(unreadable") {
		t.Errorf("lastLine of a missing file = %q", got)
	}
}

func ptr(b bool) *bool { return &b }

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// TestIssue21Targets holds figures to issue 21's targets, each relative to
// baselines of the same run, as measurePooled and measureCold set them.
func TestIssue21Targets(t *testing.T) {
	run := func(figs ...*Figure) map[string]*Figure {
		r := &Report{Figures: figs}
		r.finish()
		byName := map[string]*Figure{}
		for _, f := range figs {
			byName[f.Name] = f
		}
		return byName
	}
	withTarget := func(f *Figure, baseline string, tg *target) *Figure {
		f.Baseline, f.target = baseline, tg
		return f
	}
	baselines := func() []*Figure {
		return []*Figure{
			latencyFigure(figFloor, latency(4, 4, 5)),            // p50 4 ms
			latencyFigure(figSandboxBash, latency(3, 3, 9)),      // p50 3 ms
			latencyFigure(figBwrap, latency(10, 10, 12)),         // p50 10 ms
			{Name: figFloorRate50, Unit: "/s", Value: 400, N: 1}, // 15 %: 60 /s
			{Name: figLoopback, Unit: "MB/s", Value: 1000, N: 1}, // 0.8×: 800 MB/s
			latencyFigure(figQuietAlone, latency(1, 2, 3)),       // p99 3 ms
		}
	}
	for _, tc := range []struct {
		name     string
		f        *Figure
		wantText string
		wantMet  bool
	}{
		// in-sandbox bash 3 + 2 × floor 4 = 11 ms
		{"pool create met", withTarget(latencyFigure("pool", latency(11, 11, 40)), figFloor, poolCreateTarget()), "p50 ≤ in-sandbox bash + 2× floor = 11.0 ms", true},
		{"pool create missed", withTarget(latencyFigure("pool", latency(12, 12, 12)), figFloor, poolCreateTarget()), "= 11.0 ms", false},
		{"cold create", withTarget(latencyFigure("cold", latency(21, 21, 21)), figBwrap, p50Times(2, figBwrap, "bwrap start")), "p50 ≤ 2× bwrap start = 20.0 ms", false},
		{"creates/s", withTarget(&Figure{Name: "rate", Unit: "/s", Value: 61, N: 1}, figFloorRate50, valueTimesAtLeast(0.15, figFloorRate50, "floor processes/s", "/s")), "≥ 0.15× floor processes/s = 60.0 /s", true},
		{"round trip", withTarget(latencyFigure("rt", latency(4, 4, 4)), figSandboxBash, p50Times(1.15, figSandboxBash, "in-sandbox bash")), "p50 ≤ 1.15× in-sandbox bash = 3.45 ms", false},
		{"upload", withTarget(&Figure{Name: "up", Unit: "MB/s", Value: 800, N: 1}, figLoopback, valueTimesAtLeast(0.8, figLoopback, "loopback HTTP", "MB/s")), "= 800 MB/s", true},
		{"kill", withTarget(latencyFigure("kill", latency(8, 8, 30)), figFloor, p50Times(2, figFloor, "floor")), "p50 ≤ 2× floor = 8.00 ms", true},
		{"memory", &Figure{Name: "mem", Unit: "MB", Value: 4.1, N: 1, target: valueAtMost(4, "MB")}, "≤ 4 MB", false},
		{"p99 beside bombs", withTarget(latencyFigure("bombs", latency(1, 1, 9)), figQuietAlone, p99Times(3, figQuietAlone, "alone")), "p99 ≤ 3× alone = 9.00 ms", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := run(append(baselines(), tc.f)...)[tc.f.Name]
			if !strings.Contains(got.Target, tc.wantText) {
				t.Errorf("target = %q, want it to contain %q", got.Target, tc.wantText)
			}
			if got.Met == nil || *got.Met != tc.wantMet {
				t.Errorf("met = %v (not judged: %q), want %v", deref(got.Met), got.NotJudged, tc.wantMet)
			}
		})
	}

	// A target whose baseline was not measured is not judged, and the
	// table says so rather than "yes".
	for _, tc := range []struct {
		name    string
		bwrap   *Figure
		wantWhy string
	}{
		{"baseline skipped", skipped(figBwrap, "bwrap is not installed"), "bwrap start (true) was not measured (bwrap is not installed)"},
		{"baseline absent", nil, "bwrap start (true) was not measured in this run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cold := withTarget(latencyFigure(figColdCreate, latency(1, 1, 1)), figBwrap, p50Times(2, figBwrap, "bwrap start"))
			figs := []*Figure{cold}
			if tc.bwrap != nil {
				figs = append(figs, tc.bwrap)
			}
			r := &Report{Figures: figs}
			r.finish()
			if cold.Met != nil || cold.NotJudged != tc.wantWhy {
				t.Errorf("met = %v, not judged %q; want nil, %q", deref(cold.Met), cold.NotJudged, tc.wantWhy)
			}
			var table strings.Builder
			if err := r.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(table.String(), "not judged") || strings.Contains(table.String(), "yes") {
				t.Errorf("table does not say the target was not judged:\n%s", table.String())
			}
		})
	}
}
