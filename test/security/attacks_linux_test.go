package security

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox/sandboxtest"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// TestAttacks is the security issue's acceptance table: attacks from inside
// real sandboxes, as user and as root, each checked for containment.
// The table of every case is logged at the end, also when a case fails.
// TestAttacks runs every attack in jails twice: with the sandbox in a
// user namespace (the default where the host allows) and without (the
// fallback elsewhere), where only the other layers hold root down; and
// the escape and resource cases in VMs and in gVisor, where a case's
// expectation says when the guest's kernel or gVisor's answers otherwise.
func TestAttacks(t *testing.T) {
	for _, su := range []setup{{sandboxtest.Jail, jail.UsernsOn}, {sandboxtest.Jail, jail.UsernsOff}, {sandboxtest.VM, ""}, {sandboxtest.Gvisor, ""}} {
		t.Run(su.String(), func(t *testing.T) { attacks(t, su) })
	}
}

func attacks(t *testing.T, su setup) {
	start := time.Now()
	h := newHarness(t, su)
	tb := &table{}
	defer func() { t.Logf("security cases, %s (%s):\n%s", su, time.Since(start).Round(time.Second), tb) }()

	// The attacker, allowed to reach the site's range by address so that a
	// spoofed packet would have a path out; and a neighbour.
	sb := h.create(`{"allowOut":["` + siteCIDR + `"]}`)
	neighbour := h.create("")

	t.Run("escape syscalls", func(t *testing.T) { h.t = t; testSyscalls(t, h, tb, sb) })
	t.Run("filesystem", func(t *testing.T) { h.t = t; testFilesystem(t, h, tb, sb) })
	t.Run("resources", func(t *testing.T) { h.t = t; testResources(t, h, tb) })
	if h.vm() || h.gvisor() {
		// The VMs' pass is kept to the escape and resource cases (CI
		// time: every probe is an emulated process start), and so is
		// gVisor's (its network is the jail's, on the host); the egress
		// suite checks their network on the host.
		t.Log("the envd files API, network and inside-out leak cases run in jails only")
		return
	}
	t.Run("envd files API", func(t *testing.T) { h.t = t; testFilesAPI(t, h, tb, sb) })
	t.Run("network", func(t *testing.T) { h.t = t; testNetwork(t, h, tb, sb, neighbour) })
	t.Run("inside-out leaks", func(t *testing.T) { h.t = t; testLeaks(t, h, tb, neighbour) })
}

var users = []string{"user", "root"}

// syscallCases are the escape syscalls and the errno the seccomp filter
// answers them with, for root and user alike.
var syscallCases = []struct{ name, attack, want string }{
	{"ptrace", "ptrace(PTRACE_ATTACH, 1)", "EPERM"},
	{"process_vm_readv", "process_vm_readv(pid 1)", "EPERM"},
	{"mount", "mount(tmpfs, /tmp)", "EPERM"},
	{"umount", "umount2(/proc/sysrq-trigger) to unmask it", "EPERM"},
	{"unshare-user", "unshare(CLONE_NEWUSER)", "EPERM"},
	{"unshare-mount", "unshare(CLONE_NEWNS)", "EPERM"},
	{"unshare-net", "unshare(CLONE_NEWNET)", "EPERM"},
	{"setns", "setns(/proc/self/ns/net)", "EPERM"},
	{"clone-newuser", "clone(CLONE_NEWUSER)", "EPERM"},
	{"clone-newns-newnet", "clone(CLONE_NEWNS|CLONE_NEWNET)", "EPERM"},
	{"clone3", "clone3(CLONE_NEWUSER)", "ENOSYS"},
	{"pivot_root", "pivot_root(/tmp, /tmp)", "EPERM"},
	{"kexec_load", "kexec_load", "EPERM"},
	{"kexec_file_load", "kexec_file_load", "EPERM"},
	{"init_module", "init_module", "EPERM"},
	{"finit_module", "finit_module", "EPERM"},
	{"delete_module", "delete_module", "EPERM"},
	{"bpf", "bpf(BPF_MAP_CREATE)", "EPERM"},
	{"perf_event_open", "perf_event_open(cpu-clock)", "EPERM"},
	{"keyctl", "keyctl(GET_KEYRING_ID)", "EPERM"},
	{"add_key", "add_key(user)", "EPERM"},
	{"userfaultfd", "userfaultfd", "EPERM"},
	{"open_by_handle_at", "open_by_handle_at (shocker)", "EPERM"},
	{"name_to_handle_at", "name_to_handle_at(/)", "EPERM"},
	{"iopl", "iopl(3)", "EPERM"},
	{"ioperm", "ioperm(0x80)", "EPERM"},
	{"acct", "acct(file)", "EPERM"},
	{"swapon", "swapon", "EPERM"},
	{"reboot", "reboot(CAD_ON)", "EPERM"},
	{"settimeofday", "settimeofday(now)", "EPERM"},
	{"clock_settime", "clock_settime(REALTIME, now)", "EPERM"},
	{"io_uring_setup", "io_uring_setup", "EPERM"},
	{"personality", "personality(READ_IMPLIES_EXEC)", "EPERM"},
	{"syslog", "syslog(READ_ALL) (dmesg)", "EPERM"},
}

