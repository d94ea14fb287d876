package filesystem

import (
	"fmt"
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// networkFilesystem names the network or FUSE filesystem path is on, or
// returns "" for a local one. Watches there are unreliable (inotify sees only
// local changes), so WatchDir refuses them unless asked.
func networkFilesystem(path string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "", fmt.Errorf("statfs %s: %w", path, err)
	}
	switch uint32(st.Type) {
	case unix.NFS_SUPER_MAGIC:
		return "nfs", nil
	case unix.CIFS_SUPER_MAGIC:
		return "cifs", nil
	case unix.SMB_SUPER_MAGIC:
		return "smb", nil
	case unix.SMB2_SUPER_MAGIC:
		return "smb2", nil
	case unix.FUSE_SUPER_MAGIC:
		return "fuse", nil
	}
	return "", nil
}

// fileOwner returns the owner and group ids from an lstat result.
func fileOwner(fi fs.FileInfo) (uid, gid uint32, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return st.Uid, st.Gid, true
}
