// Package initramfs builds the vm backend's initramfs: a cpio archive in
// the kernel's "newc" format (Writer; no external cpio tool) holding the
// guest's init (vminit), the kernel modules it loads, and their order
// (Build), and, appended per sandbox, the guest's configuration
// (AppendConfig).
//
// The kernel is a Debian linux-image package unpacked, not installed, in a
// directory (boot/vmlinuz-<version>, lib/modules/<version>/...): there is
// no modules.dep, so each module's dependencies are read from its ELF
// .modinfo section.
package initramfs
