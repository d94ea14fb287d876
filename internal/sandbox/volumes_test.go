package sandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/volume"
)

// fakeVolumes is a Volumes over host directories /vol/<name> (images
// /vol/<name>.ext4) of the volumes recorded in the store, which keeps
// the loans of the images as a volume.Attacher does.
type fakeVolumes struct {
	mu      sync.Mutex
	names   map[string]bool
	holders map[string]string
}

// newFakeVolumes records volumes names in st and returns their fake.
func newFakeVolumes(t *testing.T, st *store.Store, names ...string) *fakeVolumes {
	t.Helper()
	f := &fakeVolumes{names: map[string]bool{}, holders: map[string]string{}}
	for _, n := range names {
		if _, err := st.CreateVolume(context.Background(), store.Volume{ID: "id-" + n, Name: n, SizeBytes: 1 << 20}); err != nil {
			t.Fatal(err)
		}
		f.names[n] = true
	}
	return f
}

func (f *fakeVolumes) Path(_ context.Context, name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !f.names[name]:
		return "", fmt.Errorf("volume %s: %w", name, volume.ErrNotFound)
	case f.holders[name] != "":
		return "", fmt.Errorf("volume %s is attached to %s: %w", name, f.holders[name], volume.ErrInUse)
	}
	return "/vol/" + name, nil
}

func (f *fakeVolumes) Attach(_ context.Context, name, holder string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch h := f.holders[name]; {
	case !f.names[name]:
		return "", fmt.Errorf("volume %s: %w", name, volume.ErrNotFound)
	case h != "" && h != holder:
		return "", fmt.Errorf("volume %s is attached to %s: %w", name, h, volume.ErrInUse)
	}
	f.holders[name] = holder
	return "/vol/" + name + ".ext4", nil
}

func (f *fakeVolumes) Detach(_ context.Context, name, holder string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holders[name] == holder {
		delete(f.holders, name)
	}
	return nil
}

func (f *fakeVolumes) Attachments(context.Context) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.holders), nil
}

func (f *fakeVolumes) holder(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holders[name]
}

