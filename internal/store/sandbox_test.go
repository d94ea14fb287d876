package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func ptr[T any](v T) *T { return &v }

// testSandbox returns a running sandbox with only the required fields.
func testSandbox(id string, startedAt time.Time) Sandbox {
	return Sandbox{ID: id, TemplateID: "tmpl-base", State: StateRunning, StartedAt: startedAt}
}

func cmpSandbox(want, got Sandbox) string { return cmp.Diff(want, got) }

func TestSandboxRoundTrip(t *testing.T) {
	started := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.FixedZone("CET", 3600))
	full := Sandbox{
		ID:                  "ifull",
		TemplateID:          "tmpl-123",
		Alias:               "base",
		State:               StatePaused,
		Reason:              "",
		StartedAt:           started,
		EndAt:               started.Add(5 * time.Minute),
		CPUCount:            2,
		MemoryMB:            512,
		DiskSizeMB:          1024,
		Metadata:            map[string]string{"sandbox Id": "x&y=z", "ключ": "值 ✓", "": "empty key"},
		EnvVars:             map[string]string{"PATH": "/usr/bin", "QUOTE": `a"b'c`},
		EnvdAccessToken:     "envd-token",
		Secure:              true,
		TrafficAccessToken:  "traffic-token",
		AllowInternetAccess: ptr(false),
		AutoPause:           true,
		Network:             json.RawMessage(`{"allowOut":["example.com"],"allowPublicTraffic":false}`),
		Backend:             "jail",
		BackendState:        json.RawMessage(`{"pid":1234,"cgroup":"/sys/fs/cgroup/as/ifull"}`),
		Timeout:             5 * time.Minute,
		AutoPauseFiles:      true,
		AutoResume:          true,
		PausedAs:            PausedFiles,
		SnapshotID:          "sabc",
		ResumedBy:           "traffic",
		Reboots:             3,
		VolumeMounts:        []VolumeMount{{Name: "data", Path: "/mnt/data"}},
	}
	tests := []struct {
		name string
		in   Sandbox
	}{
		{"every field", full},
		{"minimal", testSandbox("imin", started)},
		{"allow internet true", func() Sandbox { sb := testSandbox("itrue", started); sb.AllowInternetAccess = ptr(true); return sb }()},
		{"killed with reason", func() Sandbox {
			sb := testSandbox("ikilled", started)
			sb.State, sb.Reason = StateKilled, ReasonOOM
			return sb
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := openTest(t)
			ctx := context.Background()
			now := time.Date(2025, 3, 4, 6, 0, 0, 1, time.UTC)
			fakeClock(s, &now)

			created, err := s.CreateSandbox(ctx, tc.in)
			if err != nil {
				t.Fatalf("CreateSandbox: %v", err)
			}
			want := tc.in
			want.StartedAt = tc.in.StartedAt.UTC()
			if !tc.in.EndAt.IsZero() {
				want.EndAt = tc.in.EndAt.UTC()
			}
			want.UpdatedAt = now
			if diff := cmpSandbox(want, created); diff != "" {
				t.Errorf("CreateSandbox result (-want +got):\n%s", diff)
			}
			got, err := s.GetSandbox(ctx, tc.in.ID)
			if err != nil {
				t.Fatalf("GetSandbox: %v", err)
			}
			if diff := cmpSandbox(want, got); diff != "" {
				t.Errorf("GetSandbox (-want +got):\n%s", diff)
			}

			// Change every mutable field through UpdateSandbox.
			now = now.Add(time.Second)
			upd, err := s.UpdateSandbox(ctx, tc.in.ID, func(sb *Sandbox) error {
				sb.TemplateID, sb.Alias = "tmpl-456", "other"
				sb.State, sb.Reason = StateError, "envd did not start: timeout"
				sb.StartedAt = sb.StartedAt.Add(time.Millisecond)
				sb.EndAt = time.Time{}
				sb.CPUCount, sb.MemoryMB, sb.DiskSizeMB = 4, 2048, 4096
				sb.Metadata = map[string]string{"k": "v"}
				sb.EnvVars = nil
				sb.EnvdAccessToken, sb.TrafficAccessToken = "e2", "t2"
				sb.Secure = !sb.Secure
				sb.AllowInternetAccess = nil
				sb.AutoPause = !sb.AutoPause
				sb.Network = json.RawMessage(`{}`)
				sb.Backend = "gvisor"
				sb.BackendState = nil
				sb.Timeout, sb.AutoPauseFiles, sb.AutoResume = time.Hour, !sb.AutoPauseFiles, !sb.AutoResume
				sb.PausedAs, sb.SnapshotID, sb.ResumedBy, sb.Reboots = PausedOnDisk, "snew", "connect", 7
				sb.VolumeMounts = []VolumeMount{{Name: "v2", Path: "/v2"}}
				return nil
			})
			if err != nil {
				t.Fatalf("UpdateSandbox: %v", err)
			}
			got, err = s.GetSandbox(ctx, tc.in.ID)
			if err != nil {
				t.Fatalf("GetSandbox after update: %v", err)
			}
			if diff := cmpSandbox(upd, got); diff != "" {
				t.Errorf("UpdateSandbox result vs stored (-want +got):\n%s", diff)
			}
			wantUpd := Sandbox{
				ID: tc.in.ID, TemplateID: "tmpl-456", Alias: "other", State: StateError,
				Reason: "envd did not start: timeout", StartedAt: want.StartedAt.Add(time.Millisecond),
				CPUCount: 4, MemoryMB: 2048, DiskSizeMB: 4096, Metadata: map[string]string{"k": "v"},
				EnvdAccessToken: "e2", Secure: !tc.in.Secure, TrafficAccessToken: "t2", AutoPause: !tc.in.AutoPause,
				Network: json.RawMessage(`{}`), Backend: "gvisor", UpdatedAt: now,
				Timeout: time.Hour, AutoPauseFiles: !tc.in.AutoPauseFiles, AutoResume: !tc.in.AutoResume,
				PausedAs: PausedOnDisk, SnapshotID: "snew", ResumedBy: "connect", Reboots: 7,
				VolumeMounts: []VolumeMount{{Name: "v2", Path: "/v2"}},
			}
			if diff := cmpSandbox(wantUpd, got); diff != "" {
				t.Errorf("after update (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCreateSandboxErrors(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := time.Now()
	if _, err := s.CreateSandbox(ctx, testSandbox("idup", now)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(*Sandbox)
		want   error
	}{
		{"duplicate id", func(sb *Sandbox) { sb.ID = "idup" }, ErrExists},
		{"empty id", func(sb *Sandbox) { sb.ID = "" }, ErrInvalid},
		{"empty template", func(sb *Sandbox) { sb.TemplateID = "" }, ErrInvalid},
		{"unknown state", func(sb *Sandbox) { sb.State = "sleeping" }, ErrInvalid},
		{"malformed network", func(sb *Sandbox) { sb.Network = json.RawMessage(`{`) }, ErrInvalid},
		{"malformed backend state", func(sb *Sandbox) { sb.BackendState = json.RawMessage(`nope`) }, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sb := testSandbox("inew", now)
			tc.mutate(&sb)
			if _, err := s.CreateSandbox(ctx, sb); !errors.Is(err, tc.want) {
				t.Errorf("CreateSandbox error = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCreateSandboxDefaultsStartedAt(t *testing.T) {
	s, _ := openTest(t)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	fakeClock(s, &now)
	sb, err := s.CreateSandbox(context.Background(), testSandbox("i1", time.Time{}))
	if err != nil {
		t.Fatal(err)
	}
	if !sb.StartedAt.Equal(now) {
		t.Errorf("StartedAt = %v, want %v", sb.StartedAt, now)
	}
}

func TestNarrowSetters(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	fakeClock(s, &now)
	if _, err := s.CreateSandbox(ctx, testSandbox("i1", now)); err != nil {
		t.Fatal(err)
	}

	now = now.Add(time.Second)
	if err := s.SetState(ctx, "i1", StateKilled, ReasonTimeout); err != nil {
		t.Fatalf("SetState: %v", err)
	}
	end := now.Add(time.Hour)
	if err := s.SetEndAt(ctx, "i1", end); err != nil {
		t.Fatalf("SetEndAt: %v", err)
	}
	if err := s.SetBackendState(ctx, "i1", json.RawMessage(`{"netns":"/run/netns/i1"}`)); err != nil {
		t.Fatalf("SetBackendState: %v", err)
	}
	got, err := s.GetSandbox(ctx, "i1")
	if err != nil {
		t.Fatal(err)
	}
	want := testSandbox("i1", now.Add(-time.Second))
	want.State, want.Reason, want.EndAt = StateKilled, ReasonTimeout, end
	want.BackendState = json.RawMessage(`{"netns":"/run/netns/i1"}`)
	want.UpdatedAt = now
	if diff := cmpSandbox(want, got); diff != "" {
		t.Errorf("after setters (-want +got):\n%s", diff)
	}

	// Clearing.
	if err := s.SetEndAt(ctx, "i1", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetBackendState(ctx, "i1", nil); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetSandbox(ctx, "i1")
	if !got.EndAt.IsZero() || got.BackendState != nil {
		t.Errorf("after clearing: EndAt = %v, BackendState = %s; want both unset", got.EndAt, got.BackendState)
	}

	errTests := []struct {
		name string
		err  error
		want error
	}{
		{"SetState unknown id", s.SetState(ctx, "nope", StateRunning, ""), ErrNotFound},
		{"SetState bad state", s.SetState(ctx, "i1", "bogus", ""), ErrInvalid},
		{"SetEndAt unknown id", s.SetEndAt(ctx, "nope", now), ErrNotFound},
		{"SetBackendState unknown id", s.SetBackendState(ctx, "nope", nil), ErrNotFound},
		{"SetBackendState malformed", s.SetBackendState(ctx, "i1", json.RawMessage(`[`)), ErrInvalid},
	}
	for _, tc := range errTests {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: error = %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}

func TestGetSandboxNotFound(t *testing.T) {
	s, _ := openTest(t)
	_, err := s.GetSandbox(context.Background(), "nope")
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSandbox error = %v, want ErrNotFound", err)
	}
}

func TestUpdateSandboxErrors(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	orig, err := s.CreateSandbox(ctx, testSandbox("i1", time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	errAlreadyPaused := errors.New("already paused")
	tests := []struct {
		name string
		id   string
		fn   func(*Sandbox) error
		want error
	}{
		{"unknown id", "nope", func(*Sandbox) error { return nil }, ErrNotFound},
		{"fn refuses", "i1", func(sb *Sandbox) error { sb.State = StatePaused; return errAlreadyPaused }, errAlreadyPaused},
		{"id changed", "i1", func(sb *Sandbox) error { sb.ID = "i2"; return nil }, ErrInvalid},
		{"bad state", "i1", func(sb *Sandbox) error { sb.State = "zombie"; return nil }, ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.UpdateSandbox(ctx, tc.id, tc.fn); !errors.Is(err, tc.want) {
				t.Errorf("UpdateSandbox error = %v, want %v", err, tc.want)
			}
			got, err := s.GetSandbox(ctx, "i1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmpSandbox(orig, got); diff != "" {
				t.Errorf("failed update changed the record (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPurgeKilled(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	fakeClock(s, &now)
	for _, id := range []string{"iold", "inew", "irunning"} {
		if _, err := s.CreateSandbox(ctx, testSandbox(id, now)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetState(ctx, "iold", StateKilled, ReasonKilled); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour)
	if err := s.SetState(ctx, "inew", StateKilled, ReasonKilled); err != nil {
		t.Fatal(err)
	}
	n, err := s.PurgeKilled(ctx, now.Add(-time.Minute))
	if err != nil {
		t.Fatalf("PurgeKilled: %v", err)
	}
	if n != 1 {
		t.Errorf("PurgeKilled removed %d, want 1", n)
	}
	if _, err := s.GetSandbox(ctx, "iold"); !errors.Is(err, ErrNotFound) {
		t.Errorf("iold after purge: %v, want ErrNotFound", err)
	}
	for _, id := range []string{"inew", "irunning"} {
		if _, err := s.GetSandbox(ctx, id); err != nil {
			t.Errorf("%s after purge: %v", id, err)
		}
	}
}

func TestListSandboxesByState(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	states := []State{StateStarting, StateRunning, StatePaused, StateKilled, StateError}
	for i, st := range states {
		sb := testSandbox(fmt.Sprintf("i%d", i), t0.Add(time.Duration(i)*time.Second))
		sb.State = st
		if _, err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		states []State
		want   []string
	}{
		{"all when empty", nil, []string{"i0", "i1", "i2", "i3", "i4"}},
		{"not killed", []State{StateStarting, StateRunning, StatePaused, StateError}, []string{"i0", "i1", "i2", "i4"}},
		{"killed", []State{StateKilled}, []string{"i3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.ListSandboxesByState(ctx, tc.states...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, ids(got)); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := s.ListSandboxesByState(ctx, "bogus"); !errors.Is(err, ErrInvalid) {
		t.Errorf("bogus state: error = %v, want ErrInvalid", err)
	}
}

func TestConcurrentCreates(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			sb := testSandbox(fmt.Sprintf("ic%02d", i), time.Now())
			sb.Metadata = map[string]string{"worker": fmt.Sprint(i)}
			if _, err := s.CreateSandbox(ctx, sb); err != nil {
				errs <- err
				return
			}
			// Interleave reads with the writes.
			if _, err := s.GetSandbox(ctx, sb.ID); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent create: %v", err)
	}
	got, err := s.ListSandboxesByState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Errorf("stored %d sandboxes, want %d", len(got), n)
	}
}

func ids(sbs []Sandbox) []string {
	var out []string // nil when empty, so cmp treats "no sandboxes" alike
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return out
}
