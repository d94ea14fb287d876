package cgroup

import (
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Root is where the kernel's cgroup filesystems are mounted: the cgroup2
// hierarchy on V2, the directory holding one hierarchy per controller on V1
// and Hybrid.
const Root = "/sys/fs/cgroup"

// Mode is the cgroup layout of the host.
type Mode int

const (
	// V1 is the legacy layout: one hierarchy per controller under Root.
	V1 Mode = iota + 1
	// Hybrid has the controllers on v1 hierarchies under Root and a
	// controller-less cgroup2 hierarchy at Root/unified. Groups live on v1.
	Hybrid
	// V2 is the unified layout: a single cgroup2 hierarchy at Root.
	V2
)

// String implements fmt.Stringer.
func (m Mode) String() string {
	switch m {
	case V1:
		return "v1"
	case Hybrid:
		return "hybrid"
	case V2:
		return "v2"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

var (
	// ErrNotExist is wrapped by errors about a group that does not exist, as
	// when Load is asked for a group that has been deleted.
	ErrNotExist = fs.ErrNotExist
	// ErrExist is wrapped by the error Create returns for a name in use.
	ErrExist = fs.ErrExist
)

// Limits are the resource limits of a group. A zero field means no limit.
type Limits struct {
	// CPUs is the CPU bandwidth in CPUs: the quota is CPUs times the
	// 100 ms period, so 1.5 allows 150 ms of CPU time every 100 ms.
	CPUs float64
	// MemoryBytes caps memory; when it is set, the group may not swap either.
	MemoryBytes int64
	// Pids caps the number of tasks (processes and threads).
	Pids int64
	// CPUSet pins the group's tasks to these CPUs (cpuset.cpus), which is
	// also what their affinity mask, and so nproc, shows; empty leaves
	// the parent's.
	CPUSet []int
}

// Validate reports whether the limits can be applied.
func (l Limits) Validate() error {
	switch {
	case math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) || l.CPUs < 0:
		return fmt.Errorf("cpu limit %v is not a non-negative number", l.CPUs)
	case l.CPUs > 0 && cpuQuota(l.CPUs) < minCPUQuota:
		return fmt.Errorf("cpu limit %v is below the kernel minimum of %v", l.CPUs, float64(minCPUQuota)/cpuPeriod)
	case l.MemoryBytes < 0:
		return fmt.Errorf("memory limit %d is negative", l.MemoryBytes)
	case l.Pids < 0:
		return fmt.Errorf("pids limit %d is negative", l.Pids)
	case slices.ContainsFunc(l.CPUSet, func(c int) bool { return c < 0 }):
		return fmt.Errorf("cpu set %v names a negative CPU", l.CPUSet)
	}
	return nil
}

// cpuList returns cpus in the kernel's list format, e.g. "0,2,3".
func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// IOLimit caps a group's I/O on one block device. A zero rate is no cap.
type IOLimit struct {
	// Major and Minor are the device's numbers (stat's st_rdev).
	Major, Minor uint32
	// ReadBPS and WriteBPS are in bytes per second.
	ReadBPS, WriteBPS uint64
	// ReadIOPS and WriteIOPS are in I/O operations per second.
	ReadIOPS, WriteIOPS uint64
}

// Stats is a snapshot of a group's resource use. On v2, memory and pids
// figures read as zero when their controller is not enabled for the group.
type Stats struct {
	// CPUTime is the CPU time used by all tasks of the group, ever.
	CPUTime time.Duration
	// MemoryUsage is the memory charged to the group, page cache included.
	MemoryUsage uint64
	// MemoryLimit is the memory limit; 0 means none.
	MemoryLimit uint64
	// MemoryCache is the page cache part of MemoryUsage (v1 total_cache,
	// v2 file).
	MemoryCache uint64
	// Pids is the number of tasks in the group.
	Pids uint64
	// OOMKills counts the tasks the kernel's OOM killer has killed in the
	// group because of its memory limit.
	OOMKills uint64
}

// Freezer states, as v1's freezer.state spells them.
const (
	frozen   = "FROZEN"
	freezing = "FREEZING"
	thawed   = "THAWED"
)

const (
	cpuPeriod   = 100_000 // µs; the kernel's default CFS period
	minCPUQuota = 1_000   // µs; the kernel rejects smaller quotas
)

// cpuQuota returns the CFS quota in µs per cpuPeriod for a limit of cpus.
func cpuQuota(cpus float64) int64 {
	return int64(math.Round(cpus * cpuPeriod))
}

// cpuMax returns the v2 cpu.max line for a limit of cpus; 0 means no limit.
func cpuMax(cpus float64) string {
	quota := "max"
	if cpus > 0 {
		quota = strconv.FormatInt(cpuQuota(cpus), 10)
	}
	return quota + " " + strconv.Itoa(cpuPeriod)
}

// validName reports whether name can name a group: a clean, relative,
// slash-separated path that stays inside the hierarchy.
func validName(name string) error {
	if name == "" || !filepath.IsLocal(name) || filepath.Clean(name) != name {
		return fmt.Errorf("invalid cgroup name %q: want a clean relative path such as agent-sandbox/<id>", name)
	}
	return nil
}
