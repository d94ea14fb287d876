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
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/vminit"
)

// A snapshot is a VM saved once envd was ready in it: its memory and
// device state (memory) and its disk at that instant (disk.qcow2, whose
// backing file is the template image, as every overlay's). A sandbox of
// the same shape starts by restoring it with a copy of the disk, then is
// given an identity of its own (vminit.Identity) and envd a token of its
// own, before the sandbox's code can run: no cold boot.
type snapshot struct {
	dir string
	// Token is the saved envd's access token; restore replaces it.
	Token string
	// MAC is the saved NIC's: the restored VM's devices must be the same.
	MAC string
}

func (s *snapshot) memory() string { return filepath.Join(s.dir, "memory") }
func (s *snapshot) disk() string   { return filepath.Join(s.dir, overlayFile) }

// snapshotMeta is the file written last into a snapshot's directory:
// without it the snapshot is incomplete.
const snapshotMeta = "snapshot.json"

// snapshotVersion changes when what a snapshot holds or how it is made
// does, so that older ones are not restored.
const snapshotVersion = "1"

// snapshotKey names the snapshot of p's shape: everything the saved
// guest's state depends on.
func (b *Backend) snapshotKey(p *plan) (string, error) {
	parts := []string{snapshotVersion, b.cfg.Accel, p.initrd, p.tools,
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
	if err := inst.qmp.Stop(ctx); err != nil {
		return nil, err
	}
	snap := &snapshot{dir: dir, Token: sp.spec.EnvdAccessToken, MAC: macAddress(sp.spec.ID)}
	mem, err := os.OpenFile(snap.memory(), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	if err := inst.qmp.Save(ctx, mem); err != nil {
		return nil, err
	}
	// The migration has flushed the disk and handed it over: it is as
	// the saved guest last saw it.
	if err := copyFile(filepath.Join(b.dir(sp.spec.ID), overlayFile), snap.disk(), 0o600); err != nil {
		return nil, err
	}
	meta, err := json.Marshal(snap)
	if err != nil {
		return nil, err
	}
	for _, f := range []string{snap.memory(), snap.disk()} {
		if err := syncFile(f); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, snapshotMeta), meta, 0o600); err != nil {
		return nil, err
	}
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

// identifyTimeout bounds the guest's answer to its identity.
const identifyTimeout = 10 * time.Second

// identify sends id to the guest's init on the console and waits for its
// answer; then the console's input is closed.
func (inst *Instance) identify(ctx context.Context, id vminit.Identity) error {
	defer inst.consoleIn.Close()
	id.Nonce = newToken()[:16]
	id.Time = time.Now()
	id.Seed = make([]byte, 64)
	if _, err := rand.Read(id.Seed); err != nil {
		return fmt.Errorf("giving the guest its identity: %w", err)
	}
	line, err := json.Marshal(id)
	if err != nil {
		return fmt.Errorf("giving the guest its identity: %w", err)
	}
	if _, err := inst.consoleIn.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("giving the guest its identity: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, identifyTimeout)
	defer cancel()
	applied := fmt.Sprintf(vminit.IdentityApplied, id.Nonce)
	answer, err := inst.console.waitLine(ctx, applied, "vminit: identity "+id.Nonce+":", "vminit: identity:")
	if err != nil {
		return fmt.Errorf("giving the guest its identity: no answer from its init: %w%s", err, inst.console.quote())
	}
	if answer != applied {
		return fmt.Errorf("giving the guest its identity: %s", strings.TrimPrefix(answer, "vminit: "))
	}
	return nil
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
	ctx, cancel := context.WithTimeout(ctx, identifyTimeout)
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
	dir  string
	log  *slog.Logger
	wg   sync.WaitGroup // the makings under way
	mu   sync.Mutex
	made map[string]*snapshot
	busy map[string]bool      // being made
	fail map[string]time.Time // when making last failed
}

// How long making a snapshot may take (a cold boot under TCG on a busy
// host, and the save), and how long after a failure it is not retried.
const (
	snapshotTimeout = 3 * time.Minute
	snapshotRetry   = 10 * time.Minute
)

func newSnapshots(dir string, log *slog.Logger) *snapshots {
	return &snapshots{dir: dir, log: log, made: map[string]*snapshot{}, busy: map[string]bool{}, fail: map[string]time.Time{}}
}

// get returns key's snapshot, or nil if there is none (yet).
func (s *snapshots) get(key string) *snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if snap := s.made[key]; snap != nil {
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
	if s.busy[key] || time.Since(s.fail[key]) < snapshotRetry {
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
	ctx, cancel := context.WithTimeout(context.Background(), snapshotTimeout)
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
