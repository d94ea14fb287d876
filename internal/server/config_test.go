package server

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
)

func TestConfigValidate(t *testing.T) {
	bin := t.TempDir()
	envd := filepath.Join(bin, "envd")
	for _, name := range []string{"envd", "codeinterp"} {
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

func TestDefaultResourcesValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.validateResources(); err != nil {
		t.Fatalf("the default resources: %v", err)
	}
	if c.CPUCount < 1 || c.CPUCount > c.MaxCPUCount {
		t.Errorf("default %d CPUs, at most %d", c.CPUCount, c.MaxCPUCount)
	}
}
