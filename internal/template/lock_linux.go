package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock on path (created if missing), polling so
// that ctx can cancel the wait. flock conflicts between open file
// descriptions, so it serializes goroutines of one process as well as
// processes. A lock file removed and recreated while we waited is detected
// and the lock is retaken on the new file.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	for {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := flockWait(ctx, f); err != nil {
			f.Close()
			return nil, err
		}
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &now) == nil &&
			held.Dev == now.Dev && held.Ino == now.Ino {
			return func() { f.Close() }, nil
		}
		f.Close() // removed under us: lock the file that is there now
	}
}

func flockWait(ctx context.Context, f *os.File) error {
	const poll = 200 * time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(poll):
		}
	}
}
