package guest

import (
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

const (
	auditArch     = unix.AUDIT_ARCH_X86_64
	cloneFlagsArg = 0
)

// abiCheck rejects x32 syscalls, which share AUDIT_ARCH_X86_64 but have
// their own numbers (with __X32_SYSCALL_BIT); A holds the syscall number.
var abiCheck = []bpf.Instruction{
	bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: 0x40000000, SkipFalse: 1},
	bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS},
}

var archRules = []rule{
	deny("iopl", unix.SYS_IOPL, "raw I/O port access"),
	deny("ioperm", unix.SYS_IOPERM, "raw I/O port access"),
	deny("uselib", unix.SYS_USELIB, "obsolete; historical exploit vector"),
	deny("_sysctl", unix.SYS__SYSCTL, "obsolete sysctl interface"),
	deny("create_module", unix.SYS_CREATE_MODULE, "obsolete module interface"),
	deny("get_kernel_syms", unix.SYS_GET_KERNEL_SYMS, "obsolete module interface"),
	deny("query_module", unix.SYS_QUERY_MODULE, "obsolete module interface"),
	deny("ustat", unix.SYS_USTAT, "obsolete; leaks host filesystem information"),
	deny("sysfs", unix.SYS_SYSFS, "obsolete; lists host filesystem types"),
}
