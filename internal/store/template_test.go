package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTemplateBuildLifecycle(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fakeClock(s, &now)

	if known, err := s.TemplateKnown(ctx, "demo"); err != nil || known {
		t.Fatalf("TemplateKnown before any build: %v, %v", known, err)
	}
	b, err := s.CreateTemplateBuild(ctx, "demo", []string{"default", "v1"}, BuildResources{CPUCount: 4, MemoryMB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.ID) != 36 || b.ID[14] != '4' || b.Status != BuildWaiting {
		t.Errorf("new build %+v", b)
	}
	if known, _ := s.TemplateKnown(ctx, "demo"); !known {
		t.Error("TemplateKnown after a build request: false")
	}
	if got, err := s.GetTemplateBuild(ctx, "demo", b.ID); err != nil || got.Resources != (BuildResources{CPUCount: 4, MemoryMB: 1024}) {
		t.Errorf("stored build resources: %+v, %v; want 4 CPUs and 1024 MB", got.Resources, err)
	}
	if _, err := s.CreateTemplateBuild(ctx, "demo", []string{"default"}, BuildResources{CPUCount: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative cpu count: %v, want ErrInvalid", err)
	}
	if _, err := s.GetTemplateBuild(ctx, "other", b.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("build under another template: %v, want ErrNotFound", err)
	}
	if err := s.FinishTemplateBuild(ctx, b.ID, BuildResult{Status: BuildReady, VersionID: "demo-0123456789ab"}); !errors.Is(err, ErrBuildState) {
		t.Errorf("finishing a waiting build: %v, want ErrBuildState", err)
	}
	if err := s.StartTemplateBuild(ctx, "demo", b.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.StartTemplateBuild(ctx, "demo", b.ID); !errors.Is(err, ErrBuildState) {
		t.Errorf("second start: %v, want ErrBuildState", err)
	}
	if _, err := s.TemplateVersion(ctx, "demo"); !errors.Is(err, ErrNotFound) {
		t.Errorf("version before the build is ready: %v, want ErrNotFound", err)
	}
	logs := []BuildLogEntry{
		{Time: now, Level: "info", Message: "RUN true", Step: "1"},
		{Time: now, Level: "info", Message: "template ready"},
	}
	now = now.Add(time.Minute)
	if err := s.FinishTemplateBuild(ctx, b.ID, BuildResult{Status: BuildReady, VersionID: "demo-0123456789ab", Logs: logs}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTemplateBuild(ctx, "demo", b.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := TemplateBuild{ID: b.ID, Template: "demo", Status: BuildReady, Tags: []string{"default", "v1"}, Resources: BuildResources{CPUCount: 4, MemoryMB: 1024},
		VersionID: "demo-0123456789ab", Reason: BuildReason{LogTail: []string{}},
		CreatedAt: now.Add(-time.Minute), StartedAt: now.Add(-time.Minute), FinishedAt: now}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("finished build (-want +got):\n%s", diff)
	}
	page, err := s.TemplateBuildLogs(ctx, b.ID, 1, 10)
	if err != nil || len(page) != 1 || page[0] != logs[1] {
		t.Errorf("logs from 1: %+v, %v", page, err)
	}
	for _, ref := range []string{"demo", "demo:v1", "demo:default"} {
		if v, err := s.TemplateVersion(ctx, ref); err != nil || v != "demo-0123456789ab" {
			t.Errorf("TemplateVersion(%q) = %q, %v", ref, v, err)
		}
	}

	// A second build that fails keeps the tags where they were.
	b2, _ := s.CreateTemplateBuild(ctx, "demo", []string{"default"}, BuildResources{})
	s.StartTemplateBuild(ctx, "demo", b2.ID)
	reason := BuildReason{Message: "step 2 failed", Step: "2", LogTail: []string{"boom"}}
	if err := s.FinishTemplateBuild(ctx, b2.ID, BuildResult{Status: BuildError, Reason: reason}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetTemplateBuild(ctx, "demo", b2.ID); !cmp.Equal(got.Reason, reason) || got.Status != BuildError {
		t.Errorf("failed build %+v", got)
	}
	tags, err := s.TemplateTags(ctx, "demo")
	if err != nil || len(tags) != 2 || tags[0].BuildID != b.ID || tags[1].BuildID != b.ID {
		t.Errorf("tags after a failed build: %+v, %v", tags, err)
	}

	// Tags move and go.
	if id, err := s.AssignTemplateTags(ctx, "demo", "v1", []string{"prod"}); err != nil || id != b.ID {
		t.Errorf("AssignTemplateTags = %q, %v", id, err)
	}
	if _, err := s.AssignTemplateTags(ctx, "demo", "nope", []string{"x"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("assign from an unknown tag: %v, want ErrNotFound", err)
	}
	if err := s.RemoveTemplateTags(ctx, "demo", []string{"prod", "nope"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("removing an unknown tag: %v, want ErrNotFound", err)
	}
	if v, err := s.TemplateVersion(ctx, "demo:prod"); err != nil || v != "demo-0123456789ab" {
		t.Errorf("a refused removal removed prod: %q, %v", v, err)
	}
	if err := s.RemoveTemplateTags(ctx, "demo", []string{"prod"}); err != nil {
		t.Error(err)
	}
	if _, err := s.TemplateVersion(ctx, "demo:prod"); !errors.Is(err, ErrNotFound) {
		t.Errorf("removed tag still resolves: %v", err)
	}
}

func TestFailUnfinishedTemplateBuilds(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	waiting, _ := s.CreateTemplateBuild(ctx, "a", []string{"default"}, BuildResources{})
	building, _ := s.CreateTemplateBuild(ctx, "a", []string{"default"}, BuildResources{})
	if err := s.StartTemplateBuild(ctx, "a", building.ID); err != nil {
		t.Fatal(err)
	}
	n, err := s.FailUnfinishedTemplateBuilds(ctx, "the server stopped")
	if err != nil || n != 1 {
		t.Fatalf("FailUnfinishedTemplateBuilds = %d, %v; want 1", n, err)
	}
	if b, _ := s.GetTemplateBuild(ctx, "a", building.ID); b.Status != BuildError || b.Reason.Message != "the server stopped" {
		t.Errorf("interrupted build %+v", b)
	}
	if b, _ := s.GetTemplateBuild(ctx, "a", waiting.ID); b.Status != BuildWaiting {
		t.Errorf("waiting build %+v", b)
	}
}
