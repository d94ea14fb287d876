package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// memAvailable returns MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (int64, error) { return meminfo("MemAvailable") }

func meminfo(key string) (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != key {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading %s from /proc/meminfo: %w", key, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s in /proc/meminfo", key)
}

// hostInfo describes this machine.
func hostInfo() Host {
	h := Host{Cores: runtime.NumCPU()}
	if total, err := meminfo("MemTotal"); err == nil {
		h.MemTotalGB = float64(total) / (1 << 30)
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = string(bytes.TrimRight(u.Release[:], "\x00"))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		h.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return h
}
