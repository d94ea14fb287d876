// Package jail is the default isolation backend: each sandbox is a process
// tree in its own mount, pid, uts, ipc, cgroup and network namespaces, with
// an overlayfs root, a disk quota, cgroup limits, a reduced capability
// bounding set and a seccomp filter. It needs root and Linux ≥ 5.8 (for
// LOOP_CONFIGURE); no KVM.
//
// # How a sandbox starts
//
// Start (on the host, in the server):
//
//  1. makes StateDir/<id> and a sparse ext4 image there of DiskSizeMB (the
//     disk quota; mkfs.ext4 without a journal);
//  2. asks the host networking (Config.Network, a network.Host) for the
//     network namespace <id>, which, with an address pool, comes with a /30
//     lease and a routed veth (eth0 inside, VethName(id) on the host) under
//     the firewall's default-deny egress; then the cgroup
//     <CgroupParent>/<id> with the cpu, memory (no swap) and pids limits;
//  3. executes InitPath with InitArgs (cmd/jailinit, or this binary's
//     hidden "init" command) from a thread inside that network namespace,
//     with CLONE_NEWNS|NEWPID|NEWUTS|NEWIPC (and, on cgroup v2, NEWCGROUP
//     plus CLONE_INTO_CGROUP, so the child never runs outside its group).
//     On v1 the child waits for its configuration, which is written to it
//     only after cgroup.Add;
//  4. waits for init's status message, which init sends once envd is
//     started; the manager then waits for envd itself (isolation.WaitEnvd).
//
// InitMain (PID 1 in the sandbox, still running our binary) first closes
// every descriptor it inherited beyond fds 0 to 4 that an exec would pass
// on (the server's own inheritance), reads its configuration as JSON from
// fd 3, unshares its cgroup namespace on v1, attaches the image to a loop
// device with LO_FLAGS_AUTOCLEAR and mounts it (only in its own mount
// namespace), mounts the overlay (lower: the template, never written;
// upper and work: on the image; named relative to the sandbox's directory,
// so that mountinfo names no host path), pivots into it and detaches the
// old root, then mounts /proc (with masked paths), a minimal read-only
// /dev with devpts and a /dev/shm of half the memory limit, a read-only
// /sys, and envd read-only at /usr/bin/envd. envd and the tools are bound
// from the backend's binaries tmpfs (BinariesDir), which holds one copy of
// each, named by its content. It sets the hostname, makes itself
// non-dumpable, confines itself (package guest, shared with the vm
// backend's init: the capability bounding set, optionally no_new_privs,
// the seccomp deny list), starts envd as guest.Envd says, reports on fd 4, and reaps orphans until envd exits; then it exits
// and the kernel kills everything left in the pid namespace. Its mount
// namespace dies with it, which unmounts the overlay and the image and
// frees the loop device.
//
// # Build steps: layers and export
//
// A template build step is a sandbox like any other, started with
// Spec.Layers stacked over the template (each idmapped like the template
// in a user namespace) and Spec.Export set. Its overlay, like every
// sandbox's, is mounted with index, redirect_dir and metacopy off, so that
// its upper holds only plain changes, and Stop, once every process is gone, exports that upper
// from the disk image into the Export directory (export_linux.go): in a
// helper process with a mount namespace of its own, with the sandbox's ids
// shifted back to the template's and nothing in the tree followed.
//
// # Snapshots
//
// Instance.Snapshot saves a running (or paused) sandbox's file system, at
// one instant (its cgroup frozen), as layers of the same plain format:
// the layers it runs over, hard-linked, and a copy of its upper read
// through the sandbox's own loop device (snapshot_linux.go). A sandbox
// started from one (Spec.Snapshot) stacks those layers over the template
// and boots afresh: processes and memory are not kept (Capabilities
// Snapshot is FilesSnapshot). Every overlay is mounted without redirects
// or metacopy, so that any sandbox's upper can be exported, and every
// start of a sandbox gets a boot id of its own (/proc/sys/kernel/random/
// boot_id, bound over the host's).
//
// envd is still reached through the namespace's loopback (Dial), never
// through the veth. The networking is the host's (network.Host), shared by
// every backend: Adopt re-opens the namespace and re-reserves the lease
// recorded in the state, and Stop and Cleanup give both back (Release).
//
// Everything a sandbox uses is named after its ID (directory, network
// namespace, host veth, cgroup), so Cleanup works even from a State that a
// half-finished Start never recorded, and Leftovers finds what no record
// mentions.
//
// # no_new_privs
//
// Config.NoNewPrivs is off by default: templates promise a working sudo for
// user "user", and no_new_privs disables setuid. That is safe because the
// bounding set is already reduced, so a setuid-root program gains nothing
// that root in the sandbox does not already have. Operators who want no
// user→root transition at all turn it on (serve --no-new-privs).
package jail
