package identity

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// As runs fn with u's file permissions: path lookups, opens, creations and
// the rest that fn does are checked against u's uid, gid and groups, and
// what it creates belongs to u, as if u had done it. envd runs as root, so
// without this a request naming "user" would read root's files.
//
// The file system ids (fsuid, fsgid) and supplementary groups are per
// thread in Linux, so fn runs on an OS thread of its own, locked for the
// call, with those set from u through raw per-thread system calls; the
// capabilities that bypass file permissions leave the thread's effective
// set while its fsuid is not 0 and come back when it is reset. A thread
// whose ids cannot be reset is never reused: its goroutine exits locked,
// which ends the thread. This costs a few system calls a request, where a
// helper process per request would cost a fork.
//
// What fn opens stays usable after As returns (an open file is not checked
// again), so only the steps that name paths need to run inside it.
//
// Requests as root, and an envd that is not root (a developer's machine,
// where it can act only as itself), run fn as envd is.
func (u *User) As(fn func() error) error {
	if u.UID == 0 || os.Geteuid() != 0 {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		saved, err := unix.Getgroups()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("reading envd's groups: %w", err)
			return
		}
		if err = u.become(); err == nil {
			err = fn()
		}
		if rerr := restore(saved); rerr != nil {
			// The thread keeps u's ids: it ends with this goroutine.
			done <- errors.Join(err, rerr)
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

// become gives the calling thread u's file system ids and groups.
func (u *User) become() error {
	groups := make([]int, len(u.Groups))
	for i, g := range u.Groups {
		groups[i] = int(g)
	}
	if err := unix.Setgroups(groups); err != nil {
		return fmt.Errorf("acting as %s: setting groups: %w", u.Name, err)
	}
	// setfsuid and setfsgid report failure only by not changing the id.
	unix.SetfsgidRetGid(int(u.GID))
	unix.SetfsuidRetUid(int(u.UID))
	if gid, _ := unix.SetfsgidRetGid(-1); gid != int(u.GID) {
		return fmt.Errorf("acting as %s: fsgid is %d, want %d", u.Name, gid, u.GID)
	}
	if uid, _ := unix.SetfsuidRetUid(-1); uid != int(u.UID) {
		return fmt.Errorf("acting as %s: fsuid is %d, want %d", u.Name, uid, u.UID)
	}
	return nil
}

// restore gives the calling thread back envd's ids (root's) and groups.
func restore(groups []int) error {
	unix.SetfsuidRetUid(0)
	unix.SetfsgidRetGid(0)
	uid, _ := unix.SetfsuidRetUid(-1)
	gid, _ := unix.SetfsgidRetGid(-1)
	if uid != 0 || gid != 0 {
		return fmt.Errorf("resetting the thread's file system ids: they are %d:%d", uid, gid)
	}
	if err := unix.Setgroups(groups); err != nil {
		return fmt.Errorf("resetting the thread's groups: %w", err)
	}
	return nil
}
