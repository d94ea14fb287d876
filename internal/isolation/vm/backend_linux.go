package vm

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/idmap"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/kernel"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/qmp"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/vminit"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"github.com/agent-sandbox/agent-sandbox/internal/proc"
	"github.com/agent-sandbox/agent-sandbox/internal/undo"
)

// Backend is the microVM isolation backend.
type Backend struct {
	cfg  Config
	kvm  KVM
	root string // QEMU's root directory (root_linux.go)
	// cmdline is the guest kernel's command line, made at the first
	// start (it measures the host's TSC).
	cmdline func() string
	ids     *idmap.Allocator // the QEMU processes' uids
	net     *network.Host
	boot    *bootCache
	// snaps is nil with Config.Snapshots off.
	snaps *snapshots
}

var _ isolation.Backend = (*Backend)(nil)

// New returns a vm backend for cfg, after defaults and validation. It
// checks that QEMU, qemu-img, the guest kernel and init are there, so
// that a host without them fails here, saying what to install, rather
// than at the first sandbox.
func New(cfg Config) (*Backend, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("vm: %w", err)
	}
	k, err := kernel.Open(cfg.KernelDir)
	if err != nil {
		return nil, fmt.Errorf("vm: %w", err)
	}
	if _, err := os.Stat(cfg.Init); err != nil {
		return nil, fmt.Errorf("vm: guest init: %w (make build puts bin/vminit beside bin/agent-sandbox)", err)
	}
	var tools [3]string
	for i, name := range []string{cfg.QEMU, cfg.QEMUImg, "mkfs.ext4"} {
		if tools[i], err = exec.LookPath(name); err != nil {
			return nil, fmt.Errorf("vm: %w (run scripts/install-deps.sh --vm)", err)
		}
	}
	cfg.QEMU, cfg.QEMUImg = tools[0], tools[1]
	for _, d := range []string{cfg.StateDir, cfg.CacheDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("vm: %w", err)
		}
	}
	kvm := DetectKVM()
	switch {
	case cfg.Accel == "" && kvm.Usable:
		cfg.Accel = AccelKVM
	case cfg.Accel == "":
		cfg.Accel = AccelTCG
		cfg.Log.Info("vm: no KVM, emulating (TCG): sandboxes start and run many times slower", "why", kvm.Why)
	case cfg.Accel == AccelKVM && !kvm.Usable:
		return nil, fmt.Errorf("vm: accelerator kvm: %s", kvm.Why)
	}
	if err := checkConfinable(cfg.QEMU); err != nil {
		return nil, fmt.Errorf("vm: %w", err)
	}
	root := filepath.Join(cfg.Network.RunDir(), rootDirName)
	if err := prepareRoot(root, KVM{Usable: cfg.Accel == AccelKVM, GID: kvm.GID}); err != nil {
		return nil, fmt.Errorf("vm: %w", err)
	}
	ids, err := idmap.NewAllocator(cfg.UsernsDir, cfg.UsernsBase)
	if err != nil {
		return nil, fmt.Errorf("vm: %w", err)
	}
	b := &Backend{
		cfg: cfg, kvm: kvm, root: root, ids: ids, net: cfg.Network,
		cmdline: sync.OnceValue(func() string { return guestCmdline(hostTSCKHz()) }),
		boot:    &bootCache{dir: cfg.CacheDir, kernel: k, init: cfg.Init, mkfs: tools[2], log: cfg.Log},
	}
	if err := sweepCache(cfg.CacheDir, cfg.Log); err != nil {
		cfg.Log.Warn("vm: sweeping the boot cache", "err", err)
	}
	if cfg.Snapshots {
		b.snaps = newSnapshots(filepath.Join(cfg.CacheDir, "snapshots"), cfg.Log)
	}
	return b, nil
}

// Name implements isolation.Backend.
func (b *Backend) Name() string { return "vm" }

// Close ends the memory snapshots being made in the background and waits
// until the VMs booted for them are gone. The sandboxes run on.
func (b *Backend) Close() error {
	if b.snaps != nil {
		b.snaps.close()
	}
	return nil
}

// Capabilities implements isolation.Backend: a VM pauses (QMP stop),
// saves its memory with its disk, boots from the template's ext4 image
// and mounts volumes from theirs, as disks of its own; build steps run in
// jails.
func (b *Backend) Capabilities() isolation.Capabilities {
	return isolation.Capabilities{Pause: true, RootImage: true, Snapshot: isolation.MemorySnapshot, Volumes: true, VolumeImages: true}
}

