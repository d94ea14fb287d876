package vm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/vminit"
)

// A snapshot is a VM saved at one instant: with its memory and device
// state (memory) when it is a MemorySnapshot, and always its disk
// (disk.qcow2, whose backing file is the template image, as every
// overlay's). Two kinds of VM are saved: a sandbox (Instance.Snapshot),
// and, for boot from a snapshot, a VM of a shape booted once envd was
// ready in it (makeSnapshot). A sandbox started from a memory snapshot
// gets a copy of the disk, the saved state loaded, and then an identity
// of its own (vminit.Identity) and envd a token of its own, before its
// code goes on: no cold boot. One started from the files alone boots
// cold over the copied disk.
type snapshot struct {
	dir  string
	Kind isolation.SnapshotKind `json:"kind"`
	// Token is what the saved envd requires, for a boot snapshot; for a
	// sandbox's, the caller says (isolation.SnapshotSource).
	Token string `json:"token,omitempty"`
	// MAC is the saved NIC's: a restored VM's devices must be the same.
	MAC string `json:"mac"`
	// The saved VM's shape, which a restore must match, and the template
	// image its disk is backed by (fileKey).
	CPUCount int    `json:"cpu_count"`
	MemoryMB int    `json:"memory_mb"`
	DiskMB   int    `json:"disk_mb"`
	Image    string `json:"image"`
	// Volumes is how many volume disks the saved VM had: a memory
	// snapshot's guest has them mounted, so it restores only with as
	// many (the same volumes: the sandbox's own, paused to disk).
	Volumes int `json:"volumes,omitempty"`
}

func (s *snapshot) memory() string { return filepath.Join(s.dir, "memory") }
func (s *snapshot) disk() string   { return filepath.Join(s.dir, overlayFile) }

// snapshotMeta is the file written last into a snapshot's directory:
// without it the snapshot is incomplete.
const snapshotMeta = "snapshot.json"

// snapshotVersion changes when what a boot snapshot holds or how it is
// made does, so that older ones are not restored.
const snapshotVersion = "2"

// snapshotKey names the boot snapshot of p's shape: everything the saved
// guest's state depends on.
func (b *Backend) snapshotKey(p *plan) (string, error) {
	parts := []string{snapshotVersion, b.cfg.Accel, b.cmdline(), p.initrd, p.tools,
		strconv.Itoa(p.spec.Resources.CPUCount), strconv.Itoa(p.spec.Resources.MemoryMB),
		strconv.Itoa(p.spec.Resources.DiskSizeMB), strconv.Itoa(guestPids(p.spec.Resources)),
		strconv.FormatBool(b.cfg.NoNewPrivs)}
	for _, f := range []string{b.boot.kernel.Vmlinuz, b.cfg.QEMU, p.spec.RootImage} {
		k, err := fileKey(f)
		if err != nil {
			return "", fmt.Errorf("naming the memory snapshot: %w", err)
		}
		parts = append(parts, k)
	}
	return hashKey(parts...), nil
}

// makeSnapshot boots a VM of p's shape, waits for envd, and saves it
// into dir.
func (b *Backend) makeSnapshot(ctx context.Context, p *plan, key, dir string) (*snapshot, error) {
	sp := *p
	sp.spec.ID = "snapshot-" + key
	sp.spec.Hostname = "snapshot"
	sp.spec.EnvdAccessToken = newToken()
	inst, err := b.start(ctx, &sp, nil)
	if err != nil {
		return nil, err
	}
	defer inst.Stop(ctx)
	if err := isolation.WaitEnvd(ctx, inst); err != nil {
		return nil, fmt.Errorf("waiting for envd: %w%s", err, inst.console.quote())
	}
	return inst.save(ctx, dir, isolation.MemorySnapshot, sp.spec.EnvdAccessToken)
}

// Snapshot implements isolation.Instance. Both kinds stop the vCPUs and
// save the VM's state (QMP migrate): that is also what has QEMU write
// back and let go of the disk, so that its copy is of one instant. A
// files snapshot sends the state to /dev/null, and has the guest write
// back what it has cached first (saveFiles).
func (inst *Instance) Snapshot(ctx context.Context, dir string, kind isolation.SnapshotKind) error {
	if kind != isolation.FilesSnapshot && kind != isolation.MemorySnapshot {
		return fmt.Errorf("snapshotting sandbox %s: a %s snapshot: %w", inst.id, kind, errors.ErrUnsupported)
	}
	inst.ops.Lock()
	defer inst.ops.Unlock()
	inst.mu.Lock()
	paused := inst.paused
	inst.mu.Unlock()
	var err error
	if kind == isolation.FilesSnapshot {
		err = inst.saveFiles(ctx, dir, paused)
	} else {
		_, err = inst.save(ctx, dir, kind, "")
		if !paused {
			// Also after a failed save: the sandbox runs on.
			err = errors.Join(err, inst.qmp.Cont(context.WithoutCancel(ctx)))
		}
	}
	inst.mu.Lock()
	// What Stop leaves as it is (syncVolumes); a files snapshot ran the
	// guest.
	inst.memorySaved = paused && kind == isolation.MemorySnapshot && err == nil
	inst.mu.Unlock()
	if err != nil {
		return fmt.Errorf("snapshotting sandbox %s: %w", inst.id, err)
	}
	return nil
}

