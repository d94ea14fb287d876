package sandbox

import "golang.org/x/sys/unix"

// diskSpace returns the bytes free to unprivileged users and the size of
// the file system holding dir.
func diskSpace(dir string) (avail, total uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}
