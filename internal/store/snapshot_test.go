package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func testSnapshot(id, name, tag string) Snapshot {
	return Snapshot{ID: id, Name: name, Tag: tag, Listed: true, Kind: "files", SandboxID: "isrc",
		TemplateID: "base-1", Alias: "base", Backend: "jail", CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, SizeBytes: 100}
}

func TestSnapshots(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	fakeClock(s, &now)
	if _, err := s.CreateSandbox(ctx, testSandbox("isrc", now)); err != nil {
		t.Fatal(err)
	}
	var made []Snapshot
	for _, sn := range []Snapshot{testSnapshot("s1", "", DefaultTag), testSnapshot("s2", "mine", DefaultTag), testSnapshot("s3", "mine", "v2")} {
		now = now.Add(time.Second)
		got, _, err := s.CreateSnapshot(ctx, sn, nil)
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, got)
	}
	if got, err := s.GetSnapshot(ctx, "s2"); err != nil || !cmp.Equal(got, made[1]) {
		t.Errorf("GetSnapshot = %+v, %v; want %+v", got, err, made[1])
	}
	for ref, want := range map[string]string{"s1:default": "s1", "s1": "s1", "mine": "s2", "mine:default": "s2", "mine:v2": "s3"} {
		if got, err := s.FindSnapshot(ctx, ref); err != nil || got.ID != want {
			t.Errorf("FindSnapshot(%q) = %s, %v; want %s", ref, got.ID, err, want)
		}
	}
	for _, ref := range []string{"s1:v2", "s2", "nope"} {
		if _, err := s.FindSnapshot(ctx, ref); !errors.Is(err, ErrNotFound) {
			t.Errorf("FindSnapshot(%q) = %v, want ErrNotFound", ref, err)
		}
	}
	if got, _ := s.ListedSnapshotBytes(ctx); got != 300 {
		t.Errorf("ListedSnapshotBytes = %d", got)
	}

	// A newer mine:default unlists the older.
	now = now.Add(time.Second)
	if _, _, err := s.CreateSnapshot(ctx, testSnapshot("s4", "mine", DefaultTag), nil); err != nil {
		t.Fatal(err)
	}
	old, _ := s.GetSnapshot(ctx, "s2")
	if old.Listed || old.Name != "" {
		t.Errorf("the older mine:default: %+v", old)
	}
	var pages [][]string
	q := SnapshotQuery{SandboxID: "isrc", Limit: 2}
	for {
		page, next, err := s.ListSnapshots(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sn := range page {
			ids = append(ids, sn.ID)
		}
		pages = append(pages, ids)
		if next == "" {
			break
		}
		q.NextToken = next
	}
	if d := cmp.Diff([][]string{{"s4", "s3"}, {"s1"}}, pages); d != "" {
		t.Errorf("pages (-want +got):\n%s", d)
	}
	for _, tc := range []struct {
		q    SnapshotQuery
		want int
	}{{SnapshotQuery{Name: "mine"}, 2}, {SnapshotQuery{Name: "mine", Tag: "v2"}, 1}, {SnapshotQuery{Name: "s1"}, 1}, {SnapshotQuery{SandboxID: "inope"}, 0}} {
		if got, _, _ := s.ListSnapshots(ctx, tc.q); len(got) != tc.want {
			t.Errorf("ListSnapshots(%+v) = %d, want %d", tc.q, len(got), tc.want)
		}
	}
	if _, _, err := s.ListSnapshots(ctx, SnapshotQuery{NextToken: "x"}); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("bad token: %v", err)
	}

	// Used by a live sandbox: not unused, not deletable; a pause records
	// both at once.
	unlisted := testSnapshot("s5", "", DefaultTag)
	unlisted.Listed = false
	_, paused, err := s.CreateSnapshot(ctx, unlisted, func(sb *Sandbox) error {
		sb.State, sb.PausedAs, sb.SnapshotID = StatePaused, PausedFiles, "s5"
		return nil
	})
	if err != nil || paused.SnapshotID != "s5" || paused.State != StatePaused {
		t.Fatalf("pause with a snapshot: %+v, %v", paused, err)
	}
	unused, err := s.UnusedSnapshots(ctx)
	if err != nil || len(unused) != 1 || unused[0].ID != "s2" {
		t.Errorf("UnusedSnapshots = %+v, %v; want s2", unused, err)
	}
	if err := s.DeleteSnapshots(ctx, []string{"s2", "s5"}); !errors.Is(err, ErrInUse) {
		t.Errorf("delete in use: %v", err)
	}
	if _, err := s.GetSnapshot(ctx, "s2"); err != nil {
		t.Errorf("s2 deleted although the delete failed: %v", err)
	}
	if err := s.SetState(ctx, "isrc", StateKilled, ReasonKilled); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSnapshots(ctx, []string{"s2", "s5", "nope"}); err != nil {
		t.Errorf("delete unused: %v", err)
	}
	ids, _ := s.SnapshotIDs(ctx)
	if d := cmp.Diff(map[string]bool{"s1": true, "s3": true, "s4": true}, ids); d != "" {
		t.Errorf("SnapshotIDs (-want +got):\n%s", d)
	}
	// An update that refuses writes nothing.
	refuse := errors.New("no")
	if _, _, err := s.CreateSnapshot(ctx, testSnapshot("s6", "", DefaultTag), func(*Sandbox) error { return refuse }); err != refuse {
		t.Errorf("refused update: %v", err)
	}
	if _, err := s.GetSnapshot(ctx, "s6"); !errors.Is(err, ErrNotFound) {
		t.Errorf("s6 recorded although its update refused: %v", err)
	}
}
