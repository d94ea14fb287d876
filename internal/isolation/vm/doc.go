// Package vm is the microVM isolation backend: each sandbox is a guest
// with its own Linux kernel, run by one QEMU process (machine type
// microvm; KVM where DetectKVM finds it usable, TCG emulation elsewhere).
//
// # How a sandbox starts
//
// Start (on the host, in the server):
//
//  1. makes StateDir/<id>, reserves a host uid range for the sandbox
//     (idmap, shared with the jail's user namespaces) and makes the
//     sandbox's disk: a qcow2 overlay of DiskSizeMB whose backing file is
//     the template's ext4 image (Spec.RootImage), used read-only by
//     every sandbox of the template;
//  2. takes from the boot cache (CacheDir) the initramfs — vminit, the
//     guest's init, as /init and the kernel modules it loads — and the
//     tools disk, a read-only ext4 image holding envd and Spec.Tools at
//     their guest paths; both are made once per version of their inputs
//     (logged), and what goes unused for a week is removed at start.
//     Each of Spec.Volumes is a further disk, the volume's own ext4
//     image (VolumeMount.Image, lent to the sandbox alone by the
//     manager), read-write, with QEMU's cache in writeback: the guest's
//     flushes reach the host's disk;
//  3. asks the host networking (network.Host) for the sandbox's namespace
//     and routed veth, as for a jail, creates the tap tap0 in it and hands
//     the sandbox's address to the guest behind the tap (ForwardTo): the
//     host's firewall, DNS filter, egress proxy and shaper see the
//     guest's own packets on the veth, unchanged;
//  4. writes the sandbox's initrd, the shared initramfs with a second
//     archive appended that holds vminit.Config (hostname, addresses,
//     envd's arguments and token, the guest's pids cap), readable only by
//     the sandbox's uid;
//  5. starts QEMU stopped (-S) from a thread in the sandbox's network
//     namespace, as the first uid of the sandbox's range with no
//     supplementary groups (but /dev/kvm's under KVM), chrooted in a
//     mount namespace of its own, in the cgroup <CgroupParent>/<id>
//     (vCPUs, guest memory plus QEMU's overhead, pids), under QEMU's own
//     seccomp filter (-sandbox on: no exec, no privilege or
//     resource-limit changes). QEMU opens no host path: the kernel,
//     initrd, disks, tap and the monitor's and console's listening
//     sockets are descriptors it inherits (disks through fd sets);
//  6. connects to QEMU's console and monitor (QMP) and lets the guest run. The
//     manager then waits for envd (isolation.WaitEnvd) through Dial.
//
// In the guest, vminit loads the virtio modules, grows the root file
// system to the disk's size, mounts the tools and the volumes (each found
// by its disk's serial, mounted read-write without devices or setuid;
// the guest's users own what they write, as uid 1000 writes 1000 in a
// jail), configures eth0, sets
// kernel.modules_disabled, confines itself as the jail's init does
// (isolation/guest: capability bounding set, no_new_privs if asked, the
// same seccomp deny list) and starts envd on the guest's loopback. The
// server reaches the guest from the namespace's own address
// (network.ForwarderAddr), which vminit redirects to the guest's
// loopback, so that servers listening only there answer, as in a jail.
// When envd exits or setup fails, vminit says why on the console
// ("vminit: halt: …") and reboots, which ends QEMU (-no-reboot); a guest panic
// does the same (panic=-1). Exit quotes that line.
//
// # Boot from a memory snapshot
//
// With Config.Snapshots (the server's default), the first sandbox of a
// shape — template image, CPUs, memory, disk size, tools, kernel, QEMU —
// boots cold and, beside it, a VM of the same shape is booted, stopped
// once envd answers and saved (QMP migrate to a file) with a copy of its
// disk, into CacheDir/snapshots/<key>. Each later sandbox of that shape
// gets a copy of that disk, a QEMU started with -incoming and the same
// devices, the saved state loaded into it, and then, before anything of
// the sandbox's runs, an identity of its own: vminit reads a request
// from its console (vminit.Request with an Identity: hostname, address
// and gateway, 64 random bytes it credits to the kernel's pool and
// reseeds from, the time) and answers on it; the server then replaces the saved envd's
// token with the sandbox's (POST /init). What clones still share: the
// guest kernel's address layout (KASLR) and the memory layout of init
// and envd, as with every snapshot-restoring VM service. A sandbox with
// volumes boots cold: a restored guest has the disks it was saved with,
// and a boot snapshot has none.
//
// # Snapshots of a sandbox
//
// Instance.Snapshot saves a running sandbox the same way as a boot
// snapshot (memory and disk), or its disk alone: then vminit first
// freezes the root file system (FIFREEZE: its page cache written back,
// writes held; it thaws by itself after vminit.FreezeLimit) so that the
// copied overlay is whole. Start with Spec.Snapshot restores the first
// kind into a VM of the same shape, with an identity and a token of its
// own, and boots cold over the second. A memory snapshot records how
// many volume disks the VM had, and restores only with as many: its
// guest has them mounted (the manager restores it only as the same
// sandbox, with the same volumes, after a pause to disk). Volumes are
// never part of a snapshot: they are the volume package's.
//
// # Stop
//
// A volume outlives the VM, and what the guest wrote last may be in its
// page cache alone: before killing QEMU, Stop has vminit write back every
// file system (vminit.OpSync; a paused guest runs for that long). A guest
// whose memory was saved while paused is killed as it is: it goes on from
// that memory, caches included, when it is restored, and must find its
// volumes as it left them.
//
// # The console and QEMU's confinement
//
// The serial console is a unix socket QEMU listens on (console_linux.go):
// the backend connects before the guest runs and again after adopting
// the VM; it keeps the console's tail for the exit reason and writes
// vminit its requests (identity, freeze, thaw), answered on the console.
// QEMU runs chrooted in a mount namespace of its own into a read-only root
// with the host's /usr, a /proc of its own and five /dev nodes
// (root_linux.go).
//
// # Pause, restart, cleanup
//
// Pause and Resume stop and continue the vCPUs (QMP stop/cont). QEMU
// outlives the server: Adopt finds it again by pid and start time, and
// reconnects to its monitor and console sockets. Cleanup kills the
// cgroup, releases the network and the uid range and removes the
// directory.
//
// # Not here yet
//
// Running the guest under Firecracker (its machine description and
// jailer arguments are in package firecracker, unit-tested only: no
// binary and no hardware KVM on the hosts this was built on).
package vm
