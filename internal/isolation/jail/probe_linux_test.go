package jail

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// probeMain is what /usr/bin/probe (this test binary, copied into the test
// rootfs) runs inside a sandbox.
func probeMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "probe: no command")
		return 2
	}
	switch args[0] {
	case "syscalls":
		// Each escape attempt and the errno it got.
		report := func(name string, err error) {
			var e unix.Errno
			if errors.As(err, &e) {
				fmt.Printf("%s=%s\n", name, unix.ErrnoName(e))
			} else {
				fmt.Printf("%s=%v\n", name, err)
			}
		}
		report("unshare", unix.Unshare(unix.CLONE_NEWUSER))
		report("unshare_ns", unix.Unshare(unix.CLONE_NEWNS))
		report("mount", unix.Mount("tmpfs", "/tmp", "tmpfs", 0, ""))
		report("ptrace", unix.PtraceAttach(1))
		_, _, e := unix.RawSyscall(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD), 0, 0)
		report("clone_newuser", e)
		_, _, e = unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
		report("clone3", e)
		_, _, e = unix.RawSyscall(unix.SYS_KEYCTL, 0, 0, 0)
		report("keyctl", e)
		_, _, e = unix.RawSyscall(unix.SYS_PERSONALITY, 0x0400000, 0, 0) // READ_IMPLIES_EXEC
		report("personality", e)
		_, err := os.Open("/proc/1/root/")
		report("proc1root", err)
		return 0
	case "alloc":
		mb, _ := strconv.Atoi(args[1])
		for i := 0; i < mb/16; i++ {
			b := make([]byte, 16<<20)
			for j := range len(b) / 4096 {
				b[j*4096] = 1
			}
			allocSink = append(allocSink, b)
			fmt.Printf("%d MB\n", (i+1)*16)
		}
		return 0
	case "listen":
		ln, err := net.Listen("tcp", args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				return 1
			}
			io.WriteString(c, args[2])
			c.Close()
		}
	case "counter":
		for i := 0; ; i++ {
			_ = os.WriteFile(args[1]+".tmp", []byte(strconv.Itoa(i)), 0o644)
			_ = os.Rename(args[1]+".tmp", args[1])
			time.Sleep(5 * time.Millisecond)
		}
	case "fork":
		n, _ := strconv.Atoi(args[1])
		var err error
		var children []*exec.Cmd
		for len(children) < n {
			cmd := exec.Command("/usr/bin/sleep", "30")
			if err = cmd.Start(); err != nil {
				break
			}
			children = append(children, cmd)
		}
		fmt.Printf("started=%d err=%v\n", len(children), err)
		// Free the pids again, so later checks in the same sandbox can fork.
		for _, c := range children {
			c.Process.Kill()
			c.Wait()
		}
		return 0
	case "raw":
		// A raw socket, which takes CAP_NET_RAW in the network namespace's
		// owner: the errno, or "ok".
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
		if err != nil {
			fmt.Println(unix.ErrnoName(err.(unix.Errno)))
			return 0
		}
		unix.Close(fd)
		fmt.Println("ok")
		return 0
	case "socket":
		// A unix socket bound at args[1], left behind.
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrUnix{Name: args[1]})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	case "pattern":
		// Rewrites args[1] with 1 MiB of one byte, the next byte each time,
		// in one write(2) each: a copy of it that mixes bytes was torn.
		f, err := os.OpenFile(args[1], os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		buf := make([]byte, 1<<20)
		for i := 0; ; i++ {
			for j := range buf {
				buf[j] = byte(i)
			}
			if _, err := f.WriteAt(buf, 0); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	case "fill":
		f, err := os.Create(filepath.Clean(args[1]))
		if err != nil {
			fmt.Println(err)
			return 1
		}
		buf := make([]byte, 1<<20)
		total := 0
		for {
			n, err := f.Write(buf)
			total += n
			if err != nil {
				fmt.Printf("wrote=%dMB err=%v\n", total>>20, err)
				return 0
			}
		}
	}
	fmt.Fprintln(os.Stderr, "probe: unknown command", args[0])
	return 2
}

// allocSink keeps probe alloc's memory reachable.
var allocSink [][]byte
