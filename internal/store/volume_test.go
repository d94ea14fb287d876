package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestVolumes(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	fakeClock(s, &now)
	a, err := s.CreateVolume(ctx, Volume{ID: "v-a", Name: "a", SizeBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	if _, err := s.CreateVolume(ctx, Volume{ID: "v-b", Name: "b", SizeBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateVolume(ctx, Volume{ID: "v-c", Name: "a", SizeBytes: 1}); !errors.Is(err, ErrExists) {
		t.Errorf("a second volume named a: %v", err)
	}
	if got, err := s.GetVolume(ctx, "v-a"); err != nil || !cmp.Equal(got, a) {
		t.Errorf("GetVolume = %+v, %v; want %+v", got, err, a)
	}
	if got, err := s.VolumeByName(ctx, "b"); err != nil || got.ID != "v-b" {
		t.Errorf("VolumeByName(b) = %+v, %v", got, err)
	}
	if _, err := s.GetVolume(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetVolume(nope) = %v", err)
	}
	list, err := s.ListVolumes(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "a" {
		t.Errorf("ListVolumes = %+v, %v", list, err)
	}

	sb := testSandbox("iuser", now)
	sb.VolumeMounts = []VolumeMount{{Name: "a", Path: "/data"}}
	if _, err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVolume(ctx, "v-a"); !errors.Is(err, ErrInUse) {
		t.Errorf("delete a mounted volume: %v", err)
	}
	if got, err := s.VolumeUsers(ctx, "a"); err != nil || !cmp.Equal(got, []VolumeUser{{SandboxID: "iuser", Backend: sb.Backend}}) {
		t.Errorf("VolumeUsers(a) = %+v, %v", got, err)
	}
	if got, err := s.VolumeUsers(ctx, "b"); err != nil || len(got) != 0 {
		t.Errorf("VolumeUsers(b) = %+v, %v", got, err)
	}
	if err := s.DeleteVolume(ctx, "v-b"); err != nil {
		t.Errorf("delete an unmounted volume: %v", err)
	}
	if err := s.SetState(ctx, "iuser", StateKilled, ReasonKilled); err != nil {
		t.Fatal(err)
	}
	if got, err := s.VolumeUsers(ctx, "a"); err != nil || len(got) != 0 {
		t.Errorf("VolumeUsers(a) once its sandbox is killed = %+v, %v", got, err)
	}
	if err := s.DeleteVolume(ctx, "v-a"); err != nil {
		t.Errorf("delete once its sandbox is killed: %v", err)
	}
	if list, _ := s.ListVolumes(ctx); len(list) != 0 {
		t.Errorf("left: %+v", list)
	}
}
