package codeinterp

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// prepareCmd puts a runtime's process in a process group of its own (so
// signals meant for the server do not reach it and it can be killed with
// everything it started) and has the kernel kill it if the server dies.
func prepareCmd(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills the process group led by pid.
func killGroup(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// signalPID sends sig to one process.
func signalPID(pid int, sig syscall.Signal) {
	_ = syscall.Kill(pid, sig)
}

// foregroundDescendants lists the descendants of pid that do not ignore
// SIGINT. A non-interactive shell starts background jobs (`cmd &`) with
// SIGINT ignored, so these are the processes of the command in the
// foreground.
func foregroundDescendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := parentPID(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			queue = append(queue, c)
			if !ignoresSIGINT(c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// parentPID reads the parent of pid from /proc/<pid>/stat.
func parentPID(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// ignoresSIGINT reports whether pid ignores SIGINT, from the SigIgn mask
// in /proc/<pid>/status.
func ignoresSIGINT(pid int) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(uint(syscall.SIGINT)-1)) != 0
		}
	}
	return false
}
