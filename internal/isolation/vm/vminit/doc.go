// Package vminit is the guest's PID 1 in the vm backend: the initramfs'
// /init (cmd/vminit), which turns a freshly booted kernel into a sandbox
// and starts envd in it.
//
// It mounts /proc, /sys and devtmpfs in the initramfs, reads the host's
// Config from ConfigPath (and deletes it: it holds envd's token), loads
// the modules the initramfs carries (ModulesOrder, dependencies first,
// with finit_module), waits for the disks, mounts the root disk (RootDisk,
// read-write, nodev) and grows its ext4 to fill the disk online
// (EXT4_IOC_RESIZE_FS), takes each of Config.Binaries from the tools disk
// (ToolsDisk, read-only) as a detached mount, mounts each volume's disk
// (found by its serial, VolumeSerial; ext4, read-write, without devices
// or setuid) and takes it the same way, and moves the root disk over the
// initramfs and chroots into it, as switch_root does. Inside it builds
// the same view as the jail's init (package guest: a minimal read-only
// /dev with devpts and /dev/shm, envd and the tools read-only at their
// guest paths, the volumes at theirs, resolv.conf) plus /proc, a
// read-only /sys and cgroup2;
// sets the hostname; brings up lo and eth0 (vishvananda/netlink) and an
// nftables DNAT from the host side's address to 127.0.0.1, so the host
// reaches envd, which listens on the guest's loopback; sets
// kernel.modules_disabled=1; and starts envd in a cgroup of its own
// capped at Config.Pids tasks.
//
// envd is started through a stage: init re-executes its own binary
// (/proc/self/exe) into envd's cgroup (CLONE_INTO_CGROUP), and that
// process confines itself (guest.Confine: the bounding set, no_new_privs
// if asked, the seccomp deny list) and executes envd, with its token on a
// pipe. init itself stays unconfined, since the deny list refuses
// reboot(2), which is how the VM ends; it is non-dumpable, so nothing in
// the sandbox can reach it through /proc/1.
//
// While envd runs, init serves the host's Requests, one JSON line each on
// its console: a VM restored from a memory snapshot takes its identity
// (OpIdentity), the root file system is frozen and thawed around a copy
// of its disk (OpFreeze, OpThaw), and every file system's cached writes
// go to their disks before the host stops a VM whose volumes outlive it
// (OpSync).
//
// init then reaps orphans until envd exits, prints
//
//	vminit: halt: envd exited: <status>
//
// and reboots, which ends the VM (QEMU runs with -no-reboot). A step that
// fails prints "vminit: halt: <step>: <error>" and reboots the same way.
// What follows "vminit: halt: " (Halt) is what the host quotes as the
// sandbox's exit reason; init's other "vminit: " lines are progress and
// answers to the host's requests; envd's own output is copied to the
// console (up to guest.EnvdLogLimit) with every line after "envd: ", so
// the sandbox cannot forge one.
package vminit
