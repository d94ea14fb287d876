package jail

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// cpuSets pins each sandbox to CPUCount of the host's CPUs, the ones the
// fewest sandboxes are pinned to. The CFS quota alone bounds CPU time but
// leaves every CPU in a sandbox's affinity mask, so nproc (and
// runtime.NumCPU, os.cpu_count) would show the host's count; a cpu set
// makes them show the sandbox's, and unlike sched_setaffinity the sandbox
// cannot widen it. Spreading by use keeps sandboxes from piling onto the
// first CPUs while others idle.
type cpuSets struct {
	cpus []int // the CPUs the server may use, sorted; never changes

	mu   sync.Mutex
	used map[int]int // guarded by mu: sandboxes pinned to each CPU
}

// newCPUSets returns the sets over the CPUs of the server's own affinity.
func newCPUSets() (*cpuSets, error) {
	var mask unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mask); err != nil {
		return nil, fmt.Errorf("reading the server's CPU affinity: %w", err)
	}
	var cpus []int
	for i := range len(mask) * 64 {
		if mask.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return &cpuSets{cpus: cpus, used: map[int]int{}}, nil
}

// take returns the n least used CPUs, sorted, and counts them used; nil
// (no pinning) when n covers every CPU.
func (s *cpuSets) take(n int) []int {
	if n >= len(s.cpus) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	byUse := slices.Clone(s.cpus)
	slices.SortStableFunc(byUse, func(a, b int) int { return cmp.Compare(s.used[a], s.used[b]) })
	set := byUse[:n]
	slices.Sort(set)
	for _, c := range set {
		s.used[c]++
	}
	return set
}

// reserve counts set used again, for a sandbox adopted after a restart.
func (s *cpuSets) reserve(set []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range set {
		s.used[c]++
	}
}

// release gives back a set that take or reserve counted.
func (s *cpuSets) release(set []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range set {
		if s.used[c]--; s.used[c] <= 0 {
			delete(s.used, c)
		}
	}
}
