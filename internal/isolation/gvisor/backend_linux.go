package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/gvisor/gvinit"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/proc"
	"github.com/agent-sandbox/agent-sandbox/internal/undo"
	"golang.org/x/sys/unix"
)

// Backend is the gVisor isolation backend.
type Backend struct {
	cfg Config
	// platform is the gVisor platform every sandbox of this backend runs
	// on, chosen by New.
	platform string
	// probed is what the platform's probe found.
	probed gvinit.ProbeResult
	// shim is the statx shim (statxShim) on the host, which sandboxes
	// preload, or "" where runsc takes statx as Linux does.
	shim  string
	net   *network.Host
	disks disk.Maker
}

var _ isolation.Backend = (*Backend)(nil)

// New returns a gvisor backend for cfg, after defaults and validation.
// It checks that runsc and the helper are there and picks the platform,
// by running a probe sandbox on each candidate until one works, so that
// a host where gVisor does not run fails here, saying why, rather than at
// the first sandbox.
func New(cfg Config) (*Backend, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	var err error
	if cfg.Runsc, err = exec.LookPath(cfg.Runsc); err != nil {
		return nil, fmt.Errorf("gvisor: %w (run scripts/install-deps.sh: Debian's runsc package)", err)
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		return nil, fmt.Errorf("gvisor: %w (run scripts/install-deps.sh)", err)
	}
	if _, err := os.Stat(cfg.Init); err != nil {
		return nil, fmt.Errorf("gvisor: the helper: %w (make build puts bin/gvinit beside bin/agent-sandbox)", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	b := &Backend{cfg: cfg, net: cfg.Network}
	candidates := platforms
	if cfg.Platform != "" {
		candidates = []string{cfg.Platform}
	}
	platform, probed, passed, err := b.choosePlatform(context.Background(), candidates)
	if err != nil {
		return nil, fmt.Errorf("gvisor: %w", err)
	}
	b.platform, b.probed = platform, probed
	if probed.StatxNoAutomountRefused {
		if b.shim, err = writeShim(cfg.StateDir); err != nil {
			return nil, fmt.Errorf("gvisor: %w", err)
		}
		if b.shim == "" {
			cfg.Log.Warn("gvisor: this runsc refuses statx with AT_NO_AUTOMOUNT, and there is no shim for this architecture: Debian 12's ls and stat fail in its sandboxes")
		}
	}
	attrs := []any{"platform", platform, "runsc", runscVersion(cfg.Runsc)}
	for _, p := range slices.Sorted(maps.Keys(passed)) {
		attrs = append(attrs, "not_"+p, passed[p])
	}
	cfg.Log.Info("gvisor: platform chosen", attrs...)
	return b, nil
}

// runscVersion is the first line of `runsc --version`, for the log.
func runscVersion(runsc string) string {
	out, err := exec.Command(runsc, "--version").Output()
	if err != nil {
		return "unknown: " + err.Error()
	}
	line, _, _ := bytes.Cut(out, []byte("\n"))
	return string(line)
}

// Name implements isolation.Backend.
func (b *Backend) Name() string { return "gvisor" }

// Platform is the gVisor platform the backend's sandboxes run on.
func (b *Backend) Platform() string { return b.platform }

// Capabilities implements isolation.Backend: a gVisor sandbox pauses
// (runsc pause); it saves nothing, since runsc refuses to checkpoint a
// sandbox with host networking (see the package doc), and build steps
// run in jails.
func (b *Backend) Capabilities() isolation.Capabilities {
	return isolation.Capabilities{Pause: true}
}

func (b *Backend) dir(id string) string        { return filepath.Join(b.cfg.StateDir, id) }
func (b *Backend) cgroupName(id string) string { return b.cfg.CgroupParent + "/" + id }

// What a sandbox's cgroup allows beyond its own resources: the sentry's
// own memory (its heap, page tables, the gofer's) and its host threads
// (the sentry's, the gofer's, and the platform's stubs).
const (
	sentryMemoryMB = 64
	sentryTasks    = 128
)

// sandboxTasks is the cap on the tasks a sandbox may run: res.Pids, or by
// default two per MiB of its memory, at least 512 (as in a VM: a fork
// bomb in gVisor stalls its own kernel first).
func sandboxTasks(res isolation.Resources) int {
	if res.Pids > 0 {
		return res.Pids
	}
	return max(512, 2*res.MemoryMB)
}

// state is what Adopt and Cleanup need.
type state struct {
	Pid      int        `json:"pid"`   // the sandbox process (the sentry)
	Start    uint64     `json:"start"` // proc.StartTime of Pid
	Platform string     `json:"platform"`
	Gateway  netip.Addr `json:"gateway"`
	Address  netip.Addr `json:"address"`
	CPUCount int        `json:"cpu_count"`
	MemoryMB int        `json:"memory_mb"`
	DiskMB   int        `json:"disk_mb"`
	// Cgroup is the group of runsc's processes (the sentry, its stubs,
	// the gofer), relative to the hierarchies' root.
	Cgroup string `json:"cgroup"`
}

// Start implements isolation.Backend.
func (b *Backend) Start(ctx context.Context, spec isolation.Spec) (_ isolation.Instance, err error) {
	t0 := time.Now()
	if err := isolation.ValidID(spec.ID); err != nil {
		return nil, fmt.Errorf("starting sandbox: %w", err)
	}
	res := spec.Resources
	if err := res.Check(); err != nil {
		return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
	}
	if err := isolation.CheckSnapshot(spec, b.Capabilities()); err != nil {
		return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
	}
	if spec.Export != "" || len(spec.Layers) > 0 {
		return nil, fmt.Errorf("starting sandbox %s: the gvisor backend runs no template build steps (layers, export): %w", spec.ID, errors.ErrUnsupported)
	}
	bins := maps.Clone(spec.Tools)
	if bins == nil {
		bins = map[string]string{}
	}
	bins[guest.EnvdPath], bins[initPath] = spec.EnvdPath, b.cfg.Init
	if b.shim != "" {
		bins[shimPath] = b.shim
	}
	for g, h := range bins {
		if !filepath.IsAbs(g) || filepath.Clean(g) != g || !filepath.IsAbs(h) {
			return nil, fmt.Errorf("starting sandbox %s: tool %q from %q: want clean absolute paths", spec.ID, g, h)
		}
	}
	if !filepath.IsAbs(spec.RootFS) {
		return nil, fmt.Errorf("starting sandbox %s: root file system %q is not an absolute path", spec.ID, spec.RootFS)
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}

	var rollback undo.Stack
	defer func() {
		if err != nil {
			if uerr := rollback.Run(); uerr != nil {
				err = errors.Join(err, fmt.Errorf("rolling back: %w", uerr))
			}
			err = fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
		}
	}()
	dir := b.dir(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err // ErrExist if the ID is in use
	}
	rollback.Push(func(context.Context) error { return removeDir(dir) })
	for _, d := range []string{diskDir, rootDir, bundleDir, runscDir} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	image := filepath.Join(dir, imageFile)
	rollback.Push(func(ctx context.Context) error { return disk.ReleaseLoops(ctx, image) })
	if err := b.disks.Make(ctx, image, res.DiskSizeMB); err != nil {
		return nil, err
	}
	tDisk := time.Now()

	ns, link, err := b.net.Setup(ctx, spec.ID)
	if err != nil {
		return nil, err
	}
	rollback.Push(func(ctx context.Context) error { return b.net.Release(ctx, spec.ID) })
	tNet := time.Now()

	cgName := b.cgroupName(spec.ID)
	cg, err := cgroup.Create(cgName, cgroup.Limits{
		CPUs:        float64(res.CPUCount),
		MemoryBytes: int64(res.MemoryMB+sentryMemoryMB) << 20,
		Pids:        int64(sandboxTasks(res) + sentryTasks),
	})
	if err != nil {
		return nil, err
	}
	rollback.Push(func(ctx context.Context) error {
		return errors.Join(cgroup.Remove(ctx, cgName), removeRuntimeCgroups(cgName))
	})
	if err := writeSpec(dir, sandboxSpec(dir, hostname, ns.Path(), cgName, bins, b.cfg.NoNewPrivs)); err != nil {
		return nil, err
	}
	icfg := gvinit.Config{
		// On the sandbox's loopback, which with host networking is the
		// namespace's: Dial reaches it from there, as in the jail.
		EnvdArgs:   []string{"--addr", "127.0.0.1:" + strconv.Itoa(isolation.EnvdPort)},
		EnvdToken:  spec.EnvdAccessToken,
		NoNewPrivs: b.cfg.NoNewPrivs,
	}
	if link.Gateway.IsValid() {
		icfg.Nameserver = link.Gateway.String()
	}
	lcfg := gvinit.LaunchConfig{
		Image: image, DiskDir: filepath.Join(dir, diskDir),
		RootFS: filepath.Clean(spec.RootFS), RootDir: filepath.Join(dir, rootDir),
		MountPoints: slices.Sorted(maps.Keys(bins)),
		Preload:     preloadOf(b.shim),
		Runsc: append([]string{b.cfg.Runsc}, b.runscArgs(dir, "--cpu-num-from-quota",
			"run", "--detach", "--bundle="+filepath.Join(dir, bundleDir), spec.ID)...),
	}
	if err := b.launch(ctx, ns, cg, dir, lcfg, icfg, res.DiskIO); err != nil {
		return nil, err
	}
	tRun := time.Now()
	st, err := b.state(ctx, ns, spec.ID)
	if err != nil {
		return nil, err
	}
	if st.Status != "running" {
		return nil, fmt.Errorf("runsc says the sandbox is %s%s", st.Status, b.quoteLog(spec.ID))
	}
	start, err := proc.StartTime(st.Pid)
	if err != nil {
		return nil, fmt.Errorf("reading the sandbox process's start time: %w", err)
	}
	p, err := proc.Open(st.Pid, start)
	if err != nil {
		return nil, err
	}
	inst := newInstance(b, spec.ID, cg, ns, state{
		Pid: st.Pid, Start: start, Platform: b.platform, Gateway: link.Gateway, Address: link.Address,
		CPUCount: res.CPUCount, MemoryMB: res.MemoryMB, DiskMB: res.DiskSizeMB, Cgroup: cgName,
	})
	go inst.watch(p)
	b.cfg.Log.Debug("sandbox started", "sandbox_id", spec.ID, "sandbox_pid", st.Pid, "platform", b.platform,
		"total", time.Since(t0), "disk", tDisk.Sub(t0), "netns", tNet.Sub(tDisk), "runsc_run", tRun.Sub(tNet))
	return inst, nil
}

// shimPath is where the statx shim appears in the sandbox.
const shimPath = "/opt/agent-sandbox/lib/statx-noautomount.so"

// preloadOf is the sandbox's preload for the shim on the host at shim.
func preloadOf(shim string) string {
	if shim == "" {
		return ""
	}
	return shimPath
}

// writeShim writes the statx shim under stateDir, once, and returns its
// path; "" when there is none for this architecture.
func writeShim(stateDir string) (string, error) {
	so := statxShim()
	if so == nil {
		return "", nil
	}
	dir := filepath.Join(stateDir, libDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(dir, filepath.Base(shimPath))
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, so) {
		return p, nil
	}
	// Written aside and renamed: a sandbox may be mounting the old one.
	tmp := p + ".new"
	if err := os.WriteFile(tmp, so, 0o644); err != nil {
		return "", fmt.Errorf("writing the statx shim: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return "", fmt.Errorf("writing the statx shim: %w", err)
	}
	return p, nil
}

// launch starts the launcher (the helper in a new mount namespace, from a
// thread in ns), has it mount the root file system, caps the disk's I/O
// once it reports, lets it execute `runsc run --detach` and waits for
// that to return: then the sandbox runs, its init has icfg on its stdin,
// and its processes are in cg.
func (b *Backend) launch(ctx context.Context, ns *network.Namespace, cg *cgroup.Cgroup, dir string,
	lcfg gvinit.LaunchConfig, icfg gvinit.Config, q isolation.DiskIO) error {
	logf, err := os.OpenFile(filepath.Join(dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	// The init's configuration, token included, waits in a pipe: the
	// launcher and runsc pass it on as the sandbox init's stdin.
	initR, err := configPipe(icfg)
	if err != nil {
		return err
	}
	defer initR.Close()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer cfgR.Close()
	defer cfgW.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer statR.Close()
	defer statW.Close()

	cmd := exec.Command(b.cfg.Init, gvinit.LaunchArg)
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = initR, logf, logf
	cmd.ExtraFiles = []*os.File{cfgR, statW} // gvinit.LaunchConfigFd, gvinit.LaunchStatusFd
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true, Cloneflags: unix.CLONE_NEWNS}
	if err := ns.Do(cmd.Start); err != nil {
		return fmt.Errorf("starting the launcher: %w", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	ok := false
	defer func() {
		if !ok {
			_ = cmd.Process.Kill()
			<-waited
		}
	}()
	cfgR.Close()
	statW.Close()
	initR.Close()
	if err := json.NewEncoder(cfgW).Encode(&lcfg); err != nil {
		return fmt.Errorf("sending the launcher its configuration: %w", err)
	}
	st, err := readStatus(ctx, statR)
	var failed launchError
	if errors.As(err, &failed) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w%s", err, b.quoteLog(filepath.Base(dir)))
	}
	// Before runsc starts anything.
	if err := limitDiskIO(cg, st.DiskDev, q); err != nil {
		return err
	}
	cfgW.Close() // the go-ahead
	select {
	case err = <-waited:
		ok = true
	case <-ctx.Done():
		return fmt.Errorf("waiting for runsc run: %w", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("runsc run: %w%s", err, b.quoteLog(filepath.Base(dir)))
	}
	return nil
}

// configPipe returns the read end of a pipe that holds cfg and nothing
// more; the write end is closed. cfg is far below a pipe's capacity.
func configPipe(cfg gvinit.Config) (*os.File, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	if _, err := w.Write(b); err != nil {
		r.Close()
		return nil, fmt.Errorf("writing the init's configuration: %w", err)
	}
	return r, nil
}

// readStatus reads the launcher's one status, or fails when ctx ends
// first.
func readStatus(ctx context.Context, r *os.File) (gvinit.LaunchStatus, error) {
	type result struct {
		st  gvinit.LaunchStatus
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var st gvinit.LaunchStatus
		b, err := io.ReadAll(io.LimitReader(r, 64<<10))
		if err == nil {
			err = json.Unmarshal(b, &st)
			if len(b) == 0 {
				err = errors.New("the launcher exited without a word")
			}
		}
		ch <- result{st, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			return gvinit.LaunchStatus{}, fmt.Errorf("reading the launcher's status: %w", res.err)
		}
		if res.st.Error != "" {
			return gvinit.LaunchStatus{}, launchError(res.st.Error)
		}
		return res.st, nil
	case <-ctx.Done():
		_ = r.SetReadDeadline(time.Now())
		return gvinit.LaunchStatus{}, fmt.Errorf("waiting for the launcher: %w", ctx.Err())
	}
}

// launchError is what the launcher reported it could not do.
type launchError string

func (e launchError) Error() string { return string(e) }

// limitDiskIO caps the group's I/O on the sandbox's disk, the loop device
// dev; a zero quota sets nothing.
func limitDiskIO(cg *cgroup.Cgroup, dev uint64, q isolation.DiskIO) error {
	if q == (isolation.DiskIO{}) {
		return nil
	}
	if dev == 0 {
		return errors.New("limiting disk I/O: the launcher reported no disk device")
	}
	return cg.LimitIO(cgroup.IOLimit{
		Major: unix.Major(dev), Minor: unix.Minor(dev),
		ReadBPS: q.ReadBytesPerSec, WriteBPS: q.WriteBytesPerSec,
		ReadIOPS: q.ReadIOPS, WriteIOPS: q.WriteIOPS,
	})
}

// quoteLog is the end of sandbox id's log (its init's and runsc's own
// output), after ": ", or "" when there is none.
func (b *Backend) quoteLog(id string) string {
	tail := logTail(filepath.Join(b.dir(id), logFile), 4<<10)
	if tail == "" {
		return ""
	}
	return ": " + lastLines([]byte(tail), 5)
}

// logTail returns up to the last n bytes of the file at path.
func logTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(0, fi.Size()-n)
	b := make([]byte, fi.Size()-off)
	m, _ := f.ReadAt(b, off)
	return string(b[:m])
}

// exitReason is the last line the sandbox's init wrote about itself in
// the log at path, or "".
func exitReason(path string) string {
	var last string
	for _, l := range strings.Split(logTail(path, 64<<10), "\n") {
		if r, ok := strings.CutPrefix(l, gvinit.ReasonPrefix); ok {
			last = r
		}
	}
	return last
}

// Adopt implements isolation.Backend.
func (b *Backend) Adopt(ctx context.Context, id string, raw json.RawMessage) (isolation.Instance, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("adopting sandbox %s: parsing state: %w", id, err)
	}
	if err := isolation.ValidID(id); err != nil {
		return nil, fmt.Errorf("adopting sandbox: %w", err)
	}
	gone := func(why string, args ...any) error {
		return fmt.Errorf("adopting sandbox %s: %w: %s", id, isolation.ErrGone, fmt.Sprintf(why, args...))
	}
	p, err := proc.Open(st.Pid, st.Start)
	if err != nil {
		return nil, gone("the sandbox process: %v", err)
	}
	ok := false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	cg, err := cgroup.Load(b.cgroupName(id))
	if err != nil {
		return nil, gone("%v", err)
	}
	procs, err := cg.Procs()
	if err != nil || !slices.Contains(procs, st.Pid) {
		return nil, gone("the sandbox process %d is not in cgroup %s", st.Pid, cg.Name())
	}
	ns, err := b.net.Adopt(id, network.Link{Gateway: st.Gateway, Address: st.Address})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, gone("%v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("adopting sandbox %s: %w", id, err)
	}
	inst := newInstance(b, id, cg, ns, st)
	cs, err := b.state(ctx, ns, id)
	if err != nil {
		return nil, fmt.Errorf("adopting sandbox %s: %w", id, err)
	}
	inst.paused = cs.Status == "paused"
	ok = true
	go inst.watch(p)
	return inst, nil
}

// Cleanup implements isolation.Backend. Names derive from id, so it works
// with a state that is empty or from a half-finished Start.
func (b *Backend) Cleanup(ctx context.Context, id string, _ json.RawMessage) error {
	if err := isolation.ValidID(id); err != nil {
		return fmt.Errorf("cleaning up sandbox: %w", err)
	}
	ctx = context.WithoutCancel(ctx)
	var errs []error
	// Killing the cgroup ends runsc's sandbox and gofer (whose pids may be
	// anyone's by now); the mounts went with the gofer's mount namespace.
	name := b.cgroupName(id)
	errs = append(errs, cgroup.Remove(ctx, name), removeRuntimeCgroups(name), b.net.Release(ctx, id),
		disk.ReleaseLoops(ctx, filepath.Join(b.dir(id), imageFile)), removeDir(b.dir(id)))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleaning up sandbox %s: %w", id, err)
	}
	return nil
}

// Leftovers returns the IDs of sandboxes that have a directory in StateDir
// but are not in known, for the manager to Cleanup (isolation.DirLeftovers).
func (b *Backend) Leftovers(known map[string]bool) ([]string, error) {
	return isolation.DirLeftovers(b.cfg.StateDir, known)
}

// removeDir removes a sandbox directory. Nothing is mounted in it in the
// host's mount namespace (the mounts live in the launcher's), so a plain
// recursive removal cannot cross into a mount.
func removeDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