// saveFiles saves the disk alone. What the guest wrote last may still be
// in its page cache, in its memory, which this snapshot leaves out: its
// init writes it back and holds further writes (vminit.OpFreeze) while the
// disk is saved. A paused guest runs for that time.
func (inst *Instance) saveFiles(ctx context.Context, dir string, paused bool) (err error) {
	bg := context.WithoutCancel(ctx)
	if paused {
		if err := inst.qmp.Cont(ctx); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, inst.qmp.Stop(bg)) }()
	}
	if err := inst.request(ctx, vminit.Request{Op: vminit.OpFreeze}); err != nil {
		return err
	}
	_, err = inst.save(ctx, dir, isolation.FilesSnapshot, "")
	// Running again, and then writing again, also after a failed save.
	if cerr := inst.qmp.Cont(bg); cerr != nil {
		return errors.Join(err, cerr)
	}
	return errors.Join(err, inst.request(bg, vminit.Request{Op: vminit.OpThaw}))
}

// save stops the VM and saves it into dir as a snapshot of kind, whose
// envd requires token (empty: the caller knows it). The VM is left
// stopped.
func (inst *Instance) save(ctx context.Context, dir string, kind isolation.SnapshotKind, token string) (*snapshot, error) {
	image, err := fileKey(inst.state.Image)
	if err != nil {
		return nil, err
	}
	if err := inst.qmp.Stop(ctx); err != nil {
		return nil, err
	}
	snap := &snapshot{
		dir: dir, Kind: kind, Token: token, MAC: inst.state.MAC, Image: image,
		CPUCount: inst.state.CPUCount, MemoryMB: inst.state.MemoryMB, DiskMB: inst.state.DiskMB,
		Volumes: inst.state.Volumes,
	}
	memPath := os.DevNull
	flag := os.O_WRONLY
	if kind == isolation.MemorySnapshot {
		memPath, flag = snap.memory(), os.O_WRONLY|os.O_CREATE|os.O_EXCL
	}
	mem, err := os.OpenFile(memPath, flag, 0o600)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	if err := inst.qmp.Save(ctx, mem); err != nil {
		return nil, err
	}
	// The migration has flushed the disk and handed it over: it is as
	// the saved guest last saw it.
	if err := copyFile(filepath.Join(inst.b.dir(inst.id), overlayFile), snap.disk(), 0o600); err != nil {
		return nil, err
	}
	saved := []string{snap.disk()}
	if kind == isolation.MemorySnapshot {
		saved = append(saved, snap.memory())
	}
	for _, f := range saved {
		if err := syncFile(f); err != nil {
			return nil, err
		}
	}
	meta, err := json.Marshal(snap)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, snapshotMeta), meta, 0o600); err != nil {
		return nil, err
	}
	return snap, syncFile(dir)
}

// openSnapshot loads the snapshot src names for p, checking that p can
// start from it.
func (b *Backend) openSnapshot(p *plan, src isolation.SnapshotSource) (*snapshot, error) {
	snap, err := loadSnapshot(src.Dir)
	if err != nil {
		return nil, fmt.Errorf("opening the snapshot: %w", err)
	}
	image, err := fileKey(p.spec.RootImage)
	if err != nil {
		return nil, err
	}
	res := p.spec.Resources
	switch {
	case src.Kind > snap.Kind:
		return nil, fmt.Errorf("the snapshot %s holds %s, not %s", src.Dir, snap.Kind, src.Kind)
	case snap.Image != image:
		return nil, fmt.Errorf("the snapshot %s was taken over another template image than %s", src.Dir, p.spec.RootImage)
	case snap.DiskMB != res.DiskSizeMB:
		return nil, fmt.Errorf("the snapshot's disk is %d MiB, the sandbox's %d MiB", snap.DiskMB, res.DiskSizeMB)
	case src.Kind == isolation.MemorySnapshot && (snap.CPUCount != res.CPUCount || snap.MemoryMB != res.MemoryMB):
		return nil, fmt.Errorf("the snapshot's VM has %d CPUs and %d MiB, the sandbox %d and %d: a memory snapshot restores only into its own shape",
			snap.CPUCount, snap.MemoryMB, res.CPUCount, res.MemoryMB)
	case src.Kind == isolation.MemorySnapshot && snap.Volumes != len(p.spec.Volumes):
		return nil, fmt.Errorf("the snapshot's VM has %d volume disks, the sandbox %d: a guest restored from memory keeps the devices it was saved with",
			snap.Volumes, len(p.spec.Volumes))
	}
	snap.Kind, snap.Token = src.Kind, src.EnvdAccessToken
	return snap, nil
}

