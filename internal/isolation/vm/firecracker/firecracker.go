package firecracker

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	sdk "github.com/firecracker-microvm/firecracker-go-sdk"
	"github.com/firecracker-microvm/firecracker-go-sdk/client/models"
)

// Machine is the backend-neutral description of one sandbox's VM.
type Machine struct {
	ID         string // the sandbox id; the jailer's --id (≤ 64 of [A-Za-z0-9-])
	KernelPath string // uncompressed ELF vmlinux
	InitrdPath string // the project's initramfs; "" for none
	BootArgs   string // the guest's kernel command line, as the QEMU machine gets it
	VCPUs      int
	MemoryMB   int
	Drives     []Drive // in guest order: /dev/vda, /dev/vdb, ...

	TapName      string // the tap in the sandbox's network namespace
	MAC          string // the guest's
	NetBandwidth int64  // bytes per second each way; 0 for no limit
	NetNSPath    string // e.g. /run/netns/<id>

	UID, GID     int    // the unprivileged user Firecracker runs as
	ChrootBase   string // the jailer's --chroot-base-dir
	CgroupParent string // the jailer's --parent-cgroup (cgroup v2), relative to the root
}

// Drive is one disk of the VM.
type Drive struct {
	Path      string // a raw image on the host
	ReadOnly  bool
	Bandwidth int64 // bytes per second; 0 for no limit
	IOPS      int64 // operations per second; 0 for no limit
}

// Binaries are the host paths of Firecracker and its jailer.
type Binaries struct {
	Firecracker string
	Jailer      string
}

// apiSocket is Firecracker's API socket inside the chroot.
const apiSocket = "/run/firecracker.socket"

// validID is the jailer's rule for --id.
var validID = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

// qemuOnlyArgs are boot arguments that work around QEMU's TCG and microvm
// machine (the TSC calibration hang) and mean nothing under Firecracker's KVM.
var qemuOnlyArgs = []string{"tsc", "lpj"}

// firecrackerArgs are added to every guest's boot arguments.
const firecrackerArgs = "reboot=k pci=off"

// Validate says what in m Firecracker could not run.
func (m Machine) Validate() error {
	var errs []error
	if !validID.MatchString(m.ID) {
		errs = append(errs, fmt.Errorf("id %q is not 1 to 64 letters, digits and hyphens", m.ID))
	}
	if m.KernelPath == "" {
		errs = append(errs, errors.New("no kernel"))
	}
	if m.VCPUs < 1 || m.VCPUs > 32 {
		errs = append(errs, fmt.Errorf("%d vCPUs: Firecracker takes 1 to 32", m.VCPUs))
	}
	if m.MemoryMB < 1 {
		errs = append(errs, fmt.Errorf("%d MB of memory", m.MemoryMB))
	}
	if len(m.Drives) == 0 {
		errs = append(errs, errors.New("no drive"))
	}
	names := map[string]bool{}
	for i, d := range m.Drives {
		if d.Path == "" {
			errs = append(errs, fmt.Errorf("drive %d has no path", i))
		}
		// The SDK's chroot strategy links each drive in under its base name.
		if b := filepath.Base(d.Path); names[b] {
			errs = append(errs, fmt.Errorf("drive %d: another drive has the file name %s", i, b))
		} else {
			names[b] = true
		}
		if d.Bandwidth < 0 || d.IOPS < 0 {
			errs = append(errs, fmt.Errorf("drive %d: negative limit", i))
		}
	}
	if m.TapName == "" {
		errs = append(errs, errors.New("no tap"))
	}
	if _, err := net.ParseMAC(m.MAC); err != nil {
		errs = append(errs, fmt.Errorf("MAC: %w", err))
	}
	if m.NetBandwidth < 0 {
		errs = append(errs, errors.New("negative network bandwidth"))
	}
	if m.NetNSPath == "" {
		errs = append(errs, errors.New("no network namespace"))
	}
	if m.UID <= 0 || m.GID <= 0 {
		errs = append(errs, fmt.Errorf("uid %d, gid %d: Firecracker must not run as root", m.UID, m.GID))
	}
	if !filepath.IsAbs(m.ChrootBase) {
		errs = append(errs, fmt.Errorf("chroot base %q is not an absolute path", m.ChrootBase))
	}
	if m.CgroupParent == "" || filepath.IsAbs(m.CgroupParent) {
		errs = append(errs, fmt.Errorf("cgroup parent %q is not a relative path", m.CgroupParent))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("firecracker machine %s: %w", m.ID, err)
	}
	return nil
}

