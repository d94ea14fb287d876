package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTemplateCatalog(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fakeClock(s, &now)

	for _, sb := range []Sandbox{
		{ID: "i1", TemplateID: "demo-0123456789ab", Alias: "demo", State: StateRunning, StartedAt: now},
		{ID: "i2", TemplateID: "demo-0123456789ab", Alias: "demo", State: StateKilled, StartedAt: now.Add(time.Minute)},
		{ID: "i3", TemplateID: "demo-0123456789ab", Alias: "demo", State: StatePaused, StartedAt: now.Add(2 * time.Minute)},
		{ID: "i4", TemplateID: "base-0123456789ab", Alias: "base", State: StateError, StartedAt: now},
	} {
		if _, err := s.CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	spawns, err := s.TemplateSpawns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]TemplateSpawn{"demo": {3, now.Add(2 * time.Minute)}, "base": {1, now}}
	if diff := cmp.Diff(want, spawns); diff != "" {
		t.Errorf("TemplateSpawns (-want +got):\n%s", diff)
	}

	sn := testSnapshot("s1", "keep", DefaultTag)
	sn.SandboxID, sn.Alias = "i1", "demo"
	if _, _, err := s.CreateSnapshot(ctx, sn, nil); err != nil {
		t.Fatal(err)
	}
	sbs, sns, err := s.TemplateUsers(ctx, "demo")
	if err != nil || !cmp.Equal(sbs, []string{"i1", "i3"}) || !cmp.Equal(sns, []string{"keep:default"}) {
		t.Errorf("TemplateUsers(demo) = %q, %q, %v; want the running and the paused sandbox, and the snapshot", sbs, sns, err)
	}
	if sbs, sns, err := s.TemplateUsers(ctx, "base"); err != nil || len(sbs)+len(sns) != 0 {
		t.Errorf("TemplateUsers(base) = %q, %q, %v; want none (the sandbox ended)", sbs, sns, err)
	}

	b1, _ := s.CreateTemplateBuild(ctx, "demo", []string{DefaultTag}, BuildResources{})
	b2, _ := s.CreateTemplateBuild(ctx, "other", []string{DefaultTag}, BuildResources{})
	if err := s.StartTemplateBuild(ctx, "demo", b1.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishTemplateBuild(ctx, b1.ID, BuildResult{Status: BuildReady, VersionID: "demo-0123456789ab",
		Logs: []BuildLogEntry{{Time: now, Level: "info", Message: "done"}}}); err != nil {
		t.Fatal(err)
	}
	all, err := s.AllTemplateBuilds(ctx)
	if err != nil || len(all) != 2 || all[0].ID != b1.ID || all[1].ID != b2.ID {
		t.Fatalf("AllTemplateBuilds = %+v, %v", all, err)
	}
	if err := s.DeleteTemplateBuilds(ctx, "demo"); err != nil {
		t.Fatal(err)
	}
	if known, _ := s.TemplateKnown(ctx, "demo"); known {
		t.Error("demo still has builds")
	}
	if tags, _ := s.TemplateTags(ctx, "demo"); len(tags) != 0 {
		t.Errorf("demo's tags outlived its builds: %+v", tags)
	}
	if _, err := s.TemplateVersion(ctx, "demo"); !errors.Is(err, ErrNotFound) {
		t.Errorf("TemplateVersion(demo) after the delete = %v, want ErrNotFound", err)
	}
	if err := s.DeleteTemplateBuilds(ctx, "demo"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete = %v, want ErrNotFound", err)
	}
	if known, _ := s.TemplateKnown(ctx, "other"); !known {
		t.Error("deleting demo took other's build")
	}
}
