package vminit

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
)

func TestValidate(t *testing.T) {
	good := func() Config {
		return Config{
			Hostname: "sbx",
			Binaries: map[string]string{guest.EnvdPath: "envd", "/usr/local/bin/tool": "/bin/tool"},
			Network: &Network{
				Address:   netip.MustParsePrefix("10.11.0.2/30"),
				Gateway:   netip.MustParseAddr("10.11.0.1"),
				Forwarder: netip.MustParseAddr("10.11.0.1"),
			},
		}
	}
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"good", func(*Config) {}, ""},
		{"loopback only", func(c *Config) { c.Network = nil }, ""},
		{"no envd", func(c *Config) { delete(c.Binaries, guest.EnvdPath) }, "no binary for envd"},
		{"relative guest path", func(c *Config) { c.Binaries["usr/bin/x"] = "x" }, "not a clean absolute"},
		{"unclean guest path", func(c *Config) { c.Binaries["/usr/../x"] = "x" }, "not a clean absolute"},
		{"source escapes the tools disk", func(c *Config) { c.Binaries["/usr/bin/x"] = "../x" }, "not a file on the tools disk"},
		{"source is the disk's root", func(c *Config) { c.Binaries["/usr/bin/x"] = "/" }, "not a file on the tools disk"},
		{"negative pids", func(c *Config) { c.Pids = -1 }, "negative"},
		{"volumes", func(c *Config) { c.Volumes = []string{"/mnt/data", "/home/user/work"} }, ""},
		{"volume at a relative path", func(c *Config) { c.Volumes = []string{"data"} }, "volume mount point"},
		{"volume over the root", func(c *Config) { c.Volumes = []string{"/"} }, "volume mount point"},
		{"IPv6 address", func(c *Config) { c.Network.Address = netip.MustParsePrefix("fd00::2/64") }, "not an IPv4 prefix"},
		{"no gateway", func(c *Config) { c.Network.Gateway = netip.Addr{} }, "gateway"},
		{"no forwarder", func(c *Config) { c.Network.Forwarder = netip.Addr{} }, "forwarder"},
		{"forwarder is the guest", func(c *Config) { c.Network.Forwarder = c.Network.Address.Addr() }, "the guest's own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.mod(&c)
			err := c.Validate()
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}
