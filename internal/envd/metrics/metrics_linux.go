package metrics

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cpuInterval is how long Sample watches /proc/stat to measure CPU use.
const cpuInterval = 100 * time.Millisecond

// Sample measures the system now. It takes about 100 ms, to measure CPU use.
// Inside a jail /proc reflects the host: memory comes from the sandbox's
// cgroup (mounted at /sys/fs/cgroup) when it has a limit below the host's
// memory, and the CPU count from the affinity mask, which the jail's cpu
// set bounds.
func Sample(ctx context.Context) (Snapshot, error) {
	before, err := readCPU()
	if err != nil {
		return Snapshot{}, err
	}
	t := time.NewTimer(cpuInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return Snapshot{}, ctx.Err()
	case <-t.C:
	}
	after, err := readCPU()
	if err != nil {
		return Snapshot{}, err
	}
	mem, err := readMeminfo()
	if err != nil {
		return Snapshot{}, err
	}
	if cg, ok := readCgroupMemory(cgroupRoot); ok && cg.total < mem.total {
		mem = cg
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return Snapshot{}, fmt.Errorf("statfs /: %w", err)
	}
	return Snapshot{
		Timestamp:   time.Now().Unix(),
		CPUCount:    runtime.NumCPU(),
		CPUUsedPct:  usedPct(before, after),
		MemTotal:    mem.total,
		MemUsed:     mem.used,
		MemCache:    mem.cache,
		MemTotalMiB: mem.total >> 20,
		MemUsedMiB:  mem.used >> 20,
		DiskUsed:    (st.Blocks - st.Bfree) * uint64(st.Bsize),
		DiskTotal:   st.Blocks * uint64(st.Bsize),
	}, nil
}

// cpuTimes are the aggregate jiffies of /proc/stat's "cpu" line.
type cpuTimes struct{ idle, total uint64 }

func readCPU() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, fmt.Errorf("reading /proc/stat: %w", err)
	}
	return parseCPU(bytes.NewReader(b))
}

// parseCPU reads the "cpu" line of /proc/stat: user nice system idle iowait
// irq softirq steal (guest and guest_nice are already counted in user and
// nice). Idle time is idle plus iowait.
func parseCPU(r io.Reader) (cpuTimes, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[0] != "cpu" {
			continue
		}
		var t cpuTimes
		for i, f := range fields[1:min(len(fields), 9)] {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("parsing /proc/stat cpu field %d %q: %w", i+1, f, err)
			}
			t.total += v
			if i == 3 || i == 4 { // idle, iowait
				t.idle += v
			}
		}
		return t, nil
	}
	if err := sc.Err(); err != nil {
		return cpuTimes{}, fmt.Errorf("reading /proc/stat: %w", err)
	}
	return cpuTimes{}, fmt.Errorf("no cpu line in /proc/stat")
}

// usedPct is the share of non-idle time between two readings, in percent
// rounded to two decimals.
func usedPct(a, b cpuTimes) float64 {
	if b.total <= a.total {
		return 0
	}
	total := float64(b.total - a.total)
	idle := float64(b.idle - a.idle)
	if b.idle < a.idle {
		idle = 0
	}
	pct := 100 * (total - idle) / total
	return math.Round(max(0, min(100, pct))*100) / 100
}

// memInfo is memory use in bytes, reckoned as gopsutil (and so the
// reference envd) does: cache is page cache plus reclaimable slab, used is
// what is neither free, buffers nor cache.
type memInfo struct{ total, used, cache uint64 }

func readMeminfo() (memInfo, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return memInfo{}, fmt.Errorf("reading /proc/meminfo: %w", err)
	}
	return parseMeminfo(bytes.NewReader(b))
}

func parseMeminfo(r io.Reader) (memInfo, error) {
	kb := map[string]uint64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch key {
		case "MemTotal", "MemFree", "Buffers", "Cached", "SReclaimable":
		default:
			continue
		}
		num, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
		v, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return memInfo{}, fmt.Errorf("parsing /proc/meminfo %s %q: %w", key, rest, err)
		}
		kb[key] = v << 10
	}
	if err := sc.Err(); err != nil {
		return memInfo{}, fmt.Errorf("reading /proc/meminfo: %w", err)
	}
	if kb["MemTotal"] == 0 {
		return memInfo{}, fmt.Errorf("no MemTotal in /proc/meminfo")
	}
	m := memInfo{total: kb["MemTotal"], cache: kb["Cached"] + kb["SReclaimable"]}
	if notUsed := kb["MemFree"] + kb["Buffers"] + m.cache; notUsed < m.total {
		m.used = m.total - notUsed
	}
	return m, nil
}

// cgroupRoot is where the jail mounts the sandbox's cgroups.
const cgroupRoot = "/sys/fs/cgroup"

// readCgroupMemory reads the memory limit and use of the cgroup mounted at
// root: cgroup2 (memory.max) or v1's memory hierarchy at root/memory
// (memory.limit_in_bytes). Used is what is charged less the page cache, as
// free reckons it. ok is false without a cgroup or a limit.
func readCgroupMemory(root string) (m memInfo, ok bool) {
	files := [3]string{"memory.max", "memory.current", "memory.stat"}
	cacheKey := "file"
	if _, err := os.Stat(root + "/memory.max"); err != nil {
		root += "/memory"
		files = [3]string{"memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat"}
		cacheKey = "total_cache"
	}
	var v [2]uint64
	for i, f := range files[:2] {
		b, err := os.ReadFile(root + "/" + f)
		if err != nil {
			return memInfo{}, false
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return memInfo{}, false
		}
		if v[i], err = strconv.ParseUint(s, 10, 64); err != nil {
			return memInfo{}, false
		}
	}
	m.total, m.used = v[0], v[1]
	if b, err := os.ReadFile(root + "/" + files[2]); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, val, ok := strings.Cut(line, " "); ok && k == cacheKey {
				m.cache, _ = strconv.ParseUint(val, 10, 64)
			}
		}
	}
	m.used -= min(m.used, m.cache)
	return m, m.total > 0
}
