package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// fakeDisk is a file system whose free space a test sets.
type fakeDisk struct {
	mu           sync.Mutex
	avail, total uint64
}

func (d *fakeDisk) set(avail uint64) {
	d.mu.Lock()
	d.avail = avail
	d.mu.Unlock()
}

func (d *fakeDisk) space(string) (uint64, uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.avail, d.total, nil
}

const gib = 1 << 30

func TestCreateDiskReserve(t *testing.T) {
	disk := &fakeDisk{avail: 10 * gib, total: 100 * gib}
	e := newEnv(t, func(c *Config) {
		c.DiskDir, c.DiskReserve, c.diskSpace = "/data/sandboxes", DiskReserve{Percent: 5}, disk.space
	})
	ctx := context.Background()
	// 10 GiB free, 5 GiB reserved, 1 GiB disk: the positive control.
	e.create(t, CreateRequest{})

	tests := []struct {
		name    string
		avail   uint64
		reserve DiskReserve
		want    string // the refusal; "" = created
	}{
		{name: "reserve plus the disk fit exactly", avail: 6 * gib, reserve: DiskReserve{Percent: 5}},
		{name: "below the reserve plus the disk", avail: 5*gib + gib/2, reserve: DiskReserve{Percent: 5},
			want: "not enough free disk for a new sandbox: 5.5GiB free, and a sandbox may write 1GiB while the server keeps 5GiB (5% of the disk) free; " +
				"kill sandboxes you no longer need (paused ones keep their disk) or retry later"},
		{name: "a reserve in bytes", avail: 3 * gib, reserve: DiskReserve{Bytes: 2*gib + 1},
			want: "not enough free disk for a new sandbox: 3GiB free, and a sandbox may write 1GiB while the server keeps 2GiB free; " +
				"kill sandboxes you no longer need (paused ones keep their disk) or retry later"},
		{name: "no reserve still counts the sandbox's own disk", avail: gib - 1,
			want: "not enough free disk for a new sandbox: 1024MiB free, and a sandbox may write 1GiB; kill"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.m.cfg.DiskReserve = tt.reserve
			disk.set(tt.avail)
			before := len(e.fake.Running())
			sb, err := e.m.Create(ctx, CreateRequest{Template: "base", Timeout: time.Minute})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Create: %v", err)
				}
				if err := e.m.Kill(ctx, sb.ID); err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrNoSpace) || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Create = %v\nwant ErrNoSpace: %s", err, tt.want)
			}
			if n := len(e.fake.Running()); n != before {
				t.Errorf("%d sandboxes running after a refused create, want %d", n, before)
			}
		})
	}
	// Nothing was recorded for the refused creates.
	list, err := e.store.ListSandboxesByState(ctx, store.StateStarting, store.StateError)
	if err != nil || len(list) != 0 {
		t.Errorf("records left starting or failed: %v, %v", list, err)
	}
}

// TestPoolWaitsForDisk: the warm pool does not boot members while the disk
// is short of the reserve; with room it fills (the positive control).
func TestPoolWaitsForDisk(t *testing.T) {
	for _, c := range []struct {
		avail uint64
		fills bool
	}{{10 * gib, true}, {gib / 2, false}} {
		disk := &fakeDisk{avail: c.avail, total: 100 * gib}
		e := newEnv(t, func(cfg *Config) {
			cfg.WarmPools = map[string]PoolSize{"base": {Min: 1, Max: 1}}
			cfg.DiskDir, cfg.diskSpace = "/data/sandboxes", disk.space
		})
		if c.fills {
			e.waitReady(t, 1)
			continue
		}
		time.Sleep(500 * time.Millisecond)
		if p := e.m.Pools()["base"]; p.Ready != 0 || len(e.fake.Running()) != 0 {
			t.Errorf("pool %+v, %d running with %d bytes free", p, len(e.fake.Running()), c.avail)
		}
	}
}

// clock is a settable Config.Now.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *clock) set(t time.Time)         { c.ns.Store(t.UnixNano()) }