func (b *Backend) dir(id string) string        { return filepath.Join(b.cfg.StateDir, id) }
func (b *Backend) cgroupName(id string) string { return b.cfg.CgroupParent + "/" + id }

// Files in a sandbox directory.
const (
	overlayFile   = "disk.qcow2"
	initrdFile    = "initrd"
	qmpSocket     = "qmp.sock"
	consoleSocket = "console.sock"
)

// tapName is the VM's tap in the sandbox's network namespace.
const tapName = "tap0"

// state is what Adopt and Cleanup need.
type state struct {
	Pid      int        `json:"pid"`
	Start    uint64     `json:"start"` // proc.StartTime of Pid
	UID      uint32     `json:"uid"`
	Gateway  netip.Addr `json:"gateway"`
	Address  netip.Addr `json:"address"`
	CPUCount int        `json:"cpu_count"`
	MemoryMB int        `json:"memory_mb"`
	DiskMB   int        `json:"disk_mb"`
	// MAC is the guest NIC's; Image the template image the disk is
	// backed by. A snapshot of the VM records both.
	MAC   string `json:"mac"`
	Image string `json:"image"`
	// Volumes is how many volume disks the VM has.
	Volumes int `json:"volumes,omitempty"`
	// Cgroup is QEMU's group, relative to the hierarchies' root.
	Cgroup string `json:"cgroup"`
}

// memoryOverheadMB is what the QEMU process may use beyond the guest's
// memory, in its cgroup: its own heap and, under TCG, the translation
// cache (machine.tbMB).
func memoryOverheadMB(accel string) int {
	if accel == AccelKVM {
		return 64
	}
	return 64 + tcgCacheMB
}

const tcgCacheMB = 64

// qemuPids caps the QEMU process's threads: one per vCPU, the I/O
// thread pool (aio=threads, up to 64), RCU and the main loop.
const qemuPids = 128

// plan is a checked Start: the spec and what every VM of it boots from.
type plan struct {
	spec     isolation.Spec
	hostname string
	bins     map[string]string // guest path → host path, envd among them
	initrd   string            // the shared initramfs
	tools    string            // the tools disk
}

// Start implements isolation.Backend. A sandbox starts from
// Spec.Snapshot when it has one. Otherwise, with boot snapshots on, a
// sandbox of a shape that has a memory snapshot is restored from it; the
// first of a shape boots cold and has its snapshot made beside it. One
// with volumes boots cold: a restored guest has the devices it was saved
// with, and a boot snapshot has no volume disks.
func (b *Backend) Start(ctx context.Context, spec isolation.Spec) (isolation.Instance, error) {
	p, err := b.plan(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
	}
	var snap *snapshot
	switch {
	case spec.Snapshot != nil:
		if err := isolation.CheckSnapshot(spec, b.Capabilities()); err != nil {
			return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
		}
		if snap, err = b.openSnapshot(p, *spec.Snapshot); err != nil {
			return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
		}
	case b.snaps != nil && len(spec.Volumes) == 0:
		key, err := b.snapshotKey(p)
		if err != nil {
			return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
		}
		if snap = b.snaps.get(key); snap == nil {
			b.snaps.makeLater(key, func(ctx context.Context, dir string) (*snapshot, error) {
				return b.makeSnapshot(ctx, p, key, dir)
			})
		}
	}
	inst, err := b.start(ctx, p, snap)
	if err != nil {
		return nil, fmt.Errorf("starting sandbox %s: %w", spec.ID, err)
	}
	return inst, nil
}

