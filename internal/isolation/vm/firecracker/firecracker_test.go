package firecracker

import (
	"strings"
	"testing"

	sdk "github.com/firecracker-microvm/firecracker-go-sdk"
	"github.com/firecracker-microvm/firecracker-go-sdk/client/models"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var bin = Binaries{Firecracker: "/usr/local/bin/firecracker", Jailer: "/usr/local/bin/jailer"}

// sandbox is a machine as the vm backend would describe one.
func sandbox() Machine {
	return Machine{
		ID:         "sbx-1234",
		KernelPath: "/var/lib/agent-sandbox/kernels/current/boot/vmlinux-6.1.0-57-cloud-amd64",
		InitrdPath: "/var/lib/agent-sandbox/initramfs.gz",
		BootArgs:   "console=ttyS0 panic=-1 quiet tsc=unstable lpj=5000000 root=/dev/vda rw agent_sandbox.tools=/dev/vdb",
		VCPUs:      2,
		MemoryMB:   512,
		Drives: []Drive{
			{Path: "/var/lib/agent-sandbox/run/sbx-1234/root.img", Bandwidth: 50 << 20, IOPS: 2000},
			{Path: "/var/lib/agent-sandbox/tools.img", ReadOnly: true},
		},
		TapName:      "tap0",
		MAC:          "02:fc:00:00:00:01",
		NetBandwidth: 10 << 20,
		NetNSPath:    "/run/netns/sbx-1234",
		UID:          64000,
		GID:          64000,
		ChrootBase:   "/var/lib/agent-sandbox/jailer",
		CgroupParent: "agent-sandbox",
	}
}

func TestConfig(t *testing.T) {
	mb50 := int64(50 << 20)
	cfg, err := Config(sandbox(), bin)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := 64000, 64000
	want := sdk.Config{
		SocketPath:      "/run/firecracker.socket",
		VMID:            "sbx-1234",
		KernelImagePath: "/var/lib/agent-sandbox/kernels/current/boot/vmlinux-6.1.0-57-cloud-amd64",
		InitrdPath:      "/var/lib/agent-sandbox/initramfs.gz",
		KernelArgs:      "console=ttyS0 panic=-1 quiet root=/dev/vda rw agent_sandbox.tools=/dev/vdb reboot=k pci=off",
		MachineCfg:      models.MachineConfiguration{VcpuCount: sdk.Int64(2), MemSizeMib: sdk.Int64(512), Smt: sdk.Bool(false)},
		Drives: []models.Drive{
			{
				DriveID: sdk.String("disk0"), PathOnHost: sdk.String("/var/lib/agent-sandbox/run/sbx-1234/root.img"),
				IsReadOnly: sdk.Bool(false), IsRootDevice: sdk.Bool(false),
				RateLimiter: &models.RateLimiter{
					Bandwidth: &models.TokenBucket{Size: &mb50, RefillTime: sdk.Int64(1000)},
					Ops:       &models.TokenBucket{Size: sdk.Int64(2000), RefillTime: sdk.Int64(1000)},
				},
			},
			{
				DriveID: sdk.String("disk1"), PathOnHost: sdk.String("/var/lib/agent-sandbox/tools.img"),
				IsReadOnly: sdk.Bool(true), IsRootDevice: sdk.Bool(false),
			},
		},
		NetworkInterfaces: sdk.NetworkInterfaces{{
			StaticConfiguration: &sdk.StaticNetworkConfiguration{MacAddress: "02:fc:00:00:00:01", HostDevName: "tap0"},
			InRateLimiter:       &models.RateLimiter{Bandwidth: &models.TokenBucket{Size: sdk.Int64(10 << 20), RefillTime: sdk.Int64(1000)}},
			OutRateLimiter:      &models.RateLimiter{Bandwidth: &models.TokenBucket{Size: sdk.Int64(10 << 20), RefillTime: sdk.Int64(1000)}},
		}},
		NetNS:   "/run/netns/sbx-1234",
		Seccomp: sdk.SeccompConfig{Enabled: true},
		JailerCfg: &sdk.JailerConfig{
			ID: "sbx-1234", UID: &uid, GID: &gid, NumaNode: sdk.Int(0),
			ExecFile: "/usr/local/bin/firecracker", JailerBinary: "/usr/local/bin/jailer",
			ChrootBaseDir:  "/var/lib/agent-sandbox/jailer",
			ChrootStrategy: sdk.NewNaiveChrootStrategy("/var/lib/agent-sandbox/kernels/current/boot/vmlinux-6.1.0-57-cloud-amd64"),
			CgroupVersion:  "2",
		},
	}
	if diff := cmp.Diff(want, cfg, cmpopts.IgnoreUnexported(sdk.Config{})); diff != "" {
		t.Errorf("Config (-want +got):\n%s", diff)
	}
}

func TestJailerArgs(t *testing.T) {
	got := JailerArgs(sandbox(), bin)
	want := []string{
		"--id", "sbx-1234",
		"--uid", "64000", "--gid", "64000",
		"--exec-file", "/usr/local/bin/firecracker",
		"--cgroup-version", "2",
		"--parent-cgroup", "agent-sandbox",
		"--chroot-base-dir", "/var/lib/agent-sandbox/jailer",
		"--netns", "/run/netns/sbx-1234",
		"--",
		"--api-sock", "/run/firecracker.socket",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JailerArgs (-want +got):\n%s", diff)
	}
	// The SDK connects to the socket Config names, inside the chroot; the
	// argv must start Firecracker there. And Firecracker keeps seccomp:
	// no --no-seccomp, which the SDK's zero value would pass.
	cfg, _ := Config(sandbox(), bin)
	if got[len(got)-1] != cfg.SocketPath {
		t.Errorf("API socket %s in the argv, %s in the config", got[len(got)-1], cfg.SocketPath)
	}
	for _, a := range got {
		if a == "--no-seccomp" {
			t.Error("the jailer argv turns seccomp off")
		}
	}
}

func TestBootArgs(t *testing.T) {
	for _, tc := range []struct{ name, qemu, want string }{
		{"drops QEMU's workarounds", "console=ttyS0 tsc=unstable lpj=5000000 quiet", "console=ttyS0 quiet reboot=k pci=off"},
		{"keeps look-alikes", "tsc_early_khz=1 lpjx=2 agent.lpj=3", "tsc_early_khz=1 lpjx=2 agent.lpj=3 reboot=k pci=off"},
		{"empty", "", "reboot=k pci=off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BootArgs(tc.qemu); got != tc.want {
				t.Errorf("BootArgs(%q) = %q, want %q", tc.qemu, got, tc.want)
			}
		})
	}
}

func TestConfigRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Machine)
		want   string
	}{
		{"long id", func(m *Machine) { m.ID = strings.Repeat("a", 65) }, "is not 1 to 64 letters"},
		{"id with a slash", func(m *Machine) { m.ID = "../x" }, "is not 1 to 64 letters"},
		{"no vcpu", func(m *Machine) { m.VCPUs = 0 }, "0 vCPUs"},
		{"no memory", func(m *Machine) { m.MemoryMB = 0 }, "0 MB of memory"},
		{"no drive", func(m *Machine) { m.Drives = nil }, "no drive"},
		{"same file name twice", func(m *Machine) { m.Drives[1].Path = "/elsewhere/root.img" }, "drive 1: another drive has the file name root.img"},
		{"bad MAC", func(m *Machine) { m.MAC = "02:fc" }, "MAC: "},
		{"root", func(m *Machine) { m.UID = 0 }, "must not run as root"},
		{"relative chroot", func(m *Machine) { m.ChrootBase = "jailer" }, "chroot base \"jailer\" is not an absolute path"},
		{"absolute cgroup", func(m *Machine) { m.CgroupParent = "/sys/fs/cgroup/x" }, "is not a relative path"},
		{"no netns", func(m *Machine) { m.NetNSPath = "" }, "no network namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := sandbox()
			tc.change(&m)
			_, err := Config(m, bin)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Config: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
