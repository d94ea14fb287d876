package vm

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
)

func TestMachineArgs(t *testing.T) {
	m := &machine{id: "sbx1", accel: AccelTCG, cpus: 2, memoryMB: 512, mac: "02:00:00:00:00:01", tbMB: 64,
		diskIO: isolation.DiskIO{ReadBytesPerSec: 1000, WriteIOPS: 7}, volumes: 2}
	args := m.args()
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"-name agent-sandbox-sbx1", "-accel tcg,tb-size=64", "-cpu max", "-smp 2", "-m 512", "-no-reboot", "-S",
		"-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"throttling.bps-read=1000,throttling.iops-write=7",
		"mac=02:00:00:00:00:01",
		// Two volumes after the console's descriptor, flushed through.
		"-add-fd fd=12,set=4 -add-fd fd=13,set=4 -drive if=none,id=volume0,file=/dev/fdset/4,format=raw,cache=writeback,",
		"-device virtio-blk-device,drive=volume0,serial=asb-volume-0",
		"-add-fd fd=14,set=5 -add-fd fd=15,set=5 -drive if=none,id=volume1,file=/dev/fdset/5,format=raw,cache=writeback,",
		"-device virtio-blk-device,drive=volume1,serial=asb-volume-1",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("QEMU's arguments lack %q:\n%s", want, joined)
		}
	}
	// Every file is an inherited descriptor: no host path in the arguments.
	for i, a := range args {
		if strings.Contains(a, "/") && !strings.HasPrefix(a, "/proc/self/fd/") &&
			!strings.Contains(a, "/dev/fdset/") && args[i-1] != "-append" {
			t.Errorf("argument %q names a host path", a)
		}
	}
	m.accel = AccelKVM
	if args := m.args(); !slices.Contains(args, "kvm") || !slices.Contains(args, "host") {
		t.Errorf("KVM machine: %v", args)
	}
}

func TestGuestReason(t *testing.T) {
	for _, tc := range []struct{ console, want string }{
		{"[ 1.0] sysrq: Trigger a crash\r\n[ 1.1] Kernel panic - not syncing: sysrq triggered crash\r\n", "guest kernel panic: sysrq triggered crash"},
		{"vminit: halt: mounting the root: no such device\r\n", "guest init: mounting the root: no such device"},
		{"vminit: envd started (pid 89, 631ms after init)\nvminit: halt: envd exited: exit status 2\n", "guest init: envd exited: exit status 2"},
		// Progress and answers are not why a VM ended: QEMU was killed.
		{"vminit: envd started (pid 89, 631ms after init)\r\nvminit: identity 6aef345db5fb7437 done\r\n", ""},
		{"just noise", ""},
	} {
		if got := guestReason([]byte(tc.console)); got != tc.want {
			t.Errorf("guestReason(%q) = %q, want %q", tc.console, got, tc.want)
		}
	}
}

func TestGuestCmdline(t *testing.T) {
	got := guestCmdline(2_600_000)
	for _, want := range []string{"tsc=reliable", "tsc_early_khz=2600000", "lpj=10400000", "panic=-1", "reboot=t", "rdinit=/init"} {
		if !strings.Contains(" "+got+" ", " "+want+" ") {
			t.Errorf("guestCmdline(2.6 GHz) = %q, lacks %s", got, want)
		}
	}
	if got := guestCmdline(0); !strings.Contains(got, "tsc_early_khz=2000000 ") {
		t.Errorf("guestCmdline(unknown) = %q, want the guess", got)
	}
}

func TestHostTSCKHz(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		if k := hostTSCKHz(); k != 0 {
			t.Errorf("hostTSCKHz on %s = %d, want 0 (unknown)", runtime.GOARCH, k)
		}
		return
	}
	a, b := hostTSCKHz(), hostTSCKHz()
	if a < 100_000 || a%1000 != 0 {
		t.Fatalf("hostTSCKHz = %d, want whole MHz of at least 100", a)
	}
	// Rounded to MHz, two measurements agree (or straddle one boundary).
	if d := a - b; d > 1000 || d < -1000 {
		t.Errorf("hostTSCKHz = %d then %d", a, b)
	}
	t.Logf("host TSC: %d kHz", a)
}
