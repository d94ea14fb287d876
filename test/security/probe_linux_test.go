package security

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// probeTimeout bounds each network attempt inside a sandbox: a dropped
// packet shows as a timeout.
const probeTimeout = 2 * time.Second

// probeMain is what /usr/bin/probe (this test binary, copied into the
// sandbox's rootfs) runs. Each command attempts one attack and prints one
// line saying what happened: "ok …" when the step went through, otherwise
// the errno's name (EPERM, EROFS, …) or the error; the test judges it.
// Bombs print progress first and their result on the last line.
func probeMain(args []string) int {
	if len(args) == 0 {
		fmt.Println("usage: probe CMD ARGS")
		return 2
	}
	if args[0] == "pair" {
		return pairMain(args[1:])
	}
	out, err := probe(args[0], args[1:])
	if err != nil {
		fmt.Println(errName(err))
		return 1
	}
	fmt.Println(out)
	return 0
}

// pairMain runs "pair CONTROL... -- [CONTROL... --] ATTACK...": each
// control, then the attack, in this one process, printing one line per
// control ("control: <result>") and the attack's result last. The test
// counts the attack as contained only if every control got what it must.
func pairMain(args []string) int {
	var steps [][]string
	start := 0
	for i, a := range args {
		if a == "--" {
			steps = append(steps, args[start:i])
			start = i + 1
		}
	}
	steps = append(steps, args[start:])
	if len(steps) < 2 || slices.ContainsFunc(steps, func(s []string) bool { return len(s) == 0 }) {
		fmt.Println("usage: probe pair CONTROL... -- ATTACK...")
		return 2
	}
	result := func(step []string) string {
		out, err := probe(step[0], step[1:])
		if err != nil {
			return errName(err)
		}
		return out
	}
	for _, c := range steps[:len(steps)-1] {
		fmt.Println("control: " + result(c))
	}
	fmt.Println(result(steps[len(steps)-1]))
	return 0
}

