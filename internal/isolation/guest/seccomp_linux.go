package guest

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter is a deny list: everything not listed is allowed (the
// capability bounding set already takes away most of what root could do),
// and what is listed fails with an errno rather than killing the caller, so
// that programs probing for a feature fall back instead of crashing. A
// syscall from another ABI (i386 via int 0x80, x32) kills the process: the
// list is written for the native one.
//
// It is assembled here with golang.org/x/net/bpf rather than with
// github.com/elastic/go-seccomp-bpf, which can express the clone flag test
// but sends a syscall from a foreign architecture to the default action,
// i.e. allows it unfiltered.

// rule is one entry of the deny list.
type rule struct {
	name   string
	nr     uint32
	errno  unix.Errno
	reason string

	// With argBits set, the call is denied only when argument arg has any
	// of these bits set (in its low 32 bits).
	arg     int
	argBits uint32
	// With allowArgs set, the call is denied unless argument arg (low 32
	// bits) is one of these values.
	allowArgs []uint32
}

// nsCloneFlags are the clone flags that make new namespaces.
const nsCloneFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

func deny(name string, nr uintptr, reason string) rule {
	return rule{name: name, nr: uint32(nr), errno: unix.EPERM, reason: reason}
}

// denyRules is the deny list common to every architecture; archRules (in
// the per-architecture files) adds the rest.
var denyRules = []rule{
	deny("ptrace", unix.SYS_PTRACE, "inspects and controls other processes, including the jail's init"),
	deny("process_vm_readv", unix.SYS_PROCESS_VM_READV, "reads another process's memory, as ptrace does"),
	deny("process_vm_writev", unix.SYS_PROCESS_VM_WRITEV, "writes another process's memory, as ptrace does"),
	deny("pidfd_getfd", unix.SYS_PIDFD_GETFD, "steals descriptors from another process, as ptrace does"),
	deny("kcmp", unix.SYS_KCMP, "compares kernel objects of other processes (ptrace-class information leak)"),
	deny("mount", unix.SYS_MOUNT, "would rearrange the jail's filesystem view or mount host devices"),
	deny("umount2", unix.SYS_UMOUNT2, "would uncover what the jail's mounts hide (masked /proc paths)"),
	deny("pivot_root", unix.SYS_PIVOT_ROOT, "changes the root filesystem"),
	deny("fsopen", unix.SYS_FSOPEN, "new mount API: mounts without mount(2)"),
	deny("fsconfig", unix.SYS_FSCONFIG, "new mount API"),
	deny("fsmount", unix.SYS_FSMOUNT, "new mount API"),
	deny("fspick", unix.SYS_FSPICK, "new mount API: reconfigures existing mounts"),
	deny("move_mount", unix.SYS_MOVE_MOUNT, "new mount API: attaches mounts"),
	deny("open_tree", unix.SYS_OPEN_TREE, "new mount API: clones mounts"),
	deny("mount_setattr", unix.SYS_MOUNT_SETATTR, "new mount API: changes mount flags (e.g. read-only)"),
	deny("unshare", unix.SYS_UNSHARE, "new namespaces (user namespaces above all) are the usual start of a kernel exploit"),
	deny("setns", unix.SYS_SETNS, "joins other namespaces"),
	{name: "clone", nr: unix.SYS_CLONE, errno: unix.EPERM, arg: cloneFlagsArg, argBits: nsCloneFlags,
		reason: "clone with namespace flags, as unshare; threads and fork stay allowed"},
	{name: "clone3", nr: unix.SYS_CLONE3, errno: unix.ENOSYS,
		reason: "its flags are in memory seccomp cannot read; ENOSYS makes libc fall back to clone, which is checked"},
	deny("kexec_load", unix.SYS_KEXEC_LOAD, "replaces the running kernel"),
	deny("kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, "replaces the running kernel"),
	deny("init_module", unix.SYS_INIT_MODULE, "loads kernel code"),
	deny("finit_module", unix.SYS_FINIT_MODULE, "loads kernel code"),
	deny("delete_module", unix.SYS_DELETE_MODULE, "unloads kernel code"),
	deny("bpf", unix.SYS_BPF, "eBPF verifier and maps: large kernel attack surface"),
	deny("perf_event_open", unix.SYS_PERF_EVENT_OPEN, "observes the host and other processes; frequent CVEs"),
	deny("keyctl", unix.SYS_KEYCTL, "the keyring is not namespaced: host keys"),
	deny("add_key", unix.SYS_ADD_KEY, "the keyring is not namespaced"),
	deny("request_key", unix.SYS_REQUEST_KEY, "the keyring is not namespaced"),
	deny("userfaultfd", unix.SYS_USERFAULTFD, "stalls kernel page faults at will: a standard exploit primitive"),
	deny("open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, "opens files by handle, bypassing the mount view (the 'shocker' escape)"),
	deny("name_to_handle_at", unix.SYS_NAME_TO_HANDLE_AT, "pairs with open_by_handle_at"),
	deny("io_uring_setup", unix.SYS_IO_URING_SETUP, "io_uring: large attack surface, bypasses per-syscall filtering"),
	deny("io_uring_enter", unix.SYS_IO_URING_ENTER, "io_uring"),
	deny("io_uring_register", unix.SYS_IO_URING_REGISTER, "io_uring"),
	deny("acct", unix.SYS_ACCT, "process accounting is host-wide"),
	deny("swapon", unix.SYS_SWAPON, "host swap"),
	deny("swapoff", unix.SYS_SWAPOFF, "host swap"),
	deny("reboot", unix.SYS_REBOOT, "host reboot (in a pid namespace it would only kill init, still denied)"),
	deny("settimeofday", unix.SYS_SETTIMEOFDAY, "the clock is not namespaced"),
	deny("clock_settime", unix.SYS_CLOCK_SETTIME, "the clock is not namespaced"),
	deny("clock_adjtime", unix.SYS_CLOCK_ADJTIME, "the clock is not namespaced"),
	deny("adjtimex", unix.SYS_ADJTIMEX, "the clock is not namespaced"),
	deny("syslog", unix.SYS_SYSLOG, "the kernel log is host-wide and leaks addresses"),
	deny("lookup_dcookie", unix.SYS_LOOKUP_DCOOKIE, "profiling interface; host-wide"),
	deny("quotactl", unix.SYS_QUOTACTL, "host filesystem quotas"),
	deny("quotactl_fd", unix.SYS_QUOTACTL_FD, "host filesystem quotas"),
	deny("nfsservctl", unix.SYS_NFSSERVCTL, "kernel NFS server (removed, denied anyway)"),
	deny("vhangup", unix.SYS_VHANGUP, "hangs up the controlling terminal"),
	{name: "socket", nr: unix.SYS_SOCKET, errno: unix.EAFNOSUPPORT, arg: 0, allowArgs: socketFamilies,
		reason: "address families other than socketFamilies: AF_VSOCK is not namespaced (a port bound in one sandbox is taken in every other and on the host, and on a host that is a VM it reaches the hypervisor); the rest are kernel code a sandbox has no use for"},
	{name: "socketpair", nr: unix.SYS_SOCKETPAIR, errno: unix.EAFNOSUPPORT, arg: 0, allowArgs: socketFamilies,
		reason: "as socket: the same families"},
	{name: "personality", nr: unix.SYS_PERSONALITY, errno: unix.EPERM, arg: 0,
		allowArgs: []uint32{0, 0x8, 0x20000, 0x20008, 0xffffffff},
		reason:    "only PER_LINUX, PER_LINUX32, UNAME26 variants and the query; others (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE) weaken exploit mitigations"},
}

// socketFamilies are the address families a sandbox may open sockets of:
// what real programs use (UNIX sockets, IPv4, IPv6, and netlink for
// interfaces, routes and getaddrinfo). Every other family fails with
// EAFNOSUPPORT, the kernel's answer for a family it was built without, so a
// program probing for one falls back as it would there; it also tells the
// filter's refusal apart from the EPERM of a missing capability.
//
// AF_PACKET is refused too: in a user namespace root holds no CAP_NET_RAW
// over the sandbox's network, so packet sockets never open there anyway;
// without one, they would give root raw frames on eth0 (ARP and NDP
// spoofing, which the host answers with strict filtering) and the packet
// socket code, a recurring source of root-reachable kernel bugs. Refusing it
// in both modes keeps a template's behaviour the same on every host. Raw
// IPv4 sockets (ping without ping_group_range) stay what the capability
// set makes them.
var socketFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

func retErrno(e unix.Errno) bpf.Instruction {
	return bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA}
}

// argLow is the offset of the low 32 bits of argument i (little endian).
func argLow(i int) uint32 { return uint32(offArgs + 8*i) }

// assembleFilter turns rules into a classic BPF program for the native
// architecture.
func assembleFilter(rules []rule) ([]bpf.Instruction, error) {
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipTrue: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	prog = append(prog, abiCheck...)
	for _, r := range rules {
		var body []bpf.Instruction
		switch {
		case r.argBits != 0:
			body = []bpf.Instruction{
				bpf.LoadAbsolute{Off: argLow(r.arg), Size: 4},
				bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: r.argBits, SkipFalse: 1},
				retErrno(r.errno),
				bpf.LoadAbsolute{Off: offNr, Size: 4},
			}
		case r.allowArgs != nil:
			body = []bpf.Instruction{bpf.LoadAbsolute{Off: argLow(r.arg), Size: 4}}
			k := len(r.allowArgs)
			for i, v := range r.allowArgs {
				body = append(body, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(k - i)})
			}
			body = append(body, retErrno(r.errno), bpf.LoadAbsolute{Off: offNr, Size: 4})
		default:
			body = []bpf.Instruction{retErrno(r.errno)}
		}
		if len(body) > 255 {
			return nil, fmt.Errorf("seccomp rule %s is too long", r.name)
		}
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: r.nr, SkipFalse: uint8(len(body))})
		prog = append(prog, body...)
	}
	prog = append(prog, bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW})
	return prog, nil
}

// seccompRules is the whole deny list for this architecture.
func seccompRules() []rule {
	return append(append([]rule(nil), denyRules...), archRules...)
}

// loadSeccomp installs the filter on every thread of the calling process.
// Without no_new_privs the caller needs CAP_SYS_ADMIN.
func loadSeccomp() error {
	if auditArch == 0 {
		return fmt.Errorf("loading seccomp filter: %w", errors.ErrUnsupported)
	}
	insts, err := assembleFilter(seccompRules())
	if err != nil {
		return err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return fmt.Errorf("assembling seccomp filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return fmt.Errorf("loading seccomp filter: %w", errno)
	}
	return nil
}
