// Package vm is the microVM isolation backend: each sandbox is a guest
// with its own Linux kernel, run by one QEMU process (machine type
// microvm; KVM where /dev/kvm is usable, TCG emulation elsewhere).
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
//     their guest paths; both are made once per version of their inputs;
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
//     supplementary groups, in the cgroup <CgroupParent>/<id> (vCPUs,
//     guest memory plus QEMU's overhead, pids), under QEMU's own seccomp
//     filter (-sandbox on: no exec, no privilege or resource-limit
//     changes). QEMU opens no host path: the kernel, initrd, disks, tap
//     and the monitor's listening socket are descriptors it inherits
//     (disks through fd sets);
//  6. connects to QEMU's monitor (QMP) and lets the guest run. The
//     manager then waits for envd (isolation.WaitEnvd) through Dial.
//
// In the guest, vminit loads the virtio modules, grows the root file
// system to the disk's size, mounts the tools, configures eth0, sets
// kernel.modules_disabled, confines itself as the jail's init does
// (isolation/guest: capability bounding set, no_new_privs if asked, the
// same seccomp deny list) and starts envd on the guest's loopback. The
// server reaches the guest from the namespace's own address
// (network.ForwarderAddr), which vminit redirects to the guest's
// loopback, so that servers listening only there answer, as in a jail.
// When envd exits or setup fails, vminit says why on the console
// ("vminit: …") and reboots, which ends QEMU (-no-reboot); a guest panic
// does the same (panic=-1). Exit quotes that line.
//
// # Pause, restart, cleanup
//
// Pause and Resume stop and continue the vCPUs (QMP stop/cont). QEMU
// outlives the server: Adopt finds it again by pid and start time, and
// reconnects to its monitor socket; the console of an adopted VM is not
// read any more (it was a pipe to the server that started it), so its
// exit reason is "QEMU exited". Cleanup kills the cgroup, releases the
// network and the uid range and removes the directory.
//
// # Not here yet
//
// Memory snapshots (boot from a saved template VM), Firecracker, a
// mount namespace of QEMU's own with nothing but what it uses.
package vm
