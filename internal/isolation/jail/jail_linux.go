package jail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/idmap"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/proc"
	"github.com/agent-sandbox/agent-sandbox/internal/undo"
)

// Backend is the jail isolation backend.
type Backend struct {
	cfg Config
	// ids reserves the sandboxes' uid ranges. It exists whatever the mode,
	// so that sandboxes adopted from a run with another mode keep theirs.
	ids *idmap.Allocator
	// userns: sandboxes ask for a user namespace (the mode allows and the
	// host supports them).
	userns       bool
	usernsWarned sync.Map // reasons already logged by warnNoUserns
	disks        disk.Maker
	binaries     *binaryStore // what envd and the tools are mounted from
	cpus         *cpuSets
	net          *network.Host // Config.Network, or loopback only
}

var _ isolation.Backend = (*Backend)(nil)

// New returns a jail backend for cfg, after defaults and validation.
func New(cfg Config) (*Backend, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	for _, d := range []string{cfg.StateDir, cfg.RunDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("jail: %w", err)
		}
	}
	ids, err := idmap.NewAllocator(cfg.UsernsDir, cfg.UsernsBase)
	if err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	cpus, err := newCPUSets()
	if err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	b := &Backend{cfg: cfg, ids: ids, binaries: &binaryStore{dir: BinariesDir(cfg.RunDir)}, cpus: cpus, net: cfg.Network}
	if b.net == nil {
		if b.net, err = network.NewHost(network.HostConfig{RunDir: cfg.RunDir}); err != nil {
			return nil, fmt.Errorf("jail: %w", err)
		}
	}
	on, reason, err := hostUsernsSupport(cfg.Userns)
	if err != nil {
		return nil, fmt.Errorf("jail: %w", err)
	}
	b.userns = on
	if reason != "" {
		b.warnNoUserns(reason)
	}
	return b, nil
}

// Name implements isolation.Backend.
func (b *Backend) Name() string { return "jail" }

// Capabilities implements isolation.Backend: a jail pauses (cgroup
// freezer), exports a build step's changes and snapshots its file system
// (snapshot_linux.go); it runs from the template directory. Its memory is
// the host's, which it cannot save.
func (b *Backend) Capabilities() isolation.Capabilities {
	return isolation.Capabilities{Pause: true, Export: true, Snapshot: isolation.FilesSnapshot, Volumes: true}
}

func (b *Backend) dir(id string) string        { return filepath.Join(b.cfg.StateDir, id) }
func (b *Backend) cgroupName(id string) string { return b.cfg.CgroupParent + "/" + id }

