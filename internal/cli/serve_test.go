package cli

import (
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/server"
)

func TestParseMaxSandboxes(t *testing.T) {
	for in, want := range map[string]int{"auto": server.MaxSandboxesAuto, "0": 0, "12": 12} {
		var got int
		if err := parseMaxSandboxes(in, &got); err != nil || got != want {
			t.Errorf("parseMaxSandboxes(%q) = %d, %v, want %d", in, got, err, want)
		}
		if f := formatMaxSandboxes(want); f != in {
			t.Errorf("formatMaxSandboxes(%d) = %q, want %q", want, f, in)
		}
	}
	for _, in := range []string{"", "-1", "many", "1.5"} {
		var got int
		if err := parseMaxSandboxes(in, &got); err == nil {
			t.Errorf("parseMaxSandboxes(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseRetention(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "1d": 24 * time.Hour, "12h": 12 * time.Hour, "90m": 90 * time.Minute, "0": 0, "0d": 0} {
		if got, err := parseLongDuration(in); err != nil || got != want {
			t.Errorf("parseLongDuration(%q) = %v, %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1d", "-5m", "1.5d", "soon"} {
		if got, err := parseLongDuration(in); err == nil {
			t.Errorf("parseLongDuration(%q) = %v, want an error", in, got)
		}
	}
	for d, want := range map[time.Duration]string{30 * 24 * time.Hour: "30d", 12 * time.Hour: "12h0m0s", 0: "0s"} {
		if got := formatLongDuration(d); got != want {
			t.Errorf("formatLongDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