func (b *Backend) plan(ctx context.Context, spec isolation.Spec) (*plan, error) {
	if err := isolation.ValidID(spec.ID); err != nil {
		return nil, err
	}
	if err := spec.Resources.Check(); err != nil {
		return nil, err
	}
	if err := isolation.CheckVolumes(spec, b.Capabilities()); err != nil {
		return nil, err
	}
	switch {
	case spec.RootImage == "":
		return nil, errors.New("the vm backend boots from the template's ext4 image, and the spec has none")
	case spec.Export != "" || len(spec.Layers) > 0:
		return nil, errors.New("the vm backend runs no template build steps (layers, export)")
	}
	p := &plan{spec: spec, hostname: spec.Hostname, bins: maps.Clone(spec.Tools)}
	if p.hostname == "" {
		p.hostname = spec.ID
	}
	if p.bins == nil {
		p.bins = map[string]string{}
	}
	p.bins[guest.EnvdPath] = spec.EnvdPath
	for g, h := range p.bins {
		if !filepath.IsAbs(g) || !filepath.IsAbs(h) {
			return nil, fmt.Errorf("tool %q from %q: want absolute paths", g, h)
		}
	}
	var err error
	if p.initrd, err = b.boot.initramfs(); err != nil {
		return nil, err
	}
	if p.tools, err = b.boot.tools(ctx, p.bins); err != nil {
		return nil, err
	}
	return p, nil
}