// restore loads snap into the VM (started -incoming, stopped), runs it,
// has its init take id (with a fresh seed and the time) and gives envd
// token.
func (inst *Instance) restore(ctx context.Context, snap *snapshot, id vminit.Identity, token string) error {
	mem, err := os.Open(snap.memory())
	if err != nil {
		return err
	}
	defer mem.Close()
	t0 := time.Now()
	if err := inst.qmp.MigrateIncoming(ctx, mem); err != nil {
		return fmt.Errorf("%w%s", err, inst.console.quote())
	}
	if err := inst.qmp.Cont(ctx); err != nil {
		return err
	}
	t1 := time.Now()
	if err := inst.identify(ctx, id); err != nil {
		return err
	}
	t2 := time.Now()
	if err := rekeyEnvd(ctx, inst, snap.Token, token); err != nil {
		return err
	}
	inst.b.cfg.Log.Debug("sandbox restored", "sandbox_id", inst.id,
		"load", t1.Sub(t0), "identity", t2.Sub(t1), "envd_token", time.Since(t2))
	return nil
}

// identify has the guest's init take id, with a fresh seed and the time.
func (inst *Instance) identify(ctx context.Context, id vminit.Identity) error {
	id.Time = time.Now()
	id.Seed = make([]byte, 64)
	if _, err := rand.Read(id.Seed); err != nil {
		return fmt.Errorf("giving the guest its identity: %w", err)
	}
	return inst.request(ctx, vminit.Request{Op: vminit.OpIdentity, Identity: &id})
}

// rekeyEnvd replaces envd's access token old with token (envd's POST
// /init, which the manager then calls with token as for any sandbox).
func rekeyEnvd(ctx context.Context, inst *Instance, old, token string) error {
	body, err := json.Marshal(map[string]string{"accessToken": token})
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return inst.Dial(ctx, isolation.EnvdPort)
		},
		DisableKeepAlives: true,
	}}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://envd/init", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Access-Token", old)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("giving envd its token: %w", err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("giving envd its token: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

func newToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	return nil
}

// snapshots finds and makes the memory snapshots, one directory per key
// under dir. A snapshot is made in the background, once per key at a
// time; one that failed is not tried again for a while.
type snapshots struct {
	dir string
	log *slog.Logger
	// ctx ends the makings under way when the backend closes.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the makings under way
	mu     sync.Mutex
	made   map[string]*snapshot
	busy   map[string]bool      // being made
	fail   map[string]time.Time // when making last failed
}

// How long making a snapshot may take (a cold boot under TCG on a busy
// host, and the save), and how long after a failure it is not retried.
const (
	snapshotTimeout = 3 * time.Minute
	snapshotRetry   = 10 * time.Minute
)

func newSnapshots(dir string, log *slog.Logger) *snapshots {
	ctx, cancel := context.WithCancel(context.Background())
	return &snapshots{
		dir: dir, log: log, ctx: ctx, cancel: cancel,
		made: map[string]*snapshot{}, busy: map[string]bool{}, fail: map[string]time.Time{},
	}
}

// close ends the makings under way and waits for them (and for the VMs
// they booted) to be gone.
func (s *snapshots) close() {
	s.cancel()
	s.wg.Wait()
}

// get returns key's snapshot, or nil if there is none (yet).
func (s *snapshots) get(key string) *snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap := s.made[key]; snap != nil {
		markUsed(snap.dir)
		return snap
	}
	snap, err := loadSnapshot(filepath.Join(s.dir, key))
	if err != nil {
		return nil
	}
	s.made[key] = snap
	return snap
}

func loadSnapshot(dir string) (*snapshot, error) {
	b, err := os.ReadFile(filepath.Join(dir, snapshotMeta))
	if err != nil {
		return nil, err
	}
	snap := &snapshot{dir: dir}
	if err := json.Unmarshal(b, snap); err != nil {
		return nil, fmt.Errorf("reading snapshot %s: %w", dir, err)
	}
	return snap, nil
}

// makeLater makes key's snapshot in the background with make, into a
// directory that becomes key's once make succeeds.
func (s *snapshots) makeLater(key string, make func(ctx context.Context, dir string) (*snapshot, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[key] || time.Since(s.fail[key]) < snapshotRetry || s.ctx.Err() != nil {
		return
	}
	s.busy[key] = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t0 := time.Now()
		snap, err := s.make(key, make)
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.busy, key)
		if err != nil {
			s.fail[key] = time.Now()
			s.log.Warn("making a memory snapshot failed; sandboxes of its shape boot cold", "snapshot", key, "err", err)
			return
		}
		s.made[key] = snap
		s.log.Info("made a memory snapshot", "snapshot", key, "took", time.Since(t0))
	}()
}

func (s *snapshots) make(key string, make func(ctx context.Context, dir string) (*snapshot, error)) (*snapshot, error) {
	ctx, cancel := context.WithTimeout(s.ctx, snapshotTimeout)
	defer cancel()
	dir := filepath.Join(s.dir, key)
	tmp := dir + ".new"
	if err := os.RemoveAll(tmp); err != nil { // left by a server that died making it
		return nil, err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, err
	}
	snap, err := make(ctx, tmp)
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(tmp))
	}
	snap.dir = dir
	return snap, nil
}