// Config is the SDK configuration that runs m under the jailer.
func Config(m Machine, bin Binaries) (sdk.Config, error) {
	if err := m.Validate(); err != nil {
		return sdk.Config{}, err
	}
	drives := make([]models.Drive, len(m.Drives))
	for i, d := range m.Drives {
		drives[i] = models.Drive{
			DriveID:      sdk.String("disk" + strconv.Itoa(i)),
			PathOnHost:   sdk.String(d.Path),
			IsReadOnly:   sdk.Bool(d.ReadOnly),
			IsRootDevice: sdk.Bool(false), // the guest's init finds its root by BootArgs, as under QEMU
			RateLimiter:  rateLimiter(d.Bandwidth, d.IOPS),
		}
	}
	uid, gid := m.UID, m.GID
	return sdk.Config{
		SocketPath:      apiSocket,
		VMID:            m.ID,
		KernelImagePath: m.KernelPath,
		InitrdPath:      m.InitrdPath,
		KernelArgs:      BootArgs(m.BootArgs),
		MachineCfg: models.MachineConfiguration{
			VcpuCount:  sdk.Int64(int64(m.VCPUs)),
			MemSizeMib: sdk.Int64(int64(m.MemoryMB)),
			Smt:        sdk.Bool(false),
		},
		Drives: drives,
		NetworkInterfaces: sdk.NetworkInterfaces{{
			StaticConfiguration: &sdk.StaticNetworkConfiguration{MacAddress: m.MAC, HostDevName: m.TapName},
			InRateLimiter:       rateLimiter(m.NetBandwidth, 0),
			OutRateLimiter:      rateLimiter(m.NetBandwidth, 0),
		}},
		NetNS:   m.NetNSPath,
		Seccomp: sdk.SeccompConfig{Enabled: true}, // the SDK's zero value is --no-seccomp
		JailerCfg: &sdk.JailerConfig{
			ID:             m.ID,
			UID:            &uid,
			GID:            &gid,
			NumaNode:       sdk.Int(0), // required by the SDK; our JailerArgs do not pin
			ExecFile:       bin.Firecracker,
			JailerBinary:   bin.Jailer,
			ChrootBaseDir:  m.ChrootBase,
			ChrootStrategy: sdk.NewNaiveChrootStrategy(m.KernelPath),
			CgroupVersion:  "2",
		},
	}, nil
}

// JailerArgs is the jailer's argv (without the binary) for m: Firecracker
// as m.UID:m.GID in a chroot under m.ChrootBase, in m.NetNSPath, in a
// cgroup v2 under m.CgroupParent, with its default seccomp filter and its
// API socket where Config tells the SDK to look. Call it on a Machine
// Config accepted.
func JailerArgs(m Machine, bin Binaries) []string {
	return []string{
		"--id", m.ID,
		"--uid", strconv.Itoa(m.UID),
		"--gid", strconv.Itoa(m.GID),
		"--exec-file", bin.Firecracker,
		"--cgroup-version", "2",
		"--parent-cgroup", m.CgroupParent,
		"--chroot-base-dir", m.ChrootBase,
		"--netns", m.NetNSPath,
		"--",
		"--api-sock", apiSocket,
	}
}

// BootArgs is the guest's kernel command line under Firecracker, from the
// one the QEMU machine gets: without QEMU's workarounds, with
// Firecracker's usual arguments.
func BootArgs(qemu string) string {
	var kept []string
	for _, a := range strings.Fields(qemu) {
		key, _, _ := strings.Cut(a, "=")
		qemuOnly := false
		for _, q := range qemuOnlyArgs {
			qemuOnly = qemuOnly || key == q
		}
		if !qemuOnly {
			kept = append(kept, a)
		}
	}
	return strings.Join(append(kept, firecrackerArgs), " ")
}

// rateLimiter is Firecracker's token buckets for bytes and operations per
// second, refilled each second; nil where both are unlimited.
func rateLimiter(bytes, ops int64) *models.RateLimiter {
	if bytes == 0 && ops == 0 {
		return nil
	}
	bucket := func(n int64) *models.TokenBucket {
		if n == 0 {
			return nil
		}
		return &models.TokenBucket{Size: sdk.Int64(n), RefillTime: sdk.Int64(1000)}
	}
	return &models.RateLimiter{Bandwidth: bucket(bytes), Ops: bucket(ops)}
}
