package security

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/mountinfo"
)

// fdList reports every descriptor the probe holds as fd=target, with a
// "+" after those an exec would pass on (not close-on-exec). What the Go
// runtime opened for itself is close-on-exec.
func fdList() (string, error) {
	var fds []string
	for fd := range 4096 {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil {
			target = errName(err)
		}
		mark := ""
		if flags&unix.FD_CLOEXEC == 0 {
			mark = "+"
		}
		fds = append(fds, fmt.Sprintf("%d=%s%s", fd, target, mark))
	}
	return "ok " + strings.Join(fds, " "), nil
}

// procMem opens /proc/<pid>/mem for reading and writing and
// /proc/<pid>/environ and status for reading, of envd ("envd") or of a child of the
// probe's own ("child"), and says how each open went.
func procMem(which string) (string, error) {
	var pid int
	switch which {
	case "envd":
		var err error
		if pid, err = pidOf("envd"); err != nil {
			return "", err
		}
	case "child":
		cmd := exec.Command("/usr/bin/sleep", "30")
		if err := cmd.Start(); err != nil {
			return "", err
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		pid = cmd.Process.Pid
	default:
		return "", fmt.Errorf("procmem of %q: want envd or child", which)
	}
	res := map[string]string{}
	// status is what ps and envd's metrics read: it must stay readable.
	for file, flags := range map[string]int{"mem": unix.O_RDWR, "environ": unix.O_RDONLY, "status": unix.O_RDONLY} {
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/%s", pid, file), flags|unix.O_CLOEXEC, 0)
		if err != nil {
			res[file] = errName(err)
			continue
		}
		unix.Close(fd)
		res[file] = "ok"
	}
	return fmt.Sprintf("mem=%s environ=%s status=%s (%s pid %d)", res["mem"], res["environ"], res["status"], which, pid), nil
}

// pidOf finds the process whose comm is name.
func pidOf(name string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm"); strings.TrimSpace(string(comm)) == name {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no process %s in /proc", name)
}

// mountView is what the mounts probe reports.
type mountView struct {
	Mountinfo string `json:"mountinfo"`
	// Statfs is each mount point's size in bytes, blocks × block size.
	Statfs map[string]uint64 `json:"statfs"`
}

// mounts reports the probe's mountinfo and the size statfs gives for each
// of its mount points, as one JSON line.
func mounts() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	v := mountView{Mountinfo: string(b), Statfs: map[string]uint64{}}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		mp := mountinfo.Unescape(f[4])
		var st unix.Statfs_t
		if err := unix.Statfs(mp, &st); err != nil {
			v.Statfs[mp] = 0
			continue
		}
		v.Statfs[mp] = st.Blocks * uint64(st.Bsize)
	}
	out, err := json.Marshal(v)
	return string(out), err
}

// udpFlood sends n datagrams to each address, each from a socket of its
// own: a new connection for conntrack every time.
func udpFlood(n string, addrs []string) (string, error) {
	count, err := strconv.Atoi(n)
	if err != nil {
		return "", err
	}
	sent := 0
	for i := range count {
		for _, a := range addrs {
			host, port, err := net.SplitHostPort(a)
			if err != nil {
				return "", err
			}
			// PORT+ sends to PORT, PORT+1, ...: a new destination each time.
			if p, ok := strings.CutSuffix(port, "+"); ok {
				base, _ := strconv.Atoi(p)
				port = strconv.Itoa(base + i)
			}
			c, err := net.Dial("udp4", net.JoinHostPort(host, port))
			if err != nil {
				return "", err
			}
			if _, err := c.Write([]byte("flood")); err == nil {
				sent++
			}
			c.Close()
		}
	}
	return fmt.Sprintf("ok sent %d datagrams", sent), nil
}

// lookup resolves name through the sandbox's resolver.
func lookup(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*probeTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, name)
	var de *net.DNSError
	if errors.As(err, &de) && de.IsTimeout {
		return "", context.DeadlineExceeded
	}
	if err != nil {
		return "", err
	}
	return "ok " + strings.Join(addrs, ","), nil
}
