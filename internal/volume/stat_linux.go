package volume

import (
	"io/fs"
	"syscall"
	"time"
)

// owner returns the owner and the access and change times of fi.
func owner(fi fs.FileInfo) (uid, gid uint32, atime, ctime time.Time) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fi.ModTime().UTC(), fi.ModTime().UTC()
	}
	return st.Uid, st.Gid, time.Unix(st.Atim.Sec, st.Atim.Nsec).UTC(), time.Unix(st.Ctim.Sec, st.Ctim.Nsec).UTC()
}