func TestVolumeMounts(t *testing.T) {
	fake := isolation.NewFakeNamed("fake", isolation.Capabilities{Pause: true, Volumes: true, Snapshot: isolation.FilesSnapshot})
	dir := t.TempDir()
	e := newEnvOn(t, fake, func(c *Config) {
		c.Volumes = newFakeVolumes(t, c.Store, "data", "cache")
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
	// Directories are shared: a second sandbox mounts them too, and so
	// does a fork.
	other := e.create(t, CreateRequest{VolumeMounts: mounts[:1]})
	if got := e.fake.Instance(other.ID).Spec().Volumes; len(got) != 1 || got[0].Source != "/vol/data" {
		t.Errorf("a second sandbox's volumes: %+v", got)
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
	e := newEnv(t, func(c *Config) { c.Volumes = newFakeVolumes(t, c.Store, "data") })
	_, err := e.m.Create(context.Background(), CreateRequest{Template: "base", Timeout: time.Minute,
		VolumeMounts: []store.VolumeMount{{Name: "data", Path: "/data"}}})
	if !errors.Is(err, ErrInvalid) || err.Error() != "the fake backend cannot mount volumes" {
		t.Errorf("volumes on a backend without: %v", err)
	}
}

// A backend that mounts volume images (a VM) has each volume to one
// sandbox at a time, from its create until it ends, paused to disk or
// not: another sandbox of any backend is refused meanwhile, and so are
// the forks and memory snapshots that would take the volume along; a
// sandbox that ends lets go of it, and so does a restart for one that
// ended while the server was down.
func TestVolumeImages(t *testing.T) {
	vm := isolation.NewFakeNamed("vm", isolation.Capabilities{Pause: true, Volumes: true, VolumeImages: true, Snapshot: isolation.MemorySnapshot})
	jail := isolation.NewFakeNamed("jail", isolation.Capabilities{Pause: true, Volumes: true, Snapshot: isolation.FilesSnapshot})
	otherTmpl := *testTemplates["base"]
	otherTmpl.Name, otherTmpl.ID = "jailed", "jailed-0123456789ab"
	var vols *fakeVolumes
	e := newEnvOn(t, vm, func(c *Config) {
		vols = newFakeVolumes(t, c.Store, "data", "spare")
		c.Volumes = vols
		c.SnapshotDir = t.TempDir()
		c.OtherBackends = []isolation.Backend{jail}
		c.Templates = fakeTemplates{"base": testTemplates["base"], "jailed": &otherTmpl}
		c.TemplateBackends = map[string]string{"jailed": "jail"}
	})
	jail.Handle(EnvdPort, e.envd)
	ctx := context.Background()
	create := func(tmpl string, mounts ...store.VolumeMount) (store.Sandbox, error) {
		return e.m.Create(ctx, CreateRequest{Template: tmpl, Timeout: time.Minute, VolumeMounts: mounts})
	}
	data := store.VolumeMount{Name: "data", Path: "/mnt/data"}

	a, err := create("base", data)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]isolation.VolumeMount{{Image: "/vol/data.ext4", Target: "/mnt/data"}}, vm.Instance(a.ID).Spec().Volumes); d != "" {
		t.Errorf("spec volumes (-want +got):\n%s", d)
	}
	if h := vols.holder("data"); h != a.ID {
		t.Errorf("data is held by %q, want %s", h, a.ID)
	}
	for _, tc := range []struct{ tmpl, want string }{
		{"base", "is attached to sandbox " + a.ID},
		{"jailed", "is attached to sandbox " + a.ID},
	} {
		if _, err := create(tc.tmpl, store.VolumeMount{Name: "data", Path: "/data"}); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("a %s sandbox with a VM's volume: %v, want ErrConflict saying %q", tc.tmpl, err, tc.want)
		}
	}
	if _, err := create("base", store.VolumeMount{Name: "spare", Path: "/a"}, store.VolumeMount{Name: "spare", Path: "/b"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "mounted twice") {
		t.Errorf("one volume twice in a VM: %v", err)
	}

	// Its forks would mount it too; a snapshot of it is of its files.
	if _, _, err := e.m.Fork(ctx, a.ID, time.Minute, 1); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "mounts volumes") {
		t.Errorf("Fork of a VM with a volume: %v", err)
	}
	if _, err := e.m.CreateSnapshot(ctx, a.ID, SnapshotRequest{Mode: ModeFull}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "use mode filesystem") {
		t.Errorf("full snapshot of a VM with a volume: %v", err)
	}
	sn, err := e.m.CreateSnapshot(ctx, a.ID, SnapshotRequest{})
	if err != nil || sn.Kind != isolation.FilesSnapshot.String() {
		t.Fatalf("snapshot of a VM with a volume: %+v, %v; want its files", sn, err)
	}
	// Paused to disk, it keeps its volume, and resumes with it.
	if err := e.m.Pause(ctx, a.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := create("jailed", data); !errors.Is(err, ErrConflict) {
		t.Errorf("a jail with the volume of a paused VM: %v, want ErrConflict", err)
	}
	if _, _, err := e.m.Connect(ctx, a.ID, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	if h := vols.holder("data"); h != a.ID {
		t.Errorf("data is held by %q after the resume, want %s", h, a.ID)
	}

	// A memory snapshot restores no volumes.
	plain, err := create("base")
	if err != nil {
		t.Fatal(err)
	}
	full, err := e.m.CreateSnapshot(ctx, plain.ID, SnapshotRequest{})
	if err != nil || full.Kind != isolation.MemorySnapshot.String() {
		t.Fatalf("snapshot of a VM without volumes: %+v, %v", full, err)
	}
	_, err = e.m.Create(ctx, CreateRequest{Template: full.ID, Timeout: time.Minute, VolumeMounts: []store.VolumeMount{{Name: "spare", Path: "/s"}}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cannot mount volumes") {
		t.Errorf("volumes in a sandbox from a memory snapshot: %v", err)
	}
	// From the files snapshot, with the volume once its holder is gone.
	if err := e.m.Kill(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if h := vols.holder("data"); h != "" {
		t.Errorf("data is held by %q after its sandbox was killed", h)
	}
	b, err := e.m.Create(ctx, CreateRequest{Template: sn.ID, Timeout: time.Minute, VolumeMounts: []store.VolumeMount{data}})
	if err != nil {
		t.Fatal(err)
	}
	if h := vols.holder("data"); h != b.ID {
		t.Errorf("data is held by %q, want %s", h, b.ID)
	}

	// A sandbox that dies while the server is down lets go of it at the
	// restart.
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	vm.Instance(b.ID).Crash(isolation.Exit{Reason: "gone"})
	e.m = e.start(t)
	if h := vols.holder("data"); h != "" {
		t.Errorf("data is held by %q after its sandbox was lost in a restart", h)
	}
	if _, err := create("jailed", data); err != nil {
		t.Errorf("a jail with the volume once the VM is gone: %v", err)
	}
}
