package sandbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/volume"
)

// fakeVolumes is a Volumes over a map of names to host directories.
type fakeVolumes map[string]string

func (f fakeVolumes) Path(_ context.Context, name string) (string, error) {
	if dir, ok := f[name]; ok {
		return dir, nil
	}
	return "", fmt.Errorf("volume %s: %w", name, volume.ErrNotFound)
}

func TestVolumeMounts(t *testing.T) {
	fake := isolation.NewFakeNamed("fake", isolation.Capabilities{Pause: true, Volumes: true, Snapshot: isolation.FilesSnapshot})
	dir := t.TempDir()
	e := newEnvOn(t, fake, func(c *Config) {
		c.Volumes = fakeVolumes{"data": "/vol/data", "cache": "/vol/cache"}
		c.SnapshotDir = dir
	})
	ctx := context.Background()
	mounts := []store.VolumeMount{{Name: "data", Path: "/mnt/data"}, {Name: "cache", Path: "/home/user/.cache"}}
	sb := e.create(t, CreateRequest{VolumeMounts: mounts})
	want := []isolation.VolumeMount{{Source: "/vol/data", Target: "/mnt/data"}, {Source: "/vol/cache", Target: "/home/user/.cache"}}
	if d := cmp.Diff(want, e.fake.Instance(sb.ID).Spec().Volumes); d != "" {
		t.Errorf("spec volumes (-want +got):\n%s", d)
	}
	if d := cmp.Diff(mounts, e.record(t, sb.ID).VolumeMounts); d != "" {
		t.Errorf("recorded mounts (-want +got):\n%s", d)
	}
	res, _, err := e.m.Fork(ctx, sb.ID, time.Minute, 1)
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	if d := cmp.Diff(want, e.fake.Instance(res[0].Sandbox.ID).Spec().Volumes); d != "" {
		t.Errorf("a fork's volumes (-want +got):\n%s", d)
	}

	_, err = e.m.Create(ctx, CreateRequest{Template: "base", Timeout: time.Minute, VolumeMounts: []store.VolumeMount{
		{Name: "data", Path: "relative"}, {Name: "data", Path: "/a/../b"}, {Name: "nope", Path: "/x"},
		{Name: "data", Path: "/y"}, {Name: "cache", Path: "/y"}, {Name: "data", Path: "/proc/x"},
	}})
	wantMsg := "invalid mounts:\n\t- volume mount #0: path must be absolute\n" +
		"\t- volume mount #1: path must not contain any '.' or '..' components\n" +
		"\t- volume mount #2: volume 'nope' not found\n" +
		"\t- volume mount #4: path '/y' is already used\n" +
		"\t- volume mount #5: path '/proc/x' is reserved: the sandbox's root, /proc, /sys or /dev"
	if !errors.Is(err, ErrInvalid) || err.Error() != wantMsg {
		t.Errorf("bad mounts: %v\nwant %q", err, wantMsg)
	}
}

func TestVolumeMountsNeedTheBackend(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Volumes = fakeVolumes{"data": "/vol/data"} })
	_, err := e.m.Create(context.Background(), CreateRequest{Template: "base", Timeout: time.Minute,
		VolumeMounts: []store.VolumeMount{{Name: "data", Path: "/data"}}})
	if !errors.Is(err, ErrInvalid) || err.Error() != "the fake backend cannot mount volumes" {
		t.Errorf("volumes on a backend without: %v", err)
	}
}
