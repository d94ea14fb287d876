package server

import (
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
)

func TestConfigValidate(t *testing.T) {
	bin := t.TempDir()
	envd := filepath.Join(bin, "envd")
	for _, name := range []string{"envd", "codeinterp", "jailinit"} {
		if err := os.WriteFile(filepath.Join(bin, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name       string
		cfg        Config
		wantDomain string
		wantErr    bool
	}{
		{name: "loopback listen gives localhost", cfg: Config{Listen: "127.0.0.1:3000"}, wantDomain: "localhost:3000"},
		{name: "any address gives localhost", cfg: Config{Listen: "0.0.0.0:8080"}, wantDomain: "localhost:8080"},
		{name: "empty host gives localhost", cfg: Config{Listen: ":3000"}, wantDomain: "localhost:3000"},
		{name: "a named host is kept", cfg: Config{Listen: "box.internal:3000"}, wantDomain: "box.internal:3000"},
		{name: "an explicit domain wins", cfg: Config{Listen: "127.0.0.1:3000", Domain: "sandbox.test"}, wantDomain: "sandbox.test"},
		{name: "listen without port", cfg: Config{Listen: "127.0.0.1"}, wantErr: true},
		{name: "domain with a path", cfg: Config{Listen: "127.0.0.1:3000", Domain: "x.test/api"}, wantErr: true},
		{name: "relative data dir", cfg: Config{Listen: "127.0.0.1:3000", DataDir: "data"}, wantErr: true},
		{name: "missing envd", cfg: Config{Listen: "127.0.0.1:3000", EnvdPath: "/nonexistent/envd"}, wantErr: true},
		{name: "missing code interpreter", cfg: Config{Listen: "127.0.0.1:3000", CodeInterpPath: "/nonexistent/codeinterp"}, wantErr: true},
		{name: "missing jail init", cfg: Config{Listen: "127.0.0.1:3000", JailInit: "/nonexistent/jailinit"}, wantErr: true},
		{name: "built-in templates", cfg: Config{Listen: "127.0.0.1:3000", Templates: []string{"code-interpreter-v1"}}, wantDomain: "localhost:3000"},
		{name: "unknown template", cfg: Config{Listen: "127.0.0.1:3000", Templates: []string{"nope"}}, wantErr: true},
		{name: "cpu default above its maximum", cfg: Config{Listen: "127.0.0.1:3000", CPUCount: 4, MaxCPUCount: 2}, wantErr: true},
		{name: "memory default above its maximum", cfg: Config{Listen: "127.0.0.1:3000", MemoryMB: 4096, MaxMemoryMB: 1024}, wantErr: true},
		{name: "no maxima", cfg: Config{Listen: "127.0.0.1:3000", CPUCount: 64, MaxCPUCount: 0, MemoryMB: 1 << 20}, wantDomain: "localhost:3000"},
		{name: "uncapped disk I/O under a maximum", cfg: Config{Listen: "127.0.0.1:3000", DiskIO: isolation.DiskIO{ReadIOPS: 1},
			MaxDiskIO: isolation.DiskIO{WriteIOPS: 100}}, wantErr: true},
		{name: "disk I/O default above its maximum", cfg: Config{Listen: "127.0.0.1:3000", DiskIO: isolation.DiskIO{WriteIOPS: 200},
			MaxDiskIO: isolation.DiskIO{WriteIOPS: 100}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			if cfg.DataDir == "" {
				cfg.DataDir = "/var/lib/agent-sandbox"
			}
			if cfg.EnvdPath == "" {
				cfg.EnvdPath = envd
			}
			def := DefaultConfig()
			if cfg.CPUCount == 0 {
				cfg.CPUCount, cfg.MaxCPUCount = def.CPUCount, def.MaxCPUCount
			}
			if cfg.MemoryMB == 0 {
				cfg.MemoryMB, cfg.MaxMemoryMB = def.MemoryMB, def.MaxMemoryMB
			}
			err := cfg.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && cfg.Domain != tt.wantDomain {
				t.Errorf("Domain = %q, want %q", cfg.Domain, tt.wantDomain)
			}
		})
	}
}

func TestAutoMaxSandboxes(t *testing.T) {
	for _, c := range []struct{ memMB, perMB, want int }{
		{24 * 1024, 512, 42},    // 21 GiB left after an eighth: 42 of 512 MiB
		{4 * 1024, 512, 6},      // 1 GiB kept (more than an eighth): 3 GiB left
		{16 * 1024, 1024, 14},   // 14 GiB left
		{1024, 512, 1},          // nothing left: still one
		{256 * 1024, 2048, 112}, // 224 GiB left
	} {
		if got := AutoMaxSandboxes(c.memMB, c.perMB); got != c.want {
			t.Errorf("AutoMaxSandboxes(%d, %d) = %d, want %d", c.memMB, c.perMB, got, c.want)
		}
	}
}

func TestHostMemoryMB(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "meminfo")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if mb, err := hostMemoryMB(write("MemTotal:       24683940 kB\nMemFree:        22900000 kB\n")); err != nil || mb != 24105 {
		t.Errorf("hostMemoryMB = %d, %v, want 24105", mb, err)
	}
	for _, bad := range []string{"MemFree: 1 kB\n", "MemTotal: lots\n", "MemTotal: 5 MB\n"} {
		if mb, err := hostMemoryMB(write(bad)); err == nil {
			t.Errorf("hostMemoryMB of %q = %d, want an error", bad, mb)
		}
	}
}

// TestDefaultsValidate: the defaults validate, auto becomes a cap from the
// host's memory, and every new bound has its documented default.
func TestDefaultsValidate(t *testing.T) {
	bin := t.TempDir()
	for _, name := range []string{"envd", "codeinterp", "jailinit"} {
		if err := os.WriteFile(filepath.Join(bin, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.EnvdPath = filepath.Join(bin, "envd")
	if cfg.DiskReserve.String() != "5%" || cfg.PausedRetention != 30*24*time.Hour || cfg.MaxBuildContext != 2<<30 || cfg.NoNewPrivs {
		t.Errorf("defaults: reserve %s, retention %s, build context %d, no_new_privs %v", cfg.DiskReserve, cfg.PausedRetention, cfg.MaxBuildContext, cfg.NoNewPrivs)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	want, err := HostMaxSandboxes(cfg.MemoryMB)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxSandboxes != want || want < 1 {
		t.Errorf("MaxSandboxes = %d after Validate, want %d from the host's memory", cfg.MaxSandboxes, want)
	}
}

func TestBackendConfig(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := Config{DataDir: "/srv/asb", Userns: "off", NoNewPrivs: on}
		jc := backendConfig(cfg, slog.New(slog.DiscardHandler), nil)
		if jc.NoNewPrivs != on || jc.StateDir != "/srv/asb/sandboxes" || jc.Userns != "off" {
			t.Errorf("NoNewPrivs %v: jail config %+v", on, jc)
		}
	}
}

func TestDefaultResourcesValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.validateResources(); err != nil {
		t.Fatalf("the default resources: %v", err)
	}
	if c.CPUCount < 1 || c.CPUCount > c.MaxCPUCount {
		t.Errorf("default %d CPUs, at most %d", c.CPUCount, c.MaxCPUCount)
	}
}

func TestBackendOrder(t *testing.T) {
	for _, tc := range []struct {
		choice  string
		kvm     bool
		want    []string
		wantErr string
	}{
		{"jail", false, []string{"jail"}, ""},
		{"gvisor", false, []string{"gvisor"}, ""},
		// gvisor only on request (backendOrder says why).
		{"auto", false, []string{"jail"}, ""},
		{"auto", true, []string{"vm", "jail"}, ""},
		// vm is there on request without KVM too (TCG emulation).
		{"vm", false, []string{"vm"}, ""},
		{"firecracker", false, nil, "want auto, gvisor, jail or vm"},
	} {
		got, err := backendOrder(tc.choice, tc.kvm)
		if !slices.Equal(got, tc.want) || (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("backendOrder(%q, kvm %v) = %q, %v; want %q, an error saying %q", tc.choice, tc.kvm, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseTemplateBackends(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    map[string]string
		wantErr string
	}{
		{"", map[string]string{}, ""},
		{"none", map[string]string{}, ""},
		{"code-interpreter-v1=vm, base=jail", map[string]string{"code-interpreter-v1": "vm", "base": "jail"}, ""},
		{"base", nil, "want TEMPLATE=BACKEND"},
		{"=vm", nil, "want TEMPLATE=BACKEND"},
		{"base=", nil, "want TEMPLATE=BACKEND"},
		{"base=auto", nil, `backend "auto": want gvisor, jail or vm`},
	} {
		got, err := ParseTemplateBackends(tc.in)
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) || (err == nil && !maps.Equal(got, tc.want)) {
			t.Errorf("ParseTemplateBackends(%q) = %v, %v; want %v, an error saying %q", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
