// Package firecracker turns the vm backend's description of a machine
// (Machine) into what Firecracker needs to run the same guest: the
// firecracker-go-sdk's Config (kernel, initrd, boot arguments, vCPUs,
// memory, drives with I/O rate limiters, the tap in the sandbox's network
// namespace with bandwidth limiters) and the jailer's argv (unprivileged
// uid/gid, chroot, network namespace, cgroup v2 under a parent).
//
// The backend runs it as
//
//	cfg, err := firecracker.Config(m, bin)
//	cmd := exec.CommandContext(ctx, bin.Jailer, firecracker.JailerArgs(m, bin)...)
//	vm, err := sdk.NewMachine(ctx, cfg, sdk.WithProcessRunner(cmd))
//
// with its own jailer command because SDK v1.0.0's builder cannot say
// --parent-cgroup and pins every VM to NUMA node 0's CPUs; the SDK's
// chroot strategy still hard-links the kernel, initrd and drives into the
// chroot (so they must live on the chroot base's file system, with
// distinct file names, which Config checks).
//
// What differs from the QEMU machine:
//   - the kernel must be an uncompressed ELF vmlinux: Firecracker does not
//     boot the bzImage (vmlinuz) that Debian ships and QEMU takes, so the
//     kernel install has to extract one (not done yet);
//   - drives are raw images: no qcow2 overlay, so a sandbox's root disk is
//     a copy of the template image (reflink, or a device-mapper snapshot);
//   - QEMU's TCG/microvm workarounds are dropped from the boot arguments
//     (tsc=unstable, lpj=), and Firecracker's usual reboot=k (a guest
//     reboot ends Firecracker) and pci=off (it has no PCI bus) added; no
//     drive is Firecracker's root device, so the guest sees the same
//     root= the backend passes under QEMU, not one Firecracker appends;
//   - Firecracker describes its virtio-mmio devices with virtio_mmio.device=
//     arguments, which reach a virtio_mmio built as a module (Debian's
//     cloud kernel) only if the initramfs passes them on when loading it.
//
// What has been run: the table tests of Config and JailerArgs here. What
// has never run: Firecracker itself, its jailer, and this configuration
// against them. Neither binary is packaged for Debian or reachable from
// this project's registries, and both need /dev/kvm, which this host and
// CI lack.
package firecracker
