package vm

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/vminit"
)

// machine is one VM as QEMU is asked to run it. Every file QEMU uses is
// a descriptor it inherits (the fd constants below); it opens no host
// path itself, so its uid needs access to none.
type machine struct {
	id       string
	accel    string
	cpus     int
	memoryMB int
	diskIO   isolation.DiskIO
	mac      string
	// tbMB caps TCG's translation cache (QEMU's default reserves 1 GiB,
	// which a busy guest fills, all of it host memory).
	tbMB int
	// cmdline is the guest kernel's (guestCmdline).
	cmdline string
	// incoming: the guest's state comes from a snapshot
	// (qmp.MigrateIncoming), not from booting the kernel.
	incoming bool
	// volumes is how many volume disks the VM has (volumeFd).
	volumes int
}

// Descriptors QEMU inherits, as numbered in its process. QEMU opens a
// disk read-only first and then read-write, so the overlay is in its fd
// set twice (-add-fd picks the descriptor whose mode matches).
const (
	qmpFd       = 3 // the listening control socket
	tapFd       = 4 // the tap's queue
	kernelFd    = 5
	initrdFd    = 6
	overlayFd   = 7 // read-write
	overlayROFd = 8
	imageFd     = 9  // the template image, read-only: the overlay's backing file
	toolsFd     = 10 // the tools disk, read-only
	consoleFd   = 11 // the serial console's listening socket
)

// QEMU fd sets (-add-fd), named in disk paths as /dev/fdset/<n>.
const (
	overlaySet = 1
	imageSet   = 2
	toolsSet   = 3
)

// volumeFd is the read-write descriptor of the i-th volume's image, after
// consoleFd; its read-only one follows (QEMU opens it both ways, as the
// overlay). volumeSet is its fd set.
func volumeFd(i int) int  { return consoleFd + 1 + 2*i }
func volumeSet(i int) int { return toolsSet + 1 + i }

func fdsetPath(set int) string { return "/dev/fdset/" + strconv.Itoa(set) }