// oracleControl proves, in the probe run of a syscall row, that the seccomp
// oracle works: an allowed call reaches the probe's notifier.
var oracleControl = control{args: []string{"sys", "getppid"}, want: "getppid to reach the notifier", ok: is(passedFilter)}

// socketCases are the address families the jail's filter refuses.
var socketCases = []struct{ name, attack string }{
	{"socket-vsock", "socket(AF_VSOCK) (not namespaced: shared with every sandbox and the host)"},
	{"socket-packet", "socket(AF_PACKET, SOCK_RAW) (raw frames on eth0)"},
	{"socket-alg", "socket(AF_ALG) (kernel crypto API)"},
	{"socketpair-vsock", "socketpair(AF_VSOCK)"},
}

// socketControls: the families real programs need open for real, and
// AF_INET passes the filter under the oracle.
var socketControls = []control{
	oracleControl,
	{args: []string{"sys", "socket-inet"}, want: "AF_INET to reach the notifier", ok: is(passedFilter)},
	{args: []string{"socket", "inet"}, want: "ok", ok: is("ok")},
	{args: []string{"socket", "inet6"}, want: "ok", ok: is("ok")},
	{args: []string{"socket", "unix"}, want: "ok", ok: is("ok")},
	{args: []string{"socket", "netlink"}, want: "ok", ok: is("ok")},
}

func testSyscalls(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	// A VM's guest loads the jail's filter too (package guest); gVisor's
	// kernel enforces it for envd and what envd starts.
	filter := h.orGvisor(h.orVM("the jail's seccomp filter", "the guest's seccomp filter (the jail's list)"),
		"the jail's seccomp filter, enforced by gVisor's kernel")
	for _, c := range syscallCases {
		for _, u := range users {
			probe := "sys"
			if h.gvisor() && c.want == "ENOSYS" {
				// gVisor's oracle answers ENOSYS itself (passedFilter):
				// the call is made without it.
				probe = "raw"
			}
			got, obs, ok := h.probed(sb, u, []control{oracleControl}, probe, c.name)
			how := " from " + filter + " (never reaches the probe's notifier; getppid does)"
			if probe == "raw" {
				how = " from " + filter + " or from gVisor's kernel (made without the oracle, which answers ENOSYS itself; getppid passes the filter)"
			}
			tb.add(t, outcome{attack: c.attack, as: u,
				expected: c.want + how,
				observed: obs, contained: ok && got == c.want})
		}
	}
	for _, c := range socketCases {
		for _, u := range users {
			got, obs, ok := h.probed(sb, u, socketControls, "sys", c.name)
			tb.add(t, outcome{attack: c.attack, as: u,
				expected: "EAFNOSUPPORT from " + filter + "; AF_INET, AF_INET6, AF_UNIX, AF_NETLINK open",
				observed: obs, contained: ok && got == "EAFNOSUPPORT"})
		}
	}
	// chroot is allowed to root (CAP_SYS_CHROOT, Docker's default), so
	// the break-out must end in the sandbox's own root; the marker's path
	// is real on the host.
	if _, err := os.Stat(h.marker); err != nil {
		t.Fatalf("the host marker: %v", err)
	}
	tmp := control{args: []string{"stat", "/tmp"}, want: "ok", ok: is("ok")}
	got, obs, ok := h.probed(sb, "root", []control{tmp}, "chroot-escape", h.marker)
	tb.add(t, outcome{attack: "chroot escape (chroot, chdir .. ×64, chroot .)", as: "root",
		expected: h.orVM("ends in the sandbox's root (pivot_root; old root detached); host marker ENOENT there",
			"ends in the sandbox's root (the VM's own disk); host marker ENOENT there"), observed: obs,
		contained: ok && got == "ok escaped to the sandbox's root; host marker: ENOENT"})
	got, obs, ok = h.probed(sb, "user", []control{tmp}, "chroot-escape", h.marker)
	tb.add(t, outcome{attack: "chroot escape (chroot, chdir .. ×64, chroot .)", as: "user",
		expected: "chroot: EPERM (no CAP_SYS_CHROOT)", observed: obs, contained: ok && got == "chroot: EPERM"})
}

