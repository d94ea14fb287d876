// Package gvisor is the gVisor isolation backend: each sandbox is one
// runsc sandbox, whose processes run on gVisor's user-space kernel (the
// sentry) rather than on the host's, so that a Linux kernel bug reachable
// from a system call is not reachable from the sandbox. It needs root and
// Debian's runsc package; no KVM.
//
// # How a sandbox starts
//
// Start (on the host, in the server):
//
//  1. makes StateDir/<id> and a sparse ext4 image there of DiskSizeMB, the
//     sandbox's disk (package disk, as the jail's);
//  2. asks the host networking (network.Host) for the sandbox's network
//     namespace and routed veth, as for a jail, and makes the cgroup
//     <CgroupParent>/<id> with the CPU, memory and task limits (memory and
//     tasks with room for the sentry's own: sentryMemoryMB, sentryTasks);
//  3. writes runsc's bundle: an OCI spec (sandboxSpec) whose one process is
//     the helper (cmd/gvinit) as the sandbox's init, whose root is the
//     overlay below, writable, with envd, the tools and the init
//     bind-mounted read-only, and which puts runsc's processes in the
//     sandbox's network namespace and cgroup;
//  4. starts the helper as the launcher, in a mount namespace of its own,
//     from a thread in the network namespace: it mounts the image, the
//     overlay of the template (read-only lower) under the image's upper
//     directory, makes the bind mounts' mount points, reports the image's
//     loop device (the host caps the disk's I/O on it), and executes
//     `runsc run --detach`. The mounts live as long as runsc's gofer, which
//     serves the sandbox's files from them, and go with it; nothing is
//     mounted in the server's mount namespace;
//  5. once runsc returns, finds the sandbox process (the sentry) with
//     `runsc state` and watches it through a pidfd.
//
// In the sandbox, the init reads its configuration, envd's access token
// among it, from its stdin: a pipe the host filled and closed, passed on by
// the launcher and runsc. Then it writes /etc/resolv.conf, confines itself
// as every backend's init does (package guest; gVisor's kernel enforces
// the seccomp filter), starts envd on the sandbox's loopback, and reaps
// orphans until envd exits; its last line in the sandbox's log is then the
// exit reason.
//
// # Network
//
// runsc runs with host networking (--network=host): the sandbox's sockets
// are the host kernel's, in the sandbox's network namespace, so the host's
// firewall, DNS filter, egress proxy, shaping and audit on the veth apply
// as to a jail, and Dial reaches envd and every other port on 127.0.0.1
// from inside the namespace, as in the jail. runsc's own network stack
// (netstack) is not used: this runsc refuses it in any network namespace
// on a kernel that shows net.core.rmem_default in every namespace (6.x;
// "cannot run with network enabled in root network namespace"). Its test
// can be passed by a tmpfs over /proc/sys/net/core in runsc's mount
// namespace, mounted from inside the sandbox's network namespace (/proc
// entries under /proc/sys/net are per network namespace), and netstack
// then runs; but the server cannot reach the sandbox's loopback through
// it, and its checkpoint refuses any TCP connection over the link
// ("endpoint cannot be saved in connected state"), ending the sandbox.
//
// # Pause, snapshots, restart, cleanup
//
// Pause and Resume are `runsc pause` and `runsc resume`, which stop and
// continue every task in gVisor's kernel. Snapshots are not offered: runsc
// refuses to checkpoint a sandbox with host networking ("checkpoint not
// supported when using hostinet"; the sandbox runs on). runsc's control
// socket is an abstract one, so every runsc command about a sandbox runs
// from inside its network namespace. The sandbox outlives the server:
// Adopt finds the sentry again by pid and start time. Stop and Cleanup kill
// the cgroup (the sentry, its platform's stub processes and the gofer) and
// remove what runsc added to it in the hierarchies package cgroup does not
// manage (removeRuntimeCgroups), the network, the image's loop device and
// the directory.
//
// # Platform
//
// New picks the platform: the first of systrap, kvm and ptrace on which
// runsc runs a probe sandbox (runsc do, the helper printing the kernel it
// sees), kvm only where /dev/kvm is hardware virtualisation, and logs why
// each one before it was passed over. Debian's runsc (20221219) has no
// systrap; its kvm platform hangs on a /dev/kvm of kvm_pvm. ptrace works
// wherever runsc does, at the cost of host context switches on every
// system call and page fault of the sandbox's.
//
// # Differences from the jail that a sandbox sees
//
// The kernel is gVisor's (uname -r 4.4.0; its own /proc and /sys). runsc
// takes CAP_NET_RAW away (no raw sockets, so no ping), and treats every
// process as no_new_privs: setuid programs (sudo) do not raise privileges.
// /tmp is a tmpfs in the sandbox's memory (runsc's default). A sandbox over
// its memory is ended as a whole by the host's OOM killer (Exit.OOM), not
// just its largest process.
//
// This runsc refuses statx(2) and fstatat(2) with AT_NO_AUTOMOUNT (EINVAL;
// later releases take it), which Debian 12's ls and stat pass on every
// file. Where the probe finds that, every sandbox preloads a shim
// (/etc/ld.so.preload; statxShim, amd64 only) whose statx drops the flag:
// a gVisor sandbox has no automounts for it to be about.
package gvisor