func probe(cmd string, args []string) (string, error) {
	switch cmd {
	case "sys": // NAME: one escape syscall, under the seccomp oracle
		return sysOracle(args[0])
	case "raw": // NAME: the same without the oracle
		return syscallAttack(args[0])
	case "socket": // FAMILY: open a socket of that family, for real
		return syscallAttack("socket-" + args[0])
	case "mkfifo": // DIR: make a FIFO there (mknod makes them for anyone) and remove it
		p := filepath.Join(args[0], "fifo-control-"+strconv.Itoa(os.Getpid()))
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return "", err
		}
		return "ok", os.Remove(p)
	case "link-own": // DIR: link a file of our own, the control for hard links
		f := filepath.Join(args[0], "link-own-"+strconv.Itoa(os.Getpid()))
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			return "", err
		}
		defer os.Remove(f)
		defer os.Remove(f + ".link")
		return "ok", os.Link(f, f+".link")
	case "remove": // PATH
		return "ok", os.Remove(args[0])
	case "mac": // eth0's link address
		ifc, err := net.InterfaceByName("eth0")
		if err != nil {
			return "", err
		}
		return "ok " + ifc.HardwareAddr.String(), nil
	case "fdlist": // our descriptors: fd=target, + for those an exec passes on
		return fdList()
	case "procmem": // envd|child: open /proc/<pid>/mem and environ
		return procMem(args[0])
	case "rss": // NAME: VmRSS of the process named NAME, in bytes
		pid, err := pidOf(args[0])
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("ok %d", rssOf(strconv.Itoa(pid))), nil
	case "oomkills": // the kernel's OOM kills so far (/proc/vmstat oom_kill)
		b, err := os.ReadFile("/proc/vmstat")
		if err != nil {
			return "", err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
				return "ok " + v, nil
			}
		}
		return "", errors.New("no oom_kill in /proc/vmstat")
	case "dumpable": // prctl(PR_GET_DUMPABLE)
		d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
		return fmt.Sprintf("ok %d", d), err
	case "mounts": // a JSON line: our mountinfo, and statfs of each mount
		return mounts()
	case "udpflood": // N ADDR...: N datagrams to each ADDR, each from a new socket
		return udpFlood(args[0], args[1:])
	case "dns": // NAME: look it up through the sandbox's resolver
		return lookup(args[0])
	case "chroot-escape": // HOSTPATH: chroot, chdir .. and chroot . again
		return chrootEscape(args[0])
	case "stat": // PATH
		_, err := os.Stat(args[0])
		return "ok", err
	case "read": // PATH: prints what was read (at most 64 bytes)
		f, err := os.Open(args[0])
		if err != nil {
			return "", err
		}
		defer f.Close()
		b := make([]byte, 64)
		n, err := f.Read(b)
		if err != nil && !errors.Is(err, io.EOF) {
			return "", err
		}
		return fmt.Sprintf("ok %q", b[:n]), nil
	case "write": // PATH DATA
		return "ok", writeExisting(args[0], []byte(args[1]))
	case "rewrite": // PATH: write back what it holds (harmless if it works)
		b, err := os.ReadFile(args[0])
		if err != nil {
			return "", err
		}
		return "ok", writeExisting(args[0], b)
	case "sysrq": // write "h" to /proc/sysrq-trigger; say what the file is
		var st unix.Stat_t
		if err := unix.Stat("/proc/sysrq-trigger", &st); err != nil {
			return "", err
		}
		kind := fmt.Sprintf("mode %o", st.Mode&unix.S_IFMT)
		if st.Mode&unix.S_IFMT == unix.S_IFCHR {
			kind = fmt.Sprintf("char %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		if err := writeExisting("/proc/sysrq-trigger", []byte("h")); err != nil {
			return "", fmt.Errorf("%s (%s)", errName(err), kind)
		}
		return "ok wrote to " + kind, nil
	case "mknod-open": // PATH b|c MAJOR MINOR: make a device node and read it
		return mknodOpen(args[0], args[1], args[2], args[3])
	case "chmod": // PATH
		return "ok", os.Chmod(args[0], 0o777)
	case "rename": // OLD NEW
		return "ok", os.Rename(args[0], args[1])
	case "owner": // PATH: uid:gid
		var st unix.Stat_t
		if err := unix.Stat(args[0], &st); err != nil {
			return "", err
		}
		return fmt.Sprintf("ok %d:%d", st.Uid, st.Gid), nil
	case "link": // OLD NEW
		return "ok", os.Link(args[0], args[1])
	case "symlink": // OLD NEW
		return "ok", os.Symlink(args[0], args[1])
	case "tcp": // ADDR: connect, print what the server says
		return tcp(args[0])
	case "connect": // ADDR: a TCP connection, closed at once
		c, err := net.DialTimeout("tcp", args[0], probeTimeout)
		if err != nil {
			return "", err
		}
		c.Close()
		return "ok connected", nil
	case "get": // URL
		return get(args[0])
	case "unix": // ADDR: connect to a UNIX socket ("@name" is abstract), print what it says
		return unixConnect(args[0])
	case "listen": // PORT: answer "sandbox" on 0.0.0.0:PORT until killed
		return listen(args[0])
	case "udp": // ADDR PAYLOAD: send one datagram from our own address
		c, err := net.Dial("udp4", args[0])
		if err != nil {
			return "", err
		}
		defer c.Close()
		_, err = c.Write([]byte(args[1]))
		return "ok sent", err
	case "spoof": // SRC DST:PORT PAYLOAD: a UDP datagram with a forged source
		return spoofUDP(args[0], args[1], args[2])
	case "arp-spoof": // IP: gratuitous ARP claiming IP
		return arpSpoof(args[0])
	case "ndp-spoof": // IPV6: unsolicited neighbour advertisement claiming it
		return ndpSpoof(args[0])
	case "ipv6": // PORT: our IPv6 addresses, and connections to the host over IPv6
		return ipv6(args[0])
	case "fork": // N SECONDS: start up to N sleeping children, hold them
		return fork(args[0], args[1])
	case "alloc": // MB: touch MB of memory
		mb, _ := strconv.Atoi(args[0])
		var keep [][]byte
		for i := 0; i < mb/16; i++ {
			b := make([]byte, 16<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		return fmt.Sprintf("ok allocated %d MB", len(keep)*16), nil
	case "fill": // PATH: write until the disk is full
		return fill(args[0])
	case "inodes-free": // PATH: the free inodes of its file system
		var st unix.Statfs_t
		if err := unix.Statfs(args[0], &st); err != nil {
			return "", err
		}
		return fmt.Sprintf("ok %d", st.Ffree), nil
	case "inodes": // DIR: create empty files until that fails
		return inodes(args[0])
	case "fds": // open files until that fails, at the highest limit allowed
		return fds()
	case "flood": // MB: write MB of output to stdout
		mb, _ := strconv.Atoi(args[0])
		w := bufio.NewWriterSize(os.Stdout, 1<<20)
		line := []byte(strings.Repeat("x", 1023) + "\n")
		for range mb << 10 {
			if _, err := w.Write(line); err != nil {
				return "", err
			}
		}
		return "", w.Flush() // the output is the result
	}
	return "", fmt.Errorf("unknown probe %q", cmd)
}

// errName is the errno's name when err carries one, else err's text.
func errName(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return err.Error()
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func writeExisting(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}

// syscallAttack makes one escape syscall with arguments that would do no
// harm even if it went through.
func syscallAttack(name string) (string, error) {
	raw := func(nr uintptr, a ...uintptr) error {
		var x [6]uintptr
		copy(x[:], a)
		r, _, e := unix.Syscall6(nr, x[0], x[1], x[2], x[3], x[4], x[5])
		if e != 0 {
			return e
		}
		if name != "io_uring_setup" && name != "userfaultfd" && name != "perf_event_open" && name != "bpf" {
			return nil
		}
		unix.Close(int(r)) // an fd
		return nil
	}
	cstr := func(s string) uintptr { p, _ := unix.BytePtrFromString(s); return uintptr(unsafe.Pointer(p)) }
	var err error
	switch name {
	case "ptrace":
		err = unix.PtraceAttach(1)
	case "process_vm_readv":
		buf := make([]byte, 8)
		_, err = unix.ProcessVMReadv(1, []unix.Iovec{{Base: &buf[0], Len: 8}},
			[]unix.RemoteIovec{{Base: 0x400000, Len: 8}}, 0)
	case "mount":
		err = unix.Mount("tmpfs", "/tmp", "tmpfs", 0, "")
	case "umount":
		err = unix.Unmount("/proc/sysrq-trigger", unix.MNT_DETACH)
	case "unshare-user":
		err = unix.Unshare(unix.CLONE_NEWUSER)
	case "unshare-mount":
		err = unix.Unshare(unix.CLONE_NEWNS)
	case "unshare-net":
		err = unix.Unshare(unix.CLONE_NEWNET)
	case "setns":
		fd, oerr := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if oerr != nil {
			return "", fmt.Errorf("opening ns: %w", oerr)
		}
		defer unix.Close(fd)
		err = unix.Setns(fd, unix.CLONE_NEWNET)
	case "clone-newuser", "clone-newns-newnet":
		flags := uintptr(unix.CLONE_NEWUSER)
		if name == "clone-newns-newnet" {
			flags = unix.CLONE_NEWNS | unix.CLONE_NEWNET
		}
		r, _, e := unix.RawSyscall(unix.SYS_CLONE, flags|uintptr(unix.SIGCHLD), 0, 0)
		if e == 0 && r == 0 { // the child: leave at once
			unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
		}
		if e != 0 {
			err = e
		} else {
			var ws unix.WaitStatus
			unix.Wait4(int(r), &ws, 0, nil)
		}
	case "clone3":
		var args [11]uint64 // struct clone_args
		args[0] = unix.CLONE_NEWUSER
		args[4] = uint64(unix.SIGCHLD)
		r, _, e := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args), 0)
		if e == 0 && r == 0 {
			unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
		}
		if e != 0 {
			err = e
		}
	case "pivot_root":
		err = unix.PivotRoot("/tmp", "/tmp")
	case "kexec_load":
		err = raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xdead0000) // invalid architecture
	case "kexec_file_load":
		err = raw(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, 0)
	case "init_module":
		img := []byte("not an ELF module")
		err = raw(unix.SYS_INIT_MODULE, uintptr(unsafe.Pointer(&img[0])), uintptr(len(img)), cstr(""))
	case "finit_module":
		fd, _ := unix.Open("/dev/null", unix.O_RDONLY, 0)
		err = unix.FinitModule(fd, "", 0)
		unix.Close(fd)
	case "delete_module":
		err = unix.DeleteModule("agent_sandbox_no_such_module", unix.O_NONBLOCK)
	case "bpf":
		var attr [64]byte // BPF_MAP_CREATE: an array of one 4-byte value
		binary.NativeEndian.PutUint32(attr[0:], 2)
		binary.NativeEndian.PutUint32(attr[4:], 4)
		binary.NativeEndian.PutUint32(attr[8:], 4)
		binary.NativeEndian.PutUint32(attr[12:], 1)
		err = raw(unix.SYS_BPF, 0, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	case "perf_event_open":
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
		attr.Size = uint32(unsafe.Sizeof(attr))
		err = raw(unix.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&attr)), 0, ^uintptr(0), ^uintptr(0), 0)
	case "keyctl":
		_, err = unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
	case "add_key":
		_, err = unix.AddKey("user", "agent-sandbox-probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
	case "userfaultfd":
		err = raw(unix.SYS_USERFAULTFD, unix.O_CLOEXEC)
	case "open_by_handle_at":
		// The "shocker" escape: a handle for inode 2, the root of an ext4
		// filesystem, opened relative to a descriptor of our root.
		fd, oerr := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if oerr != nil {
			return "", oerr
		}
		defer unix.Close(fd)
		h := make([]byte, 8)
		binary.NativeEndian.PutUint32(h, 2)
		var got int
		got, err = unix.OpenByHandleAt(fd, unix.NewFileHandle(1, h), unix.O_RDONLY)
		if err == nil {
			unix.Close(got)
		}
	case "name_to_handle_at":
		_, _, err = unix.NameToHandleAt(unix.AT_FDCWD, "/", 0)
	case "iopl":
		err = raw(unix.SYS_IOPL, 3)
	case "ioperm":
		err = raw(unix.SYS_IOPERM, 0x80, 1, 1)
	case "acct":
		if f, cerr := os.Create("/tmp/acct-probe"); cerr == nil {
			f.Close()
		}
		err = raw(unix.SYS_ACCT, cstr("/tmp/acct-probe"))
		if err == nil {
			raw(unix.SYS_ACCT, 0) // switch it off again
		}
	case "swapon":
		err = raw(unix.SYS_SWAPON, cstr("/tmp/no-such-swapfile"), 0)
	case "reboot":
		err = raw(unix.SYS_REBOOT, unix.LINUX_REBOOT_MAGIC1, unix.LINUX_REBOOT_MAGIC2, unix.LINUX_REBOOT_CMD_CAD_ON)
	case "settimeofday":
		var tv unix.Timeval
		unix.Gettimeofday(&tv)
		err = unix.Settimeofday(&tv)
	case "clock_settime":
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
		err = unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
	case "io_uring_setup":
		var params [120]byte
		err = raw(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])))
	case "personality":
		err = raw(unix.SYS_PERSONALITY, 0x0400000) // READ_IMPLIES_EXEC
	case "syslog":
		buf := make([]byte, 4096)
		_, err = unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	case "getppid": // the oracle's control: allowed to everyone
		err = raw(unix.SYS_GETPPID)
	case "socket-inet", "socket-inet6", "socket-unix", "socket-netlink", "socket-vsock", "socket-packet", "socket-alg":
		args := map[string][3]int{
			"socket-inet": {unix.AF_INET, unix.SOCK_DGRAM, 0}, "socket-inet6": {unix.AF_INET6, unix.SOCK_DGRAM, 0},
			"socket-unix": {unix.AF_UNIX, unix.SOCK_STREAM, 0}, "socket-netlink": {unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE},
			"socket-vsock": {unix.AF_VSOCK, unix.SOCK_STREAM, 0}, "socket-packet": {unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL))},
			"socket-alg": {unix.AF_ALG, unix.SOCK_SEQPACKET, 0},
		}[name]
		var fd int
		if fd, err = unix.Socket(args[0], args[1], args[2]); err == nil {
			unix.Close(fd)
		}
	case "socketpair-unix", "socketpair-vsock":
		family := unix.AF_UNIX
		if name == "socketpair-vsock" {
			family = unix.AF_VSOCK
		}
		var fds [2]int
		if fds, err = unix.Socketpair(family, unix.SOCK_STREAM, 0); err == nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
	default:
		return "", fmt.Errorf("unknown syscall attack %q", name)
	}
	return "ok", err
}

