package guest

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestSeccompFilter runs the assembled filter in x/net/bpf's VM on crafted
// seccomp_data; no root needed.
func TestSeccompFilter(t *testing.T) {
	if auditArch == 0 {
		// Not a CI requirement: the filter exists only for amd64 and
		// arm64, and there it runs.
		t.Skip("no seccomp deny list for this architecture")
	}
	insts, err := assembleFilter(seccompRules())
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel loads native-endian 32-bit words; the VM loads big-endian
	// ones. So each word sits where a little-endian kernel has it, in
	// big-endian byte order.
	data := func(arch, nr uint32, args ...uint64) []byte {
		b := make([]byte, 64)
		binary.BigEndian.PutUint32(b[0:], nr)
		binary.BigEndian.PutUint32(b[4:], arch)
		for i, a := range args {
			binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
			binary.BigEndian.PutUint32(b[16+8*i+4:], uint32(a>>32))
		}
		return b
	}
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e) }
	const allow, kill = unix.SECCOMP_RET_ALLOW, unix.SECCOMP_RET_KILL_PROCESS
	tests := []struct {
		name string
		in   []byte
		want uint32
	}{
		{"read", data(auditArch, unix.SYS_READ), allow},
		{"mount", data(auditArch, unix.SYS_MOUNT), errno(unix.EPERM)},
		{"unshare", data(auditArch, unix.SYS_UNSHARE, unix.CLONE_NEWUSER), errno(unix.EPERM)},
		{"ptrace", data(auditArch, unix.SYS_PTRACE), errno(unix.EPERM)},
		{"clone thread", data(auditArch, unix.SYS_CLONE, unix.CLONE_VM|unix.CLONE_THREAD|unix.CLONE_SIGHAND|unix.CLONE_FS|unix.CLONE_FILES|unix.CLONE_SYSVSEM|unix.CLONE_SETTLS), allow},
		{"fork", data(auditArch, unix.SYS_CLONE, uint64(unix.SIGCHLD)), allow},
		{"clone newuser", data(auditArch, unix.SYS_CLONE, unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)), errno(unix.EPERM)},
		{"clone newnet", data(auditArch, unix.SYS_CLONE, unix.CLONE_NEWNET), errno(unix.EPERM)},
		{"clone3", data(auditArch, unix.SYS_CLONE3), errno(unix.ENOSYS)},
		{"personality linux", data(auditArch, unix.SYS_PERSONALITY, 0), allow},
		{"personality query", data(auditArch, unix.SYS_PERSONALITY, 0xffffffff), allow},
		{"personality read_implies_exec", data(auditArch, unix.SYS_PERSONALITY, 0x0400000), errno(unix.EPERM)},
		{"socket inet", data(auditArch, unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM), allow},
		{"socket inet6", data(auditArch, unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM), allow},
		{"socket unix", data(auditArch, unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM), allow},
		{"socket netlink", data(auditArch, unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW), allow},
		{"socket vsock", data(auditArch, unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM), errno(unix.EAFNOSUPPORT)},
		{"socket packet", data(auditArch, unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW), errno(unix.EAFNOSUPPORT)},
		{"socket alg", data(auditArch, unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET), errno(unix.EAFNOSUPPORT)},
		{"socket vsock, high bits set", data(auditArch, unix.SYS_SOCKET, 1<<32|unix.AF_VSOCK), errno(unix.EAFNOSUPPORT)},
		{"socketpair unix", data(auditArch, unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM), allow},
		{"socketpair tipc", data(auditArch, unix.SYS_SOCKETPAIR, unix.AF_TIPC, unix.SOCK_SEQPACKET), errno(unix.EAFNOSUPPORT)},
		{"foreign arch", data(unix.AUDIT_ARCH_I386, unix.SYS_READ), kill},
	}
	if auditArch == unix.AUDIT_ARCH_X86_64 {
		tests = append(tests, struct {
			name string
			in   []byte
			want uint32
		}{"x32", data(auditArch, 0x40000000|unix.SYS_READ), kill})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := vm.Run(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if uint32(got) != tt.want {
				t.Errorf("got %#x, want %#x", got, tt.want)
			}
		})
	}
	for _, r := range seccompRules() {
		if r.reason == "" {
			t.Errorf("rule %s has no reason", r.name)
		}
	}
}