func testFilesystem(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	var root unix.Stat_t
	if err := unix.Stat("/", &root); err != nil {
		t.Fatal(err)
	}
	disk := fmt.Sprintf("%d %d", unix.Major(root.Dev), unix.Minor(root.Dev))
	thp := currentTHP(t)
	// Kernels without CONFIG_MAGIC_SYSRQ have no /proc/sysrq-trigger;
	// elsewhere the jail binds /dev/null over it.
	sysrq, sysrqContained := "lands in /dev/null (masked: char 1:3)", is("ok wrote to char 1:3")
	sysrqUser, sysrqUserContained := sysrq, sysrqContained
	if _, err := os.Stat("/proc/sysrq-trigger"); errors.Is(err, os.ErrNotExist) {
		sysrq, sysrqContained = "ENOENT (the host kernel has none)", is("ENOENT")
		sysrqUser, sysrqUserContained = sysrq, sysrqContained
	}
	if h.vm() {
		// vminit masks nothing in the guest's /proc: its sysrq is the
		// guest kernel's, and 'h' prints help on the VM's console.
		sysrq, sysrqContained = "writes: the guest kernel's own sysrq (help on the VM's console)", is("ok wrote to mode 100000")
		sysrqUser, sysrqUserContained = "EACCES (root's 0200 file)", is("EACCES (mode 100000)")
	}

	type fsCase struct {
		attack, as, expected string
		controls             []control
		args                 []string
		contained            func(string) bool
		// hostFile is a host file the attack aims at: it must hold
		// afterwards what it held before.
		hostFile string
	}
	// Positive controls: the same kind of step against something the
	// probe may reach.
	readable := func(path string) control {
		return control{args: []string{"read", path}, want: "ok (readable)", ok: okPrefix}
	}
	fifo := func(dir string) control {
		return control{args: []string{"mkfifo", dir}, want: "ok", ok: is("ok")}
	}
	envd := control{args: []string{"read", "/usr/bin/envd"}, want: `ok "\x7fELF…" (envd is there)`,
		ok: func(s string) bool { return strings.HasPrefix(s, `ok "\x7fELF`) }}
	// In a user namespace, root holds its capabilities there only: host
	// root's files stay closed and device nodes cannot be made. In a VM,
	// /proc/sys is the guest kernel's, which its root may set (the VM is
	// the boundary); the host's files are checked unchanged.
	procSysErr := h.by("EACCES", "EROFS", "ok")
	procSys := h.by("EACCES (host root's files)", "EROFS (/proc/sys read-only)", "ok: the guest kernel's own (the host's unchanged)")
	mknodErr := h.by("mknod: EPERM", "mknod ok, open: EACCES", "mknod ok, open: EACCES")
	mknod := h.by("mknod: EPERM (no CAP_MKNOD on the host)", "mknod works (CAP_MKNOD), open: EACCES (nodev)",
		"mknod works (CAP_MKNOD), open: EACCES (the guest's disk is nodev)")
	// envd is a host file bound read-only in the jail; in a VM, a file of
	// the read-only tools disk the host made.
	envdRO := h.orVM("EROFS (on the host's read-only binaries tmpfs)", "EROFS (on the VM's read-only tools disk)")
	// gVisor's /proc and /sys are its kernel's, with few of Linux's files
	// and none that reaches the host's; device nodes may be made in its
	// own file systems, and open none of the host's devices.
	environ, environContained := "EACCES (non-dumpable)", is("EACCES")
	environUser := "EACCES"
	sysFile := func(path string) control { return readable(path) }
	sysWrite, sysWriteErr := "EROFS (/sys read-only)", "EROFS"
	procSysMissing, procSysMissingErr := procSys, procSysErr
	procSysUser, procSysUserErr := "EACCES", "EACCES"
	hostname, hostnameErr := procSys, procSysErr
	mknodUser, mknodUserErr := "mknod: EPERM", "mknod: EPERM"
	mknodDev, mknodDevErr := "mknod: EROFS (/dev read-only)", "mknod: EROFS"
	overcommit := readable("/proc/sys/vm/overcommit_memory")
	corePattern := readable("/proc/sys/kernel/core_pattern")
	if h.gvisor() {
		// runsc 20221219 skips the dumpable check on environ: init's
		// environment is PATH alone (its spec), the token reaches envd
		// through a pipe.
		environ = `readable (gVisor does not check dumpable here): PATH alone, no secret`
		environUser = environ
		environContained = func(s string) bool { return strings.HasPrefix(s, `ok "PATH=/usr/local/sbin:`) }
		sysFile = func(string) control { return readable("/sys/devices/system/cpu/online") }
		sysWrite, sysWriteErr = "ENOENT (not in gVisor's /sys)", "ENOENT"
		procSysMissing, procSysMissingErr = "ENOENT (not in gVisor's /proc/sys)", "ENOENT"
		procSysUser, procSysUserErr = procSysMissing, procSysMissingErr
		hostname, hostnameErr = "EIO (gVisor's own hostname, not writable)", "EIO"
		mknod = "mknod works (gVisor's own file system), open: ENXIO (gVisor has no such device)"
		mknodErr = "mknod ok, open: ENXIO"
		mknodUser, mknodUserErr = mknod, mknodErr
		mknodDev, mknodDevErr = mknod, mknodErr
		corePattern = overcommit
	}
	cases := []fsCase{
		{"read the host marker through /proc/1/root", "root", "EACCES (init is non-dumpable, no CAP_SYS_PTRACE)",
			[]control{readable("/proc/self/root/etc/hosts")}, []string{"read", "/proc/1/root" + h.marker}, is("EACCES"), ""},
		{"read the host marker through /proc/1/root", "user", "EACCES",
			[]control{readable("/proc/self/root/etc/hosts")}, []string{"read", "/proc/1/root" + h.marker}, is("EACCES"), ""},
		{"read /proc/1/environ (init's environment)", "root", environ,
			[]control{readable("/proc/self/environ")}, []string{"read", "/proc/1/environ"}, environContained, ""},
		{"read /proc/1/environ (init's environment)", "user", environUser,
			[]control{readable("/proc/self/environ")}, []string{"read", "/proc/1/environ"}, environContained, ""},
		{"write 'h' to /proc/sysrq-trigger", "root", sysrq, []control{readable("/proc/self/status")}, []string{"sysrq"}, sysrqContained, ""},
		{"write 'h' to /proc/sysrq-trigger", "user", sysrqUser, []control{readable("/proc/self/status")}, []string{"sysrq"}, sysrqUserContained, ""},
		{"write /sys/kernel/mm/transparent_hugepage/enabled", "root", sysWrite,
			[]control{sysFile("/sys/kernel/mm/transparent_hugepage/enabled")},
			[]string{"write", "/sys/kernel/mm/transparent_hugepage/enabled", thp}, is(sysWriteErr), "/sys/kernel/mm/transparent_hugepage/enabled"},
		{"write /sys/kernel/profiling", "root", sysWrite,
			[]control{sysFile("/sys/kernel/profiling")}, []string{"rewrite", "/sys/kernel/profiling"}, is(sysWriteErr), ""},
		{"write 1 to /proc/sys/vm/drop_caches", "root", procSysMissing,
			[]control{overcommit}, []string{"write", "/proc/sys/vm/drop_caches", "1"}, is(procSysMissingErr), ""},
		{"rewrite /proc/sys/kernel/core_pattern", "root", procSysMissing,
			[]control{corePattern}, []string{"rewrite", "/proc/sys/kernel/core_pattern"}, is(procSysMissingErr),
			"/proc/sys/kernel/core_pattern"},
		{"write /proc/sys/kernel/hostname", "root", hostname,
			[]control{readable("/proc/sys/kernel/hostname")}, []string{"write", "/proc/sys/kernel/hostname", "pwned"}, is(hostnameErr),
			"/proc/sys/kernel/hostname"},
		{"rewrite /proc/sys/kernel/core_pattern", "user", procSysUser,
			[]control{corePattern}, []string{"rewrite", "/proc/sys/kernel/core_pattern"}, is(procSysUserErr), ""},
		{"mknod the host's root disk (" + disk + ") in /tmp and read it", "root", mknod,
			[]control{fifo("/tmp")}, append([]string{"mknod-open", "/tmp/disk", "b"}, strings.Fields(disk)...), is(mknodErr), ""},
		{"mknod the host's root disk (" + disk + ") in /tmp and read it", "user", mknodUser,
			[]control{fifo("/tmp")}, append([]string{"mknod-open", "/tmp/disk", "b"}, strings.Fields(disk)...), is(mknodUserErr), ""},
		{"mknod sda (8:0) in /dev/shm and read it", "root", mknod,
			[]control{fifo("/dev/shm")}, []string{"mknod-open", "/dev/shm/sda", "b", "8", "0"}, is(mknodErr), ""},
		{"mknod sda (8:0) in /dev", "root", mknodDev,
			[]control{fifo("/tmp"), readable("/dev/zero")}, []string{"mknod-open", "/dev/sda", "b", "8", "0"}, is(mknodDevErr), ""},
		{"open /dev/mem", "root", "ENOENT (not in the sandbox's /dev)", []control{readable("/dev/zero")}, []string{"read", "/dev/mem"}, is("ENOENT"), ""},
		{"mknod /dev/mem (c 1:1) in /tmp and read it", "root", mknod,
			[]control{fifo("/tmp")}, []string{"mknod-open", "/tmp/mem", "c", "1", "1"}, is(mknodErr), ""},
		{"open /dev/kmem", "root", "ENOENT", []control{readable("/dev/zero")}, []string{"read", "/dev/kmem"}, is("ENOENT"), ""},
		{"mknod /dev/kmem (c 1:2) in /tmp and read it", "root", mknod,
			[]control{fifo("/tmp")}, []string{"mknod-open", "/tmp/kmem", "c", "1", "2"}, is(mknodErr), ""},
		{"open /usr/bin/envd (a host file) for writing", "root", envdRO,
			[]control{envd}, []string{"write", "/usr/bin/envd", "x"}, is("EROFS"), ""},
		{"chmod /usr/bin/envd (a host file)", "root", envdRO,
			[]control{envd}, []string{"chmod", "/usr/bin/envd"}, is("EROFS"), ""},
		{"rename a file over /usr/bin/envd", "root", "EBUSY (a mount point)",
			[]control{envd, {args: []string{"stat", "/usr/bin/probe"}, want: "ok", ok: is("ok")}},
			[]string{"rename", "/usr/bin/probe", "/usr/bin/envd"}, is("EBUSY"), ""},
		{"hard-link /usr/bin/envd (a host file) into /tmp", "root", "EXDEV (another mount)",
			[]control{envd, {args: []string{"link-own", "/tmp"}, want: "ok", ok: is("ok")}},
			[]string{"link", "/usr/bin/envd", "/tmp/envd"}, is("EXDEV"), ""},
		{"hard-link /etc/shadow into the home directory", "user", "EPERM (protected_hardlinks)",
			[]control{{args: []string{"link-own", "/home/user"}, want: "ok", ok: is("ok")}},
			[]string{"link", "/etc/shadow", "/home/user/shadow"}, is("EPERM"), ""},
	}
	for _, c := range cases {
		var before []byte
		if c.hostFile != "" {
			before = readHostFile(t, c.hostFile)
		}
		got, obs, ok := h.probed(sb, c.as, c.controls, c.args...)
		if c.hostFile != "" {
			after := readHostFile(t, c.hostFile)
			ok = ok && string(after) == string(before)
			obs += fmt.Sprintf("; the host's %s: %q before, %q after", c.hostFile, bytes.TrimSpace(before), bytes.TrimSpace(after))
		}
		tb.add(t, outcome{attack: c.attack, as: c.as, expected: c.expected, observed: obs, contained: ok && c.contained(got)})
	}
	if b, err := os.ReadFile(h.marker); err != nil || string(b) != h.markerData {
		t.Errorf("the host marker changed: %q, %v", b, err)
	}
}

// readHostFile reads a host file the test compares before and after an
// attack.
func readHostFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the host's %s: %v", path, err)
	}
	return b
}

// currentTHP is the host's selected transparent_hugepage mode, which the
// sandbox tries to write back (harmless even if it worked).
func currentTHP(t *testing.T) string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if i, j := strings.Index(s, "["), strings.Index(s, "]"); i >= 0 && j > i {
		return s[i+1 : j]
	}
	return strings.TrimSpace(s)
}

// fileUnchanged reports whether the host file path still holds want.
func fileUnchanged(path, want string) (bool, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Sprintf("%s: %v", filepath.Base(path), err)
	}
	return string(b) == want, ""
}
