package guest

import (
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

const (
	auditArch     = unix.AUDIT_ARCH_AARCH64
	cloneFlagsArg = 0
)

// abiCheck is empty: arm64 has one syscall ABI per audit arch.
var abiCheck []bpf.Instruction

// archRules is empty: the obsolete and x86-only syscalls do not exist here.
var archRules []rule
