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
	fast.Baseline, fast.target = figFloor, p50p99(5, 20)
	slow := latencyFigure("slow", latency(60, 60, 60))
	slow.Baseline, slow.target = figFloor, p50At(50)
	rate := &Figure{Name: "rate", Unit: "/s", Value: 20, N: 1, target: atLeast(30, "/s")}
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
	for _, want := range []string{"fast", "p50 ≤ 5 ms, p99 ≤ 20 ms", "yes", "NO", "skipped: not installed"} {
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
