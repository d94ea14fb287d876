package cgroup

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCPUMax(t *testing.T) {
	tests := []struct {
		name string
		cpus float64
		want string
	}{
		{"no limit", 0, "max 100000"},
		{"one", 1, "100000 100000"},
		{"one and a half", 1.5, "150000 100000"},
		{"quarter", 0.25, "25000 100000"},
		{"kernel minimum", 0.01, "1000 100000"},
		{"rounded", 1.0 / 3, "33333 100000"},
		{"many", 64, "6400000 100000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cpuMax(tt.cpus); got != tt.want {
				t.Errorf("cpuMax(%v) = %q, want %q", tt.cpus, got, tt.want)
			}
		})
	}
}

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name    string
		l       Limits
		wantErr bool
	}{
		{"zero is no limit", Limits{}, false},
		{"all set", Limits{CPUs: 2, MemoryBytes: 512 << 20, Pids: 100}, false},
		{"smallest cpu", Limits{CPUs: 0.01}, false},
		{"cpu below kernel minimum", Limits{CPUs: 0.001}, true},
		{"negative cpu", Limits{CPUs: -1}, true},
		{"NaN cpu", Limits{CPUs: math.NaN()}, true},
		{"infinite cpu", Limits{CPUs: math.Inf(1)}, true},
		{"negative memory", Limits{MemoryBytes: -1}, true},
		{"negative pids", Limits{Pids: -1}, true},
		{"cpu set", Limits{CPUSet: []int{0, 3}}, false},
		{"negative cpu in set", Limits{CPUSet: []int{1, -1}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.l.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("%+v.Validate() = %v, want error: %v", tt.l, err, tt.wantErr)
			}
		})
	}
}

func TestCPUList(t *testing.T) {
	for _, tt := range []struct {
		cpus []int
		want string
	}{{nil, ""}, {[]int{0}, "0"}, {[]int{0, 2, 3}, "0,2,3"}} {
		if got := cpuList(tt.cpus); got != tt.want {
			t.Errorf("cpuList(%v) = %q, want %q", tt.cpus, got, tt.want)
		}
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"agent-sandbox/abc123", true},
		{"single", true},
		{"", false},
		{"/agent-sandbox/abc", false},
		{"agent-sandbox/../etc", false},
		{"..", false},
		{"agent-sandbox//abc", false},
		{"agent-sandbox/abc/", false},
		{"./abc", false},
	}
	for _, tt := range tests {
		if err := validName(tt.name); (err == nil) != tt.ok {
			t.Errorf("validName(%q) = %v, want ok: %v", tt.name, err, tt.ok)
		}
	}
}

func TestParseKeyed(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]uint64
		wantErr bool
	}{
		{
			name: "v1 memory.stat",
			in:   "cache 4096\nrss 1048576\ntotal_cache 8192\ntotal_rss 2097152\nhierarchical_memory_limit 9223372036854771712\n",
			want: map[string]uint64{"cache": 4096, "rss": 1048576, "total_cache": 8192, "total_rss": 2097152, "hierarchical_memory_limit": 9223372036854771712},
		},
		{
			name: "v1 memory.oom_control",
			in:   "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
			want: map[string]uint64{"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 3},
		},
		{
			name: "v2 cpu.stat",
			in:   "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n",
			want: map[string]uint64{"usage_usec": 1234567, "user_usec": 1000000, "system_usec": 234567, "nr_periods": 0, "nr_throttled": 0, "throttled_usec": 0, "nr_bursts": 0, "burst_usec": 0},
		},
		{
			name: "v2 memory.events",
			in:   "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n",
			want: map[string]uint64{"low": 0, "high": 0, "max": 12, "oom": 2, "oom_kill": 1, "oom_group_kill": 0},
		},
		{
			name: "v2 cgroup.events",
			in:   "populated 1\nfrozen 0\n",
			want: map[string]uint64{"populated": 1, "frozen": 0},
		},
		{
			name: "blank lines and no final newline",
			in:   "\na 1\n\nb 2",
			want: map[string]uint64{"a": 1, "b": 2},
		},
		{name: "empty", in: "", want: map[string]uint64{}},
		{name: "three fields", in: "a 1 2\n", wantErr: true},
		{name: "key only", in: "a\n", wantErr: true},
		{name: "not a number", in: "a b\n", wantErr: true},
		{name: "negative", in: "a -1\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseKeyed([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseKeyed(%q) error = %v, want error: %v", tt.in, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); !tt.wantErr && diff != "" {
				t.Errorf("parseKeyed(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseValue(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"67108864\n", 67108864, false},
		{"0\n", 0, false},
		{"max\n", 0, false},
		{"9223372036854771712\n", 9223372036854771712, false},
		{"", 0, true},
		{"-1\n", 0, true},
		{"12 34\n", 0, true},
	}
	for _, tt := range tests {
		got, err := parseValue([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseValue(%q) = %d, %v; want %d, error: %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestV1Limit(t *testing.T) {
	for in, want := range map[uint64]uint64{
		0:                   0,
		64 << 20:            64 << 20,
		9223372036854771712: 0, // what an unlimited v1 group shows (4 KiB pages)
		9223372036854710272: 0, // the same with 64 KiB pages
		math.MaxUint64:      0,
	} {
		if got := v1Limit(in); got != want {
			t.Errorf("v1Limit(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestParseFreezerState(t *testing.T) {
	for in, want := range map[string]string{"FROZEN\n": frozen, "FREEZING\n": freezing, "THAWED\n": thawed, "THAWED": thawed} {
		if got, err := parseFreezerState([]byte(in)); err != nil || got != want {
			t.Errorf("parseFreezerState(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := parseFreezerState([]byte("frozen\n")); err == nil {
		t.Error("parseFreezerState(lower case) succeeded, want error")
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[Mode]string{V1: "v1", Hybrid: "hybrid", V2: "v2", 0: "Mode(0)"} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", int(m), got, want)
		}
	}
}
