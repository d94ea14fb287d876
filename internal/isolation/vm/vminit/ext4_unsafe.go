//go:build linux

package vminit

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// ext4IocResizeFS is EXT4_IOC_RESIZE_FS, _IOW('f', 16, __u64)
// (fs/ext4/ext4.h), which x/sys does not name.
const ext4IocResizeFS = 0x40086610

// resizeExt4 grows the mounted ext4 file system fd is open in to blocks
// blocks, online.
func resizeExt4(fd int, blocks uint64) error {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), ext4IocResizeFS, uintptr(unsafe.Pointer(&blocks)))
	if errno != 0 {
		return errno
	}
	return nil
}
