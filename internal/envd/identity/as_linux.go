package identity

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// As runs fn with u's file permissions: path lookups, opens, creations and
// the rest that fn does are checked against u's uid, gid and groups, and
// what it creates belongs to u, as if u had done it. envd runs as root, so
// without this a request naming "user" would read root's files.
//
// The file system ids (fsuid, fsgid) and supplementary groups are per
// thread in Linux, so fn runs on an OS thread of its own, locked for the
// call, with those set from u through raw per-thread system calls (the
// effective ids where the kernel has no file system ids: setThreadIDs);
// the capabilities that bypass file permissions leave the thread's
// effective set while its fsuid is not 0 and come back when it is reset. A thread
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
	setThreadIDs(int(u.UID), int(u.GID))
	if uid, gid := threadIDs(); uid != int(u.UID) || gid != int(u.GID) {
		return fmt.Errorf("acting as %s: the thread's file system ids are %d:%d, want %d:%d", u.Name, uid, gid, u.UID, u.GID)
	}
	return nil
}

// restore gives the calling thread back envd's ids (root's) and groups.
func restore(groups []int) error {
	setThreadIDs(0, 0)
	if uid, gid := threadIDs(); uid != 0 || gid != 0 {
		return fmt.Errorf("resetting the thread's file system ids: they are %d:%d", uid, gid)
	}
	if err := unix.Setgroups(groups); err != nil {
		return fmt.Errorf("resetting the thread's groups: %w", err)
	}
	return nil
}

// haveFSIDs reports whether the kernel has setfsuid and setfsgid. gVisor's
// has neither (ENOSYS); there the thread's effective ids, which file
// permissions follow when there are no file system ids of their own, do
// the same job.
var haveFSIDs = sync.OnceValue(func() bool {
	_, err := unix.SetfsuidRetUid(-1)
	return !errors.Is(err, unix.ENOSYS)
})

// setThreadIDs sets the calling thread's file system ids. Either call
// reports failure only by not changing the id: threadIDs tells. The raw
// system calls change only the calling thread (glibc and Go's own
// setresuid change every thread). With the effective ids, the real and
// saved ones stay root's, so that the thread may take root's back; the
// capabilities that bypass file permissions leave its effective set as
// its effective uid leaves 0, and come back with it. The gid is set while
// the thread is root.
func setThreadIDs(uid, gid int) {
	if haveFSIDs() {
		unix.SetfsgidRetGid(gid)
		unix.SetfsuidRetUid(uid)
		return
	}
	const keep = ^uintptr(0) // -1: leave the id as it is
	setUID := func() { unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep) }
	setGID := func() { unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(gid), keep) }
	if uid == 0 {
		setUID()
		setGID()
	} else {
		setGID()
		setUID()
	}
}

// threadIDs returns the calling thread's file system ids.
func threadIDs() (uid, gid int) {
	if haveFSIDs() {
		uid, _ = unix.SetfsuidRetUid(-1)
		gid, _ = unix.SetfsgidRetGid(-1)
		return uid, gid
	}
	return unix.Geteuid(), unix.Getegid()
}