// chrootEscape is the classic chroot break-out: chroot into a
// subdirectory while keeping the working directory outside it, walk up
// past the new root and chroot there. It reports where it ended up.
func chrootEscape(hostPath string) (string, error) {
	var before unix.Stat_t
	if err := unix.Stat("/", &before); err != nil {
		return "", err
	}
	dir := fmt.Sprintf("/tmp/chroot-probe-%d", os.Getuid())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("mkdir: %s", errName(err))
	}
	if err := unix.Chroot(dir); err != nil {
		return "", fmt.Errorf("chroot: %s", errName(err))
	}
	for range 64 {
		if err := unix.Chdir(".."); err != nil {
			return "", fmt.Errorf("chdir: %s", errName(err))
		}
	}
	if err := unix.Chroot("."); err != nil {
		return "", fmt.Errorf("second chroot: %s", errName(err))
	}
	var after unix.Stat_t
	if err := unix.Stat("/", &after); err != nil {
		return "", err
	}
	where := "the sandbox's root"
	if after.Dev != before.Dev || after.Ino != before.Ino {
		where = fmt.Sprintf("another root (dev %d ino %d)", after.Dev, after.Ino)
	}
	_, err := os.Stat(hostPath)
	return fmt.Sprintf("ok escaped to %s; host marker: %s", where, errNameOrOK(err)), nil
}

