package security

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// TestAttacks is the security issue's acceptance table: attacks from inside
// real jail sandboxes, as user and as root, each checked for containment.
// The table of every case is logged at the end, also when a case fails.
// TestAttacks runs every attack twice: with the sandbox in a user
// namespace (the default where the host allows) and without (the fallback
// elsewhere), where only the other layers hold root down.
func TestAttacks(t *testing.T) {
	for _, mode := range []jail.UsernsMode{jail.UsernsOn, jail.UsernsOff} {
		t.Run("userns "+string(mode), func(t *testing.T) { attacks(t, mode) })
	}
}

func attacks(t *testing.T, mode jail.UsernsMode) {
	start := time.Now()
	h := newHarness(t, mode)
	tb := &table{}
	defer func() { t.Logf("security cases, userns %s (%s):\n%s", mode, time.Since(start).Round(time.Second), tb) }()

	// The attacker, allowed to reach the site's range by address so that a
	// spoofed packet would have a path out; and a neighbour.
	sb := h.create(`{"allowOut":["` + siteCIDR + `"]}`)
	neighbour := h.create("")

	t.Run("escape syscalls", func(t *testing.T) { h.t = t; testSyscalls(t, h, tb, sb) })
	t.Run("filesystem", func(t *testing.T) { h.t = t; testFilesystem(t, h, tb, sb) })
	t.Run("envd files API", func(t *testing.T) { h.t = t; testFilesAPI(t, h, tb, sb) })
	t.Run("network", func(t *testing.T) { h.t = t; testNetwork(t, h, tb, sb, neighbour) })
	t.Run("resources", func(t *testing.T) { h.t = t; testResources(t, h, tb) })
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

func testSyscalls(t *testing.T, h *harness, tb *table, sb store.Sandbox) {
	for _, c := range syscallCases {
		for _, u := range users {
			got := h.probe(sb, u, "sys", c.name)
			tb.add(t, outcome{attack: c.attack, as: u, expected: "fails " + c.want + " (seccomp)", observed: got, contained: got == c.want})
		}
	}
	// chroot is allowed to root (CAP_SYS_CHROOT, Docker's default), so
	// the break-out must end in the sandbox's own root.
	got := h.probe(sb, "root", "chroot-escape", h.marker)
	tb.add(t, outcome{attack: "chroot escape (chroot, chdir .. ×64, chroot .)", as: "root",
		expected: "ends in the sandbox's root (pivot_root; old root detached)", observed: got,
		contained: got == "ok escaped to the sandbox's root; host marker: ENOENT"})
	got = h.probe(sb, "user", "chroot-escape", h.marker)
	tb.add(t, outcome{attack: "chroot escape (chroot, chdir .. ×64, chroot .)", as: "user",
		expected: "chroot fails EPERM", observed: got, contained: got == "EPERM"})
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
	sysrq, sysrqContained := "lands in /dev/null (masked: char 1:3)", func(s string) bool { return s == "ok wrote to char 1:3" }
	if _, err := os.Stat("/proc/sysrq-trigger"); errors.Is(err, os.ErrNotExist) {
		sysrq, sysrqContained = "ENOENT (the host kernel has none)", func(s string) bool { return s == "ENOENT" }
	}

	type fsCase struct {
		attack, as, expected string
		args                 []string
		contained            func(string) bool
	}
	is := func(want string) func(string) bool { return func(s string) bool { return s == want } }
	// In a user namespace, root holds its capabilities there only: host
	// root's files stay closed and device nodes cannot be made.
	procSysErr, procSys := h.either("EACCES", "EROFS"), h.either("EACCES (host root's files)", "EROFS (/proc/sys read-only)")
	mknodErr := h.either("mknod: EPERM", "mknod ok, open: EACCES")
	mknod := h.either("mknod EPERM (no CAP_MKNOD on the host)", "mknod works (CAP_MKNOD), open EACCES (nodev)")
	envdWriteErr := h.either("EACCES", "ETXTBSY")
	envdWrite := h.either("EACCES (host root's file)", "ETXTBSY (running; the mount is read-only too)")
	cases := []fsCase{
		{"read the host marker through /proc/1/root", "root", "EACCES (init is non-dumpable, no CAP_SYS_PTRACE)",
			[]string{"read", "/proc/1/root" + h.marker}, is("EACCES")},
		{"read the host marker through /proc/1/root", "user", "EACCES",
			[]string{"read", "/proc/1/root" + h.marker}, is("EACCES")},
		{"read /proc/1/environ (init's environment)", "root", "EACCES (non-dumpable)",
			[]string{"read", "/proc/1/environ"}, is("EACCES")},
		{"read /proc/1/environ (init's environment)", "user", "EACCES",
			[]string{"read", "/proc/1/environ"}, is("EACCES")},
		{"write 'h' to /proc/sysrq-trigger", "root", sysrq, []string{"sysrq"}, sysrqContained},
		{"write 'h' to /proc/sysrq-trigger", "user", sysrq, []string{"sysrq"}, sysrqContained},
		{"write /sys/kernel/mm/transparent_hugepage/enabled", "root", "EROFS (/sys read-only)",
			[]string{"write", "/sys/kernel/mm/transparent_hugepage/enabled", thp}, is("EROFS")},
		{"write /sys/kernel/profiling", "root", "EROFS (/sys read-only)",
			[]string{"rewrite", "/sys/kernel/profiling"}, is("EROFS")},
		{"write 1 to /proc/sys/vm/drop_caches", "root", procSys,
			[]string{"write", "/proc/sys/vm/drop_caches", "1"}, is(procSysErr)},
		{"rewrite /proc/sys/kernel/core_pattern", "root", procSys,
			[]string{"rewrite", "/proc/sys/kernel/core_pattern"}, is(procSysErr)},
		{"write /proc/sys/kernel/hostname", "root", procSys,
			[]string{"write", "/proc/sys/kernel/hostname", "pwned"}, is(procSysErr)},
		{"rewrite /proc/sys/kernel/core_pattern", "user", "EACCES",
			[]string{"rewrite", "/proc/sys/kernel/core_pattern"}, is("EACCES")},
		{"mknod the host's root disk (" + disk + ") in /tmp and read it", "root", mknod,
			append([]string{"mknod-open", "/tmp/disk", "b"}, strings.Fields(disk)...), is(mknodErr)},
		{"mknod the host's root disk (" + disk + ") in /tmp and read it", "user", "mknod EPERM",
			append([]string{"mknod-open", "/tmp/disk", "b"}, strings.Fields(disk)...), is("mknod: EPERM")},
		{"mknod sda (8:0) in /dev/shm and read it", "root", mknod,
			[]string{"mknod-open", "/dev/shm/sda", "b", "8", "0"}, is(mknodErr)},
		{"mknod sda (8:0) in /dev", "root", "mknod EROFS (/dev read-only)",
			[]string{"mknod-open", "/dev/sda", "b", "8", "0"}, is("mknod: EROFS")},
		{"open /dev/mem", "root", "ENOENT (not in the sandbox's /dev)", []string{"read", "/dev/mem"}, is("ENOENT")},
		{"mknod /dev/mem (c 1:1) in /tmp and read it", "root", mknod,
			[]string{"mknod-open", "/tmp/mem", "c", "1", "1"}, is(mknodErr)},
		{"open /dev/kmem", "root", "ENOENT", []string{"read", "/dev/kmem"}, is("ENOENT")},
		{"mknod /dev/kmem (c 1:2) in /tmp and read it", "root", mknod,
			[]string{"mknod-open", "/tmp/kmem", "c", "1", "2"}, is(mknodErr)},
		{"open /usr/bin/envd (a host file) for writing", "root", envdWrite,
			[]string{"write", "/usr/bin/envd", "x"}, is(envdWriteErr)},
		{"chmod /usr/bin/envd (a host file)", "root", "EROFS (read-only bind mount)",
			[]string{"chmod", "/usr/bin/envd"}, is("EROFS")},
		{"rename a file over /usr/bin/envd", "root", "EBUSY (a mount point)",
			[]string{"rename", "/usr/bin/probe", "/usr/bin/envd"}, is("EBUSY")},
		{"hard-link /usr/bin/envd (a host file) into /tmp", "root", "EXDEV (another mount)",
			[]string{"link", "/usr/bin/envd", "/tmp/envd"}, is("EXDEV")},
		{"hard-link /etc/shadow into the home directory", "user", "EPERM (protected_hardlinks)",
			[]string{"link", "/etc/shadow", "/home/user/shadow"}, is("EPERM")},
		{"open an AF_PACKET socket", "user", "EPERM (no CAP_NET_RAW)", []string{"packet"}, is("EPERM")},
		{"open an AF_PACKET socket", "root", h.either("EPERM (CAP_NET_RAW counts in the sandbox's user namespace only)",
			"allowed (CAP_NET_RAW kept); spoofing with it: see network rows"),
			[]string{"packet"}, func(got string) bool { return !h.userns || got == "EPERM" }},
	}
	for _, c := range cases {
		got := h.probe(sb, c.as, c.args...)
		tb.add(t, outcome{attack: c.attack, as: c.as, expected: c.expected, observed: got, contained: c.contained(got)})
	}
	if b, err := os.ReadFile(h.marker); err != nil || string(b) != h.markerData {
		t.Errorf("the host marker changed: %q, %v", b, err)
	}
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