func TestPausedRetention(t *testing.T) {
	clk := newClock()
	e := newEnv(t, func(c *Config) { c.PausedRetention, c.Now = time.Hour, clk.now })
	ctx := context.Background()
	kept := e.create(t, CreateRequest{Timeout: 10 * time.Minute})
	resumed := e.create(t, CreateRequest{Timeout: 10 * time.Minute})
	running := e.create(t, CreateRequest{Timeout: 3 * time.Hour})
	for _, sb := range []store.Sandbox{kept, resumed} {
		if err := e.m.Pause(ctx, sb.ID, true); err != nil {
			t.Fatal(err)
		}
	}
	// Within the retention both stay paused.
	clk.advance(59 * time.Minute)
	time.Sleep(3 * timeoutTick)
	for _, sb := range []store.Sandbox{kept, resumed} {
		if r := e.record(t, sb.ID); r.State != store.StatePaused {
			t.Fatalf("%s within the retention: %s (%q)", sb.ID, r.State, r.Reason)
		}
	}
	// A resume ends the paused time; a running sandbox has no retention.
	if _, ok, err := e.m.Connect(ctx, resumed.ID, 2*time.Hour, false); err != nil || !ok {
		t.Fatalf("Connect = %v, %v", ok, err)
	}
	clk.advance(2 * time.Minute)
	// The record goes first, then the instance is stopped.
	waitFor(t, 3*time.Second, "paused sandbox killed after the retention, its instance stopped", func() bool {
		return e.record(t, kept.ID).State == store.StateKilled && e.fake.Instance(kept.ID).Stopped()
	})
	want := "paused for longer than the retention of 1h"
	if r := e.record(t, kept.ID); r.Reason != want {
		t.Errorf("reason %q, want %q", r.Reason, want)
	}
	// getInfo and list see it as killed: not found, with the reason.
	if _, err := e.m.Get(ctx, kept.ID); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), want) {
		t.Errorf("Get = %v, want ErrNotFound naming the reason", err)
	}
	list, _, err := e.m.List(ctx, store.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		if sb.ID == kept.ID {
			t.Errorf("List shows the removed sandbox: %+v", sb)
		}
	}
	for _, sb := range []store.Sandbox{resumed, running} {
		if r := e.record(t, sb.ID); r.State != store.StateRunning {
			t.Errorf("%s: %s (%q), want running", sb.ID, r.State, r.Reason)
		}
	}

	// A paused sandbox adopted by a restarted server counts from its
	// record's last change: two hours later it is removed at once.
	if err := e.m.Pause(ctx, resumed.ID, true); err != nil {
		t.Fatal(err)
	}
	pausedAt := e.record(t, resumed.ID).UpdatedAt
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	clk.set(pausedAt.Add(2 * time.Hour))
	e.m = e.start(t)
	waitFor(t, 3*time.Second, "adopted paused sandbox removed", func() bool {
		return e.record(t, resumed.ID).State == store.StateKilled
	})
	if r := e.record(t, resumed.ID); r.Reason != want {
		t.Errorf("adopted: reason %q", r.Reason)
	}
}

func TestDiskReserveString(t *testing.T) {
	for r, want := range map[DiskReserve]string{
		{Percent: 5}:           "5%",
		{Percent: 2.5}:         "2.5%",
		{Bytes: 4 * gib}:       "4GiB",
		{Bytes: 1536 << 20}:    "1.5GiB",
		{Bytes: 0}:             "0B",
		{Bytes: 100}:           "100B",
		{Percent: 1, Bytes: 1}: "1%",
	} {
		if got := r.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", r, got, want)
		}
	}
	if got := pausedTooLong(DefaultPausedRetention); got != "paused for longer than the retention of 30 days" {
		t.Errorf("reason %q", got)
	}
}

func TestParseDiskReserve(t *testing.T) {
	for in, want := range map[string]DiskReserve{
		"5%": {Percent: 5}, "0.5%": {Percent: 0.5}, "0%": {}, "4GiB": {Bytes: 4 * gib}, "0": {},
	} {
		if got, err := ParseDiskReserve(in); err != nil || got != want {
			t.Errorf("ParseDiskReserve(%q) = %+v, %v, want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "100%", "-1%", "x%", "lots", "5 %"} {
		if got, err := ParseDiskReserve(in); err == nil {
			t.Errorf("ParseDiskReserve(%q) = %+v, want an error", in, got)
		}
	}
}
