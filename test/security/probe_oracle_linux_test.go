package security

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp oracle tells a refusal by the jail's seccomp filter apart
// from the same errno given by the kernel (a missing capability, a family
// the kernel lacks) or by a typo'd syscall number. The probe stacks a
// filter of its own on one thread, behind the jail's, that sends the
// syscall under test to a user-space notifier instead of running it. The
// kernel runs every filter and takes the strictest answer: the jail's
// SECCOMP_RET_ERRNO wins over the probe's SECCOMP_RET_USER_NOTIF, which
// wins over SECCOMP_RET_ALLOW. So a call that reaches the notifier passed
// the jail's filter (and is never executed: the notifier answers it with
// ECHRNG), and one that fails without reaching it was refused by the
// jail's filter, with the errno the caller saw.
//
// gVisor's kernel has no notifiers (installing one fails with EINVAL).
// There the probe's filter answers SECCOMP_RET_TRACE, which the jail's
// ERRNO also wins over and which, with no tracer attached, fails the call
// with ENOSYS without running it: a call that fails with ENOSYS passed
// the jail's filter. (clone3, which the filter itself answers with
// ENOSYS, cannot be told apart this way.)
const passedFilter = "passed the jail's seccomp filter (reached the probe's notifier)"

// attackNr is the syscall each attack of syscallAttack makes, which the
// oracle watches.
var attackNr = map[string]uintptr{
	"getppid": unix.SYS_GETPPID, "ptrace": unix.SYS_PTRACE, "process_vm_readv": unix.SYS_PROCESS_VM_READV,
	"mount": unix.SYS_MOUNT, "umount": unix.SYS_UMOUNT2, "unshare-user": unix.SYS_UNSHARE,
	"unshare-mount": unix.SYS_UNSHARE, "unshare-net": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS,
	"clone-newuser": unix.SYS_CLONE, "clone-newns-newnet": unix.SYS_CLONE, "clone3": unix.SYS_CLONE3,
	"pivot_root": unix.SYS_PIVOT_ROOT, "kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD,
	"init_module": unix.SYS_INIT_MODULE, "finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE,
	"bpf": unix.SYS_BPF, "perf_event_open": unix.SYS_PERF_EVENT_OPEN, "keyctl": unix.SYS_KEYCTL,
	"add_key": unix.SYS_ADD_KEY, "userfaultfd": unix.SYS_USERFAULTFD, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
	"name_to_handle_at": unix.SYS_NAME_TO_HANDLE_AT, "iopl": unix.SYS_IOPL, "ioperm": unix.SYS_IOPERM,
	"acct": unix.SYS_ACCT, "swapon": unix.SYS_SWAPON, "reboot": unix.SYS_REBOOT,
	"settimeofday": unix.SYS_SETTIMEOFDAY, "clock_settime": unix.SYS_CLOCK_SETTIME,
	"io_uring_setup": unix.SYS_IO_URING_SETUP, "personality": unix.SYS_PERSONALITY, "syslog": unix.SYS_SYSLOG,
	"socket-inet": unix.SYS_SOCKET, "socket-inet6": unix.SYS_SOCKET, "socket-unix": unix.SYS_SOCKET,
	"socket-netlink": unix.SYS_SOCKET, "socket-vsock": unix.SYS_SOCKET, "socket-packet": unix.SYS_SOCKET,
	"socket-alg": unix.SYS_SOCKET, "socketpair-unix": unix.SYS_SOCKETPAIR, "socketpair-vsock": unix.SYS_SOCKETPAIR,
}

// sysOracle makes the attack name under the oracle and reports passedFilter
// or how the call failed (or "ok" when it ran: not possible under the
// oracle, so a sign that the oracle is broken).
func sysOracle(name string) (string, error) {
	nr, ok := attackNr[name]
	if !ok {
		return "", fmt.Errorf("unknown syscall attack %q", name)
	}
	type result struct {
		out string
		err error
	}
	// Some attacks (socket, unshare) are raw system calls, which keep
	// their P while the notifier holds them: the notifier needs another.
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread carries the probe's filter and ends
		// with this goroutine, so that no other code runs under it.
		runtime.LockOSThread()
		listener, err := installOracle(nr, unix.SECCOMP_RET_USER_NOTIF, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
		if errors.Is(err, unix.EINVAL) {
			out, err := traceOracle(name, nr)
			ch <- result{out, err}
			return
		}
		if err != nil {
			ch <- result{err: fmt.Errorf("installing the probe's notifier: %w", err)}
			return
		}
		seen, stop := make(chan struct{}, 1), make(chan struct{})
		go answerNotifications(listener, seen, stop)
		out, err := syscallAttack(name)
		close(stop)
		select {
		case <-seen:
			out, err = passedFilter, nil
		default:
		}
		ch <- result{out, err}
	}()
	r := <-ch
	return r.out, r.err
}

// traceOracle makes the attack name on the calling thread, whose own
// filter answers syscall nr with SECCOMP_RET_TRACE: see passedFilter.
func traceOracle(name string, nr uintptr) (string, error) {
	if _, err := installOracle(nr, unix.SECCOMP_RET_TRACE, 0); err != nil {
		return "", fmt.Errorf("installing the probe's tracing filter: %w", err)
	}
	out, err := syscallAttack(name)
	if errors.Is(err, unix.ENOSYS) {
		return passedFilter, nil
	}
	return out, err
}

// installOracle stacks on the calling thread a seccomp filter that answers
// syscall nr with action and allows everything else; with
// SECCOMP_FILTER_FLAG_NEW_LISTENER it returns the notifier's listener.
func installOracle(nr uintptr, action uint32, flags uintptr) (int, error) {
	raw, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1},
		bpf.RetConstant{Val: action},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
	})
	if err != nil {
		return -1, err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	// An unprivileged filter needs no_new_privs, on this thread only.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("no_new_privs: %w", err)
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	fd, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// seccompNotif and seccompNotifResp are struct seccomp_notif and
// struct seccomp_notif_resp.
type seccompNotif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Data  [64]byte
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// answerNotifications answers every call the listener reports with ECHRNG,
// after saying on seen that one came, until stop is closed and a receive
// fails. A receive fails with ENOENT also when a signal (the Go runtime's
// preemption) interrupted the caller after its notification was queued:
// the kernel withdraws it and restarts the call, which notifies again.
func answerNotifications(listener int, seen chan<- struct{}, stop <-chan struct{}) {
	defer unix.Close(listener)
	for {
		var n seccompNotif
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&n))); e != 0 {
			select {
			case <-stop:
				return
			default:
			}
			if errors.Is(e, unix.EINTR) || errors.Is(e, unix.ENOENT) {
				continue
			}
			return
		}
		select {
		case seen <- struct{}{}:
		default:
		}
		resp := seccompNotifResp{ID: n.ID, Error: -int32(unix.ECHRNG)}
		unix.Syscall(unix.SYS_IOCTL, uintptr(listener), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp)))
	}
}