func errNameOrOK(err error) string {
	if err == nil {
		return "present"
	}
	return errName(err)
}

func mknodOpen(path, kind, major, minor string) (string, error) {
	maj, _ := strconv.Atoi(major)
	mnr, _ := strconv.Atoi(minor)
	mode := uint32(unix.S_IFBLK)
	if kind == "c" {
		mode = unix.S_IFCHR
	}
	_ = os.Remove(path)
	if err := unix.Mknod(path, mode|0o600, int(unix.Mkdev(uint32(maj), uint32(mnr)))); err != nil {
		return "", fmt.Errorf("mknod: %s", errName(err))
	}
	defer os.Remove(path)
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("mknod ok, open: %s", errName(err))
	}
	defer f.Close()
	b := make([]byte, 512)
	n, err := f.Read(b)
	if err != nil {
		return "", fmt.Errorf("mknod ok, open ok, read: %s", errName(err))
	}
	return fmt.Sprintf("ok read %d bytes of the device", n), nil
}

func tcp(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(probeTimeout))
	b := make([]byte, 16)
	n, _ := c.Read(b)
	return fmt.Sprintf("ok connected, read %q", b[:n]), nil
}

func unixConnect(addr string) (string, error) {
	c, err := net.DialTimeout("unix", addr, probeTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(probeTimeout))
	b := make([]byte, 16)
	n, _ := c.Read(b)
	return fmt.Sprintf("ok connected, read %q", b[:n]), nil
}

