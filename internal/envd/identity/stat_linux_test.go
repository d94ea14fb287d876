package identity

import (
	"os"
	"syscall"
	"testing"
)

func statUID(t *testing.T, fi os.FileInfo) uint32 {
	t.Helper()
	return fi.Sys().(*syscall.Stat_t).Uid
}
