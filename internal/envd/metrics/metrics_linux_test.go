package metrics

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseCPU(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    cpuTimes
		wantErr bool
	}{
		{
			name: "full line",
			in:   "cpu  100 5 50 800 20 3 2 1 7 0\ncpu0 1 2 3 4 5 6 7 8 9 0\nintr 1\n",
			// guest (7) and guest_nice are not added: user already holds them.
			want: cpuTimes{idle: 820, total: 981},
		},
		{name: "old kernel, four fields", in: "cpu 10 0 10 80\n", want: cpuTimes{idle: 80, total: 100}},
		{name: "no cpu line", in: "cpu0 1 2 3 4 5\n", wantErr: true},
		{name: "garbage", in: "cpu 1 x 3 4 5\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCPU(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseCPU: err = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(cpuTimes{})); diff != "" {
				t.Errorf("parseCPU (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUsedPct(t *testing.T) {
	tests := []struct {
		name string
		a, b cpuTimes
		want float64
	}{
		{name: "quarter busy", a: cpuTimes{idle: 100, total: 200}, b: cpuTimes{idle: 175, total: 300}, want: 25},
		{name: "rounded", a: cpuTimes{}, b: cpuTimes{idle: 2, total: 3}, want: 33.33},
		{name: "no time passed", a: cpuTimes{idle: 5, total: 10}, b: cpuTimes{idle: 5, total: 10}, want: 0},
		{name: "idle went backwards", a: cpuTimes{idle: 50, total: 100}, b: cpuTimes{idle: 40, total: 110}, want: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := usedPct(tt.a, tt.b); got != tt.want {
				t.Errorf("usedPct = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseMeminfo(t *testing.T) {
	const meminfo = `MemTotal:        8000000 kB
MemFree:         1000000 kB
MemAvailable:    5000000 kB
Buffers:          200000 kB
Cached:          3000000 kB
SwapCached:            0 kB
SReclaimable:     300000 kB
`
	tests := []struct {
		name    string
		in      string
		want    memInfo
		wantErr bool
	}{
		{name: "typical", in: meminfo, want: memInfo{total: 8000000 << 10, used: 3500000 << 10, cache: 3300000 << 10}},
		{name: "cache above total", in: "MemTotal: 100 kB\nMemFree: 50 kB\nCached: 80 kB\n", want: memInfo{total: 100 << 10, cache: 80 << 10}},
		{name: "no MemTotal", in: "MemFree: 1 kB\n", wantErr: true},
		{name: "garbage", in: "MemTotal: lots kB\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMeminfo(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseMeminfo: err = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(memInfo{})); diff != "" {
				t.Errorf("parseMeminfo (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSample(t *testing.T) {
	start := time.Now()
	s, err := Sample(context.Background())
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Sample took %v, want about %v", d, cpuInterval)
	}
	if s.Timestamp < start.Unix() || s.Timestamp > time.Now().Unix() {
		t.Errorf("ts = %d, want now (%d)", s.Timestamp, start.Unix())
	}
	if s.CPUCount < 1 {
		t.Errorf("cpu_count = %d, want ≥ 1", s.CPUCount)
	}
	if s.CPUUsedPct < 0 || s.CPUUsedPct > 100 {
		t.Errorf("cpu_used_pct = %v, want 0–100", s.CPUUsedPct)
	}
	if s.MemTotal == 0 || s.MemUsed > s.MemTotal || s.MemTotalMiB != s.MemTotal>>20 || s.MemUsedMiB != s.MemUsed>>20 {
		t.Errorf("memory = %+v, want total > 0, used ≤ total, MiB = bytes >> 20", s)
	}
	if s.DiskTotal == 0 || s.DiskUsed > s.DiskTotal {
		t.Errorf("disk used/total = %d/%d, want total > 0, used ≤ total", s.DiskUsed, s.DiskTotal)
	}
}

func TestSampleCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Sample(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Sample(canceled ctx) err = %v, want context.Canceled", err)
	}
}

func TestReadCgroupMemory(t *testing.T) {
	tests := []struct {
		name   string
		files  map[string]string // relative to the cgroup root
		want   memInfo
		wantOK bool
	}{
		{
			name: "v2",
			files: map[string]string{
				"memory.max": "536870912\n", "memory.current": "104857600\n",
				"memory.stat": "anon 1\nfile 4194304\nkernel 3\n",
			},
			want:   memInfo{total: 512 << 20, used: 96 << 20, cache: 4 << 20},
			wantOK: true,
		},
		{
			name: "v1",
			files: map[string]string{
				"memory/memory.limit_in_bytes": "314572800\n", "memory/memory.usage_in_bytes": "20971520\n",
				"memory/memory.stat": "cache 1\ntotal_cache 10485760\n",
			},
			want:   memInfo{total: 300 << 20, used: 10 << 20, cache: 10 << 20},
			wantOK: true,
		},
		{name: "v2 without a limit", files: map[string]string{"memory.max": "max\n", "memory.current": "1\n"}},
		{name: "no cgroup mounted", files: map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tt.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := readCgroupMemory(root)
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("readCgroupMemory = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
