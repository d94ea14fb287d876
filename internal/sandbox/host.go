package sandbox

import (
	"fmt"
	"runtime"
	"slices"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// HostStatus is what the host runs, against its bounds.
type HostStatus struct {
	// States counts the live sandboxes by state; Pending the slots that
	// creates in flight and warm pool members hold.
	States  map[store.State]int
	Pending int
	// MaxSandboxes is Config.MaxSandboxes (0: no cap).
	MaxSandboxes int
	// CPUs is the vCPUs the running sandboxes have, HostCPUs the
	// host's.
	CPUs, HostCPUs int
	// Disk is the file system of Config.DiskDir; zero without one.
	DiskDir             string
	DiskFree, DiskTotal uint64
	DiskReserve         uint64
	DiskReserveSetting  string
	DefaultBackend      string
	Backends            []string // every backend this server manages, sorted
	SandboxesByBackend  map[string]int
	Pools               map[string]PoolStatus
}

// Host reports the host's sandboxes against its bounds.
func (m *Manager) Host() (HostStatus, error) {
	h := HostStatus{
		States:             map[store.State]int{},
		MaxSandboxes:       m.cfg.MaxSandboxes,
		HostCPUs:           runtime.NumCPU(),
		DefaultBackend:     m.cfg.Backend.Name(),
		SandboxesByBackend: map[string]int{},
		Pools:              m.Pools(),
	}
	for name := range m.backends {
		h.Backends = append(h.Backends, name)
	}
	slices.Sort(h.Backends)
	m.mu.Lock()
	h.Pending = m.pending
	live := make([]*sandbox, 0, len(m.sandboxes))
	for _, sb := range m.sandboxes {
		live = append(live, sb)
	}
	m.mu.Unlock()
	for _, sb := range live {
		sb.mu.Lock()
		state := sb.state
		sb.mu.Unlock()
		h.States[state]++
		h.SandboxesByBackend[sb.backend.Name()]++
		if state == store.StateRunning {
			h.CPUs += sb.cpus
		}
	}
	if m.cfg.DiskDir != "" {
		avail, total, err := m.cfg.diskSpace(m.cfg.DiskDir)
		if err != nil {
			return HostStatus{}, fmt.Errorf("checking the free disk under %s: %w", m.cfg.DiskDir, err)
		}
		h.DiskDir, h.DiskFree, h.DiskTotal = m.cfg.DiskDir, avail, total
		h.DiskReserve, h.DiskReserveSetting = m.cfg.DiskReserve.of(total), m.cfg.DiskReserve.String()
	}
	return h, nil
}