// Files in a sandbox directory.
const (
	diskFile = "disk.ext4"
	logFile  = "init.log"
	diskDir  = "disk"  // mount point of the image, in the sandbox's mount namespace only
	rootDir  = "root"  // mount point of the overlay, likewise
	lowerDir = "lower" // mount point of the idmapped template, likewise
	// layersDir holds the mount points of the idmapped Spec.Layers.
	layersDir = "layers"
	// bootIDDir is the mount point of the tmpfs holding what the sandbox
	// sees at bootIDPath, in the sandbox's mount namespace only.
	bootIDDir = "boot"
)

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
	if err := isolation.CheckVolumes(spec, b.Capabilities()); err != nil {
		return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
	}
	if res.Pids <= 0 {
		res.Pids = defaultPids(res.MemoryMB)
	}
	layers := spec.Layers
	if spec.Snapshot != nil {
		snap, err := snapshotLayers(spec.Snapshot.Dir)
		if err != nil {
			return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
		}
		layers = append(snap, layers...)
	}
	paths := append([]string{spec.RootFS, spec.EnvdPath}, layers...)
	if spec.Export != "" {
		paths = append(paths, spec.Export)
	}
	var tools []toolMount
	for _, guest := range slices.Sorted(maps.Keys(spec.Tools)) {
		tools = append(tools, toolMount{Host: spec.Tools[guest], Guest: guest})
		paths = append(paths, guest, spec.Tools[guest])
	}
	var volumes []toolMount
	for _, v := range spec.Volumes {
		volumes = append(volumes, toolMount{Host: v.Source, Guest: v.Target})
		paths = append(paths, v.Source, v.Target)
	}
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("starting sandbox %s: %q is not an absolute path", spec.ID, p)
		}
	}
	if spec.Export != "" {
		if entries, err := os.ReadDir(spec.Export); err != nil || len(entries) > 0 {
			return nil, fmt.Errorf("starting sandbox %s: export directory %s is not an empty directory (%v)", spec.ID, spec.Export, err)
		}
	}
	// The sandbox mounts its host binaries from the backend's tmpfs copy.
	envdPath, err := b.binaries.path(spec.EnvdPath)
	if err != nil {
		return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
	}
	for i := range tools {
		if tools[i].Host, err = b.binaries.path(tools[i].Host); err != nil {
			return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
		}
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	log := b.cfg.Log.With("sandbox_id", spec.ID)

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
	for _, d := range []string{diskDir, rootDir, lowerDir} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	image := filepath.Join(dir, diskFile)
	rollback.Push(func(ctx context.Context) error { return disk.ReleaseLoops(ctx, image) })
	tDisk := time.Now()
	if err := b.disks.Make(ctx, image, res.DiskSizeMB); err != nil {
		return nil, err
	}
	dDisk := time.Since(tDisk)

	ns, link, err := b.net.Setup(ctx, spec.ID)
	if err != nil {
		return nil, err
	}
	rollback.Push(func(ctx context.Context) error { return b.net.Release(ctx, spec.ID) })
	dNet := time.Since(tDisk) - dDisk

	cpuSet := b.cpus.take(res.CPUCount)
	rollback.Push(func(context.Context) error { b.cpus.release(cpuSet); return nil })
	cg, err := cgroup.Create(b.cgroupName(spec.ID), cgroup.Limits{
		CPUs:        float64(res.CPUCount),
		MemoryBytes: int64(res.MemoryMB) << 20,
		Pids:        int64(res.Pids),
		CPUSet:      cpuSet,
	})
	if err != nil {
		return nil, err
	}
	rollback.Push(func(ctx context.Context) error {
		return errors.Join(ignoreNotExist(cg.Kill(ctx)), cg.Delete(ctx))
	})

	logf, err := os.OpenFile(filepath.Join(dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer cfgR.Close()
	defer cfgW.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statR.Close()
	defer statW.Close()

	cmd := exec.Command(b.cfg.InitPath, b.cfg.InitArgs...)
	cmd.Args[0] = "agent-sandbox-init"
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{cfgR, statW} // fds 3 and 4
	cmd.SysProcAttr = &unix.SysProcAttr{
		Setsid:     true,
		Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC,
	}
	icfg := initConfig{
		ID:         spec.ID,
		RootFS:     filepath.Clean(spec.RootFS),
		Disk:       image,
		DiskDir:    filepath.Join(dir, diskDir),
		RootDir:    filepath.Join(dir, rootDir),
		EnvdPath:   envdPath,
		Tools:      tools,
		Volumes:    volumes,
		EnvdArgs:   []string{"--addr", "127.0.0.1:" + strconv.Itoa(isolation.EnvdPort)}, // reached by Dial, from inside
		EnvdToken:  spec.EnvdAccessToken,
		Hostname:   hostname,
		MemoryMB:   res.MemoryMB,
		NoNewPrivs: b.cfg.NoNewPrivs,
		CgroupV2:   cg.Mode() == cgroup.V2,
		Cgroups:    cg.Controllers(),
		BootID:     newBootID(),
	}
	for _, l := range layers {
		icfg.Layers = append(icfg.Layers, filepath.Clean(l))
	}
	if link.Gateway.IsValid() {
		icfg.Nameserver = link.Gateway.String()
	}
	if b.userns {
		base, err := b.ids.Allocate(spec.ID)
		if err != nil {
			return nil, err
		}
		rollback.Push(func(context.Context) error { return b.ids.Release(spec.ID) })
		icfg.Userns = &usernsConfig{Base: base, Required: b.cfg.Userns == UsernsOn, UserTasks: userTasks(res.Pids)}
		icfg.LowerDir = filepath.Join(dir, lowerDir)
		for i := range icfg.Layers {
			d := filepath.Join(dir, layersDir, strconv.Itoa(i))
			if err := os.MkdirAll(d, 0o700); err != nil {
				return nil, err
			}
			icfg.LayerDirs = append(icfg.LayerDirs, d)
		}
	}
	if cg.Mode() == cgroup.V2 {
		// Born in the group, with the cgroup namespace rooted there.
		fd, err := cg.OpenDir()
		if err != nil {
			return nil, err
		}
		defer fd.Close()
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(fd.Fd())
		cmd.SysProcAttr.Cloneflags |= unix.CLONE_NEWCGROUP
	} else {
		icfg.UnshareCgroup = true
	}
	if err := ns.Do(cmd.Start); err != nil {
		return nil, fmt.Errorf("starting init: %w", err)
	}
	inst := &Instance{
		b: b, id: spec.ID, cg: cg, ns: ns, dir: dir, cmd: cmd,
		cpus: res.CPUCount, Ending: isolation.NewEnding(),
		lastCPUAt: time.Now(),
	}
	if spec.Export != "" {
		inst.export = &exportConfig{Dest: filepath.Clean(spec.Export), Exclude: exportExcludes(icfg)}
	}
	go inst.waitChild()
	rollback.Push(func(ctx context.Context) error {
		_ = cmd.Process.Kill()
		select {
		case <-inst.Done():
		case <-ctx.Done():
		}
		return nil
	})
	cfgR.Close()
	statW.Close()
	if cg.Mode() != cgroup.V2 {
		// Into the group before it learns what to run: until then it blocks
		// reading fd 3.
		if err := cg.Add(cmd.Process.Pid); err != nil {
			return nil, err
		}
	}
	if err := json.NewEncoder(cfgW).Encode(&icfg); err != nil {
		return nil, fmt.Errorf("sending init its configuration: %w", err)
	}
	cfgW.Close()

	st, err := readStatus(ctx, statR)
	if err != nil {
		return nil, err
	}
	// Before Start returns, so before anything but envd runs in it.
	if err := limitDiskIO(cg, st.DiskDev, res.DiskIO); err != nil {
		return nil, err
	}
	tInit := time.Now()
	start, err := proc.StartTime(cmd.Process.Pid)
	if err != nil {
		return nil, fmt.Errorf("reading init's start time: %w", err)
	}
	inst.state = state{
		InitPid: cmd.Process.Pid, InitStart: start, Cgroup: cg.Name(), Netns: ns.Name(),
		Dir: dir, CPUCount: res.CPUCount, CPUSet: cpuSet, Gateway: link.Gateway, Address: link.Address,
		Layers: icfg.Layers, Exclude: exportExcludes(icfg),
	}
	switch {
	case st.Userns:
		inst.state.UsernsBase = icfg.Userns.Base
	case icfg.Userns != nil:
		b.warnNoUserns(st.UsernsFallback)
		if err := b.ids.Release(spec.ID); err != nil {
			return nil, err
		}
	}
	log.Debug("sandbox started", "init_pid", cmd.Process.Pid, "envd_pid_in_sandbox", st.EnvdPid, "userns_base", inst.state.UsernsBase,
		"total", time.Since(t0), "disk", dDisk, "netns", dNet, "init", tInit.Sub(t0))
	return inst, nil
}

// limitDiskIO caps the group's I/O on the sandbox's disk, the loop device
// dev; a zero quota sets nothing.
func limitDiskIO(cg *cgroup.Cgroup, dev uint64, q isolation.DiskIO) error {
	if q == (isolation.DiskIO{}) {
		return nil
	}
	if dev == 0 {
		return errors.New("limiting disk I/O: init reported no disk device")
	}
	return cg.LimitIO(cgroup.IOLimit{
		Major: unix.Major(dev), Minor: unix.Minor(dev),
		ReadBPS: q.ReadBytesPerSec, WriteBPS: q.WriteBytesPerSec,
		ReadIOPS: q.ReadIOPS, WriteIOPS: q.WriteIOPS,
	})
}

// readStatus reads init's one status message, or fails when ctx ends first.
func readStatus(ctx context.Context, r *os.File) (initStatus, error) {
	type result struct {
		st  initStatus
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var st initStatus
		b, err := io.ReadAll(io.LimitReader(r, 64<<10))
		if err == nil {
			err = json.Unmarshal(b, &st)
			if len(b) == 0 {
				err = errors.New("init exited without a word (see its log)")
			}
		}
		ch <- result{st, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			return initStatus{}, fmt.Errorf("reading init's status: %w", res.err)
		}
		if res.st.Error != "" {
			return initStatus{}, errors.New(res.st.Error)
		}
		return res.st, nil
	case <-ctx.Done():
		_ = r.SetReadDeadline(time.Now())
		return initStatus{}, fmt.Errorf("waiting for init: %w", ctx.Err())
	}
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
	if st.InitPid <= 0 || st.Cgroup != b.cgroupName(id) || st.Netns != id || st.Dir != b.dir(id) {
		return nil, gone("state does not describe this sandbox")
	}
	init, err := proc.Open(st.InitPid, st.InitStart)
	if err != nil {
		return nil, gone("init: %v", err)
	}
	ok := false
	defer func() {
		if !ok {
			init.Close()
		}
	}()
	cg, err := cgroup.Load(st.Cgroup)
	if err != nil {
		return nil, gone("%v", err)
	}
	procs, err := cg.Procs()
	if err != nil || !slices.Contains(procs, st.InitPid) {
		return nil, gone("init pid %d is not in cgroup %s", st.InitPid, st.Cgroup)
	}
	ns, err := b.net.Adopt(id, network.Link{Gateway: st.Gateway, Address: st.Address})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, gone("%v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("adopting sandbox %s: %w", id, err)
	}
	if st.UsernsBase != 0 {
		if err := b.ids.Reserve(id, st.UsernsBase); err != nil {
			return nil, fmt.Errorf("adopting sandbox %s: %w", id, err)
		}
	}
	b.cpus.reserve(st.CPUSet)
	frozen, _ := cg.Frozen()
	inst := &Instance{
		b: b, id: id, cg: cg, ns: ns, dir: st.Dir, state: st, cpus: st.CPUCount,
		Ending: isolation.NewEnding(), paused: frozen, lastCPUAt: time.Now(),
	}
	if s, err := cg.Stats(); err == nil {
		inst.lastCPU = s.CPUTime
	}
	ok = true
	go func() {
		init.Wait()
		init.Close()
		inst.finish("init exited")
	}()
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
	errs = append(errs, cgroup.Remove(ctx, b.cgroupName(id)), b.net.Release(ctx, id))
	errs = append(errs, disk.ReleaseLoops(ctx, filepath.Join(b.dir(id), diskFile)), removeDir(b.dir(id)), b.ids.Release(id))
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

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