// start boots p's VM cold or, with snap, restores it from snap.
func (b *Backend) start(ctx context.Context, p *plan, snap *snapshot) (_ *Instance, err error) {
	t0 := time.Now()
	spec, res := p.spec, p.spec.Resources
	var rollback undo.Stack
	defer func() {
		if err != nil {
			if uerr := rollback.Run(); uerr != nil {
				err = errors.Join(err, fmt.Errorf("rolling back: %w", uerr))
			}
		}
	}()

	dir := b.dir(spec.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err // ErrExist if the ID is in use
	}
	rollback.Push(func(context.Context) error { return removeDir(dir) })
	uid, err := b.ids.Allocate(spec.ID)
	if err != nil {
		return nil, err
	}
	rollback.Push(func(context.Context) error { return b.ids.Release(spec.ID) })

	overlay := filepath.Join(dir, overlayFile)
	restore := snap != nil && snap.Kind == isolation.MemorySnapshot
	if snap != nil {
		err = copyFile(snap.disk(), overlay, 0o600)
	} else {
		err = makeOverlay(ctx, b.cfg.QEMUImg, overlay, spec.RootImage, res.DiskSizeMB)
	}
	if err != nil {
		return nil, err
	}
	tDisk := time.Now()

	ns, link, err := b.net.Setup(ctx, spec.ID)
	if err != nil {
		return nil, err
	}
	rollback.Push(func(ctx context.Context) error { return b.net.Release(ctx, spec.ID) })
	if !link.Address.IsValid() {
		return nil, errors.New("the sandbox networking has no address pool: a VM is reached through its network link only")
	}
	tap, err := ns.OpenTap(tapName)
	if err != nil {
		return nil, err
	}
	defer tap.Close() // QEMU has its own
	if err := ns.ForwardTo(tapName, link); err != nil {
		return nil, err
	}
	tNet := time.Now()

	cg, err := cgroup.Create(b.cgroupName(spec.ID), cgroup.Limits{
		CPUs:        float64(res.CPUCount),
		MemoryBytes: int64(res.MemoryMB+memoryOverheadMB(b.cfg.Accel)) << 20,
		Pids:        qemuPids,
	})
	if err != nil {
		return nil, err
	}
	rollback.Push(func(ctx context.Context) error {
		return errors.Join(ignoreNotExist(cg.Kill(ctx)), cg.Delete(ctx))
	})

	guestNet := &vminit.Network{
		Address:   netip.PrefixFrom(link.Address, 30),
		Gateway:   link.Gateway,
		Forwarder: network.ForwarderAddr,
	}
	m := &machine{
		id: spec.ID, accel: b.cfg.Accel, cpus: res.CPUCount, memoryMB: res.MemoryMB,
		diskIO: res.DiskIO, mac: macAddress(spec.ID), tbMB: tcgCacheMB, cmdline: b.cmdline(),
		volumes: len(spec.Volumes),
	}
	lf := launchFiles{
		qmp: filepath.Join(dir, qmpSocket), console: filepath.Join(dir, consoleSocket), tap: tap, kernel: b.boot.kernel.Vmlinuz, initrd: p.initrd,
		overlay: overlay, image: spec.RootImage, tools: p.tools,
	}
	for _, v := range spec.Volumes {
		lf.volumes = append(lf.volumes, v.Image)
	}
	if restore {
		// The devices must be the saved VM's, its NIC's address among them.
		m.mac, m.incoming = snap.MAC, true
	} else {
		lf.initrd = filepath.Join(dir, initrdFile)
		if err := sandboxInitrd(lf.initrd, p.initrd, b.guestConfig(p, guestNet), int(uid)); err != nil {
			return nil, err
		}
	}
	inst, err := b.launch(ctx, ns, m, lf, uid, cg)
	if err != nil {
		return nil, err
	}
	rollback.Push(func(ctx context.Context) error { return inst.kill(ctx) })
	inst.ns = ns
	inst.state = state{
		Pid: inst.pid, Start: inst.start, UID: uid, Gateway: link.Gateway, Address: link.Address,
		CPUCount: res.CPUCount, MemoryMB: res.MemoryMB, DiskMB: res.DiskSizeMB,
		MAC: m.mac, Image: spec.RootImage, Cgroup: b.cgroupName(spec.ID), Volumes: len(spec.Volumes),
	}
	if restore {
		err = inst.restore(ctx, snap, vminit.Identity{Hostname: p.hostname, Network: guestNet}, spec.EnvdAccessToken)
	} else {
		err = inst.qmp.Cont(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("starting the guest: %w", err)
	}
	b.cfg.Log.Debug("sandbox started", "sandbox_id", spec.ID, "qemu_pid", inst.pid, "uid", uid,
		"accel", b.cfg.Accel, "restored", restore, "files_from_snapshot", snap != nil && !restore,
		"total", time.Since(t0), "disk", tDisk.Sub(t0), "netns", tNet.Sub(tDisk))
	return inst, nil
}

// guestConfig is what init in p's VM is told at a cold boot.
func (b *Backend) guestConfig(p *plan, n *vminit.Network) vminit.Config {
	cfg := vminit.Config{
		Hostname: p.hostname,
		Network:  n,
		// On the guest's loopback, where the host's connections are
		// redirected to, as in the jail.
		EnvdArgs:   []string{"--addr", "127.0.0.1:" + strconv.Itoa(isolation.EnvdPort)},
		EnvdToken:  p.spec.EnvdAccessToken,
		Binaries:   map[string]string{},
		Pids:       guestPids(p.spec.Resources),
		NoNewPrivs: b.cfg.NoNewPrivs,
	}
	for g := range p.bins {
		cfg.Binaries[g] = g // the tools disk holds each at its guest path
	}
	for _, v := range p.spec.Volumes {
		cfg.Volumes = append(cfg.Volumes, v.Target)
	}
	return cfg
}

// guestPids is the cap on the guest's tasks: res.Pids, or by default two
// per MiB of its memory, at least 512. A fork bomb in a VM stalls only
// its own kernel, so the default is looser than the jail's.
func guestPids(res isolation.Resources) int {
	if res.Pids > 0 {
		return res.Pids
	}
	return max(512, 2*res.MemoryMB)
}

// macAddress is a locally administered unicast MAC derived from id.
func macAddress(id string) string {
	h := sha256.Sum256([]byte(id))
	return net.HardwareAddr{0x02, h[0], h[1], h[2], h[3], h[4]}.String()
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
		return nil, gone("QEMU: %v", err)
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
	ns, err := b.net.Adopt(id, network.Link{Gateway: st.Gateway, Address: st.Address})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, gone("%v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("adopting sandbox %s: %w", id, err)
	}
	if err := b.ids.Reserve(id, st.UID); err != nil {
		return nil, fmt.Errorf("adopting sandbox %s: %w", id, err)
	}
	mon, err := qmp.Dial(ctx, filepath.Join(b.dir(id), qmpSocket))
	if err != nil {
		return nil, gone("QEMU's monitor: %v", err)
	}
	status, err := mon.Status(ctx)
	if err != nil {
		mon.Close()
		return nil, gone("QEMU's monitor: %v", err)
	}
	inst := newInstance(b, id, cg, mon, newTail())
	if err := inst.connectConsole(ctx, filepath.Join(b.dir(id), consoleSocket)); err != nil {
		mon.Close()
		return nil, gone("%v", err)
	}
	inst.ns, inst.state, inst.pid, inst.start = ns, st, st.Pid, st.Start
	inst.paused = !status.Running
	inst.signal = p.Signal
	ok = true
	go func() {
		p.Wait()
		p.Close()
		inst.finish("QEMU exited")
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
	// Killing the cgroup ends QEMU, whose pid may be anyone's by now.
	errs = append(errs, cgroup.Remove(ctx, b.cgroupName(id)), b.net.Release(ctx, id), removeDir(b.dir(id)), b.ids.Release(id))
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

func removeDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
