package jail

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail/jailtest"
)

// BenchmarkStart times Start (and reports Stop) of a sandbox without
// networking, with every disk made by mkfs and with the kept image.
func BenchmarkStart(b *testing.B) {
	bk := newTestBackend(b, func(c *Config) { c.Log = slog.New(slog.DiscardHandler) })
	testRootfs(b) // built once, not timed
	testEnvd(b)
	for _, bc := range []struct {
		name string
		mkfs bool
	}{{"mkfs", true}, {"kept", false}} {
		b.Run(bc.name, func(b *testing.B) {
			timeStarts(b, bk, func() {
				if bc.mkfs {
					bk.disks = disk.Maker{}
				}
			})
		})
	}
}

// BenchmarkInitBinary times Start and Stop of a sandbox without networking
// with each binary as its init: the server's, which runs every package
// initialiser of the server before its init command, and cmd/jailinit.
func BenchmarkInitBinary(b *testing.B) {
	dir := b.TempDir()
	testRootfs(b) // built once, not timed
	testEnvd(b)
	for _, name := range []string{"agent-sandbox", "jailinit"} {
		path, err := jailtest.BuildCommand(dir, name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			bk := newTestBackend(b, func(c *Config) {
				c.Log = slog.New(slog.DiscardHandler)
				c.InitPath = path
			})
			timeStarts(b, bk, func() {})
		})
	}
}

// timeStarts starts and stops a sandbox without networking on bk per
// iteration, after before, and reports the mean Start and Stop.
func timeStarts(b *testing.B, bk *Backend, before func()) {
	var start, stop time.Duration
	for b.Loop() {
		before()
		t0 := time.Now()
		inst, err := bk.Start(context.Background(), testSpec(b, isolation.Resources{}))
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := inst.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		start, stop = start+t1.Sub(t0), stop+time.Since(t1)
	}
	b.ReportMetric(float64(start.Microseconds())/1e3/float64(b.N), "start-ms")
	b.ReportMetric(float64(stop.Microseconds())/1e3/float64(b.N), "stop-ms")
}