// procFd is how QEMU opens an inherited descriptor that it takes by path
// only (-kernel, -initrd).
func procFd(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// guestCmdline is the guest kernel's command line, for a host TSC of
// tscKHz (hostTSCKHz; 0: unknown). The guest's TSC ticks at the host's
// rate, which the kernel is told, with lpj to match (CONFIG_HZ=250), and
// trusts: under TCG, with several guests booting at once on a loaded
// host, its own calibration hangs (measured: four parallel boots on two
// cores hang 4/4 with tsc=unstable, boot 4/4 with these), and a wrong
// rate makes its clock run fast or slow by the ratio. panic=-1 with
// -no-reboot makes a guest panic (or vminit's reboot) end QEMU, through a
// triple fault (reboot=t): the kernel's default on microvm's
// hardware-reduced ACPI is an EFI reset, which a guest booted without EFI
// lacks, and then a jump to the BIOS in real mode, which at times spun in
// the firmware instead (measured: 1 of 6 panics left QEMU running, its
// first vCPU at 100% in 32-bit mode).
func guestCmdline(tscKHz int) string {
	if tscKHz <= 0 {
		tscKHz = 2_000_000 // a guess: the clock then drifts, but the guest boots
	}
	return fmt.Sprintf("console=ttyS0 quiet panic=-1 reboot=t tsc=reliable tsc_early_khz=%d lpj=%d "+
		"8250.nr_uarts=1 random.trust_cpu=on rdinit=/init", tscKHz, tscKHz*1000/250)
}

// args is QEMU's command line for m.
func (m *machine) args() []string {
	cpu := "max"
	accel := "tcg,tb-size=" + strconv.Itoa(m.tbMB)
	if m.accel == AccelKVM {
		cpu, accel = "host", "kvm"
	}
	drive := func(id string, set int, format, cache string, readonly bool, extra string) string {
		// No image locking: QEMU opens its disks from descriptors the
		// backend alone hands out, and its locks would refuse the write
		// lock a cont takes back after a save (Instance.Snapshot).
		s := fmt.Sprintf("if=none,id=%s,file=%s,format=%s,cache=%s,aio=threads,file.locking=off", id, fdsetPath(set), format, cache)
		if readonly {
			s += ",readonly=on"
		}
		return s + extra
	}
	args := []string{
		"-name", "agent-sandbox-" + m.id,
		"-M", "microvm,pit=on,pic=on,rtc=on",
		"-accel", accel,
		"-cpu", cpu,
		"-smp", strconv.Itoa(m.cpus),
		"-m", strconv.Itoa(m.memoryMB),
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		// QEMU's own seccomp filter: no exec, no privilege changes, no
		// scheduler or resource-limit changes, no obsolete syscalls.
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		// The console is a socket the backend connects to, again after a
		// restart of the server: the guest's logs and init's requests
		// (vminit.Request) go over it.
		"-chardev", "socket,id=console,fd=" + strconv.Itoa(consoleFd) + ",server=on,wait=off",
		"-serial", "chardev:console",
		"-kernel", procFd(kernelFd),
		"-initrd", procFd(initrdFd),
		"-append", m.cmdline,
		"-chardev", "socket,id=qmp,fd=" + strconv.Itoa(qmpFd) + ",server=on,wait=off",
		"-mon", "chardev=qmp,mode=control",
		"-add-fd", fmt.Sprintf("fd=%d,set=%d", overlayFd, overlaySet),
		"-add-fd", fmt.Sprintf("fd=%d,set=%d", overlayROFd, overlaySet),
		"-add-fd", fmt.Sprintf("fd=%d,set=%d", imageFd, imageSet),
		"-add-fd", fmt.Sprintf("fd=%d,set=%d", toolsFd, toolsSet),
		// The overlay names its backing file as /dev/fdset/<imageSet>.
		// The sandbox's own disks ignore the guest's flushes (unsafe):
		// they end with it.
		"-drive", drive("root", overlaySet, "qcow2", "unsafe", false, throttling(m.diskIO)),
		"-device", "virtio-blk-device,drive=root",
		"-drive", drive("tools", toolsSet, "raw", "unsafe", true, ""),
		"-device", "virtio-blk-device,drive=tools",
		"-netdev", "tap,id=net0,fd=" + strconv.Itoa(tapFd) + ",vhost=off",
		"-device", "virtio-net-device,netdev=net0,mac=" + m.mac,
		"-device", "virtio-rng-device",
		// Free page reporting: the guest reports the memory it frees
		// (in 2 MiB blocks, a few seconds later) and QEMU gives it back
		// to the host, so an idle VM holds what its guest uses rather
		// than all it ever touched.
		"-device", "virtio-balloon-device,free-page-reporting=on",
		// Started stopped: the server confines the process (cgroup) and
		// connects to the monitor before the guest runs.
		"-S",
	}
	// Volumes outlive the VM: a flush in the guest is one on the host
	// (writeback). vminit finds each by its serial.
	for i := range m.volumes {
		id := "volume" + strconv.Itoa(i)
		args = append(args,
			"-add-fd", fmt.Sprintf("fd=%d,set=%d", volumeFd(i), volumeSet(i)),
			"-add-fd", fmt.Sprintf("fd=%d,set=%d", volumeFd(i)+1, volumeSet(i)),
			"-drive", drive(id, volumeSet(i), "raw", "writeback", false, ""),
			"-device", "virtio-blk-device,drive="+id+",serial="+vminit.VolumeSerial(i))
	}
	if m.incoming {
		args = append(args, "-incoming", "defer")
	}
	return args
}

// throttling is QEMU's drive throttling for q, as -drive options.
func throttling(q isolation.DiskIO) string {
	var b strings.Builder
	for _, o := range []struct {
		name string
		v    uint64
	}{
		{"bps-read", q.ReadBytesPerSec}, {"bps-write", q.WriteBytesPerSec},
		{"iops-read", q.ReadIOPS}, {"iops-write", q.WriteIOPS},
	} {
		if o.v > 0 {
			fmt.Fprintf(&b, ",throttling.%s=%d", o.name, o.v)
		}
	}
	return b.String()
}
