// Package guest is what runs inside every sandbox whatever the backend
// (the jail's init, the VM's init): the confinement of the processes
// there, and how envd is started.
//
// Confine drops the capability bounding set to Docker's default set
// (keptCaps), so that root in the sandbox, and a setuid-root program,
// holds nothing more; sets no_new_privs when the operator asks (it breaks
// sudo, which the bounding set already makes harmless); and loads the
// seccomp deny list (seccompRules), which refuses, with an errno, the
// syscalls that rearrange mounts, make namespaces, load kernel code, reach
// other processes' memory, or open large kernel attack surface (io_uring,
// bpf, userfaultfd, foreign socket families). The list is the same in a
// VM: there it guards the sandbox's own kernel, which is what a kernel
// exploit would start from.
//
// envd runs at EnvdPath with the environment Envd.Env and reads its
// access token from EnvdTokenFd, a pipe, so that the token is in no
// command line or environment a process in the sandbox can read.
package guest
