// Package proc finds again, watches and signals host processes that an
// earlier server process started: a sandbox's init or its VM's QEMU,
// adopted after a restart. A pid alone is not an identity (pids are
// reused), so a Process is a pid together with its start time, pinned by
// a pidfd once checked.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// StartTime returns field 22 of /proc/<pid>/stat: the process's start
// time in clock ticks after boot, which tells a pid apart from its reuse.
func StartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// comm (field 2) may contain spaces and parentheses: split after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (state), so field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(fields))
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// Process is a process this server did not start (so cannot wait(2) for),
// pinned by a pidfd.
type Process struct {
	pid   int
	start uint64
	pidfd *os.File
}

// Open returns the process pid if it is still the one that started at
// start (StartTime). A process that is gone, or whose pid now belongs to
// another, is an error wrapping fs.ErrNotExist.
func Open(pid int, start uint64) (*Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("process %d: %w", pid, fs.ErrNotExist)
	}
	// The pidfd pins the process; its identity is checked after opening it.
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w (%w)", pid, fs.ErrNotExist, err)
	}
	pf := os.NewFile(uintptr(fd), "pidfd")
	if s, err := StartTime(pid); err != nil || s != start {
		pf.Close()
		return nil, fmt.Errorf("process %d is not the recorded one: %w", pid, fs.ErrNotExist)
	}
	return &Process{pid: pid, start: start, pidfd: pf}, nil
}

// Pid returns the process's pid.
func (p *Process) Pid() int { return p.pid }

// Signal sends sig through the pidfd, so never to a process that reused
// the pid. A process that has exited is not an error.
func (p *Process) Signal(sig unix.Signal) error {
	rc, err := p.pidfd.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
		return err
	}
	if errors.Is(serr, unix.ESRCH) {
		return nil
	}
	if serr != nil {
		return fmt.Errorf("signalling process %d: %w", p.pid, serr)
	}
	return nil
}

// Close releases the pidfd; the process is not affected.
func (p *Process) Close() error { return p.pidfd.Close() }

// Wait blocks until the process has exited (or the Process is closed).
func (p *Process) Wait() {
	rc, err := p.pidfd.SyscallConn()
	if err == nil {
		// A pidfd is readable once its process has exited.
		err = rc.Read(func(fd uintptr) bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(pfd, 0)
			return n > 0
		})
	}
	if err != nil {
		// Not pollable: watch /proc instead.
		for {
			if s, err := StartTime(p.pid); err != nil || s != p.start {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}