func listen(port string) (string, error) {
	ln, err := net.Listen("tcp", "0.0.0.0:"+port)
	if err != nil {
		return "", err
	}
	fmt.Println("listening")
	os.Stdout.Sync()
	for {
		c, err := ln.Accept()
		if err != nil {
			return "", err
		}
		c.Write([]byte("sandbox"))
		c.Close()
	}
}

func get(url string) (string, error) {
	c := &http.Client{Timeout: 3 * probeTimeout}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return "ok " + strings.TrimSpace(string(b)), nil
}

func fork(n, secs string) (string, error) {
	max, _ := strconv.Atoi(n)
	var children []*exec.Cmd
	var err error
	for len(children) < max {
		cmd := exec.Command("/usr/bin/sleep", secs)
		if err = cmd.Start(); err != nil {
			break
		}
		children = append(children, cmd)
	}
	// The test reads this line while the children hold their pids.
	fmt.Printf("started=%d err=%v\n", len(children), errNameOrOK(err))
	os.Stdout.Sync()
	for _, c := range children {
		c.Wait()
	}
	return "ok children exited", nil
}

func fill(path string) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	total := 0
	for {
		n, err := f.Write(buf)
		total += n
		if err != nil {
			return fmt.Sprintf("ok wrote %d MB, then %s", total>>20, errName(err)), nil
		}
	}
}

func inodes(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for i := 0; ; i++ {
		f, err := os.Create(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			return fmt.Sprintf("ok created %d files, then %s", i, errName(err)), nil
		}
		f.Close()
	}
}

func fds() (string, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return "", err
	}
	lim.Cur = lim.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return "", err
	}
	raised := lim.Max + 1<<20
	tooHigh := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: raised, Max: raised})
	n := 0
	for {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
		if err != nil {
			return fmt.Sprintf("ok opened %d, then %s; limit %d, raising it: %s", n, errName(err), lim.Max, errNameOrOK(tooHigh)), nil
		}
		_ = fd
		n++
	}
}
