package api

import (
	"net/http"
)

// hostView is the answer of GET /dashboard/api/host.
type hostView struct {
	// States counts the live sandboxes by state ("running", "paused").
	States  map[string]int `json:"states"`
	Pending int            `json:"pending"`
	// MaxSandboxes is the server's cap (0: none).
	MaxSandboxes int `json:"maxSandboxes"`
	CPUs         int `json:"cpus"`
	HostCPUs     int `json:"hostCpus"`
	// Disk is the file system of the sandboxes' disks; absent when the
	// server checks none.
	Disk               *hostDiskView       `json:"disk,omitempty"`
	DefaultBackend     string              `json:"defaultBackend"`
	Backends           []string            `json:"backends"`
	SandboxesByBackend map[string]int      `json:"sandboxesByBackend"`
	Pools              map[string]poolView `json:"pools"`
}

// poolView is the warm pool of one template.
type poolView struct {
	Ready   int `json:"ready"`
	Filling int `json:"filling"`
	Target  int `json:"target"`
}

type hostDiskView struct {
	Dir     string `json:"dir"`
	Free    uint64 `json:"free"`
	Total   uint64 `json:"total"`
	Reserve uint64 `json:"reserve"`
	// ReserveSetting is --disk-reserve as given: "5%" or "4GiB".
	ReserveSetting string `json:"reserveSetting"`
}

// host implements GET /dashboard/api/host: the sandboxes by state, the
// capacity they use against the host's bounds and the backends.
func (h *Handler) host(w http.ResponseWriter, r *http.Request) {
	st, err := h.sandboxes.Host()
	if err != nil {
		h.fail(w, r, "", err)
		return
	}
	out := hostView{
		States: map[string]int{}, Pending: st.Pending, MaxSandboxes: st.MaxSandboxes, CPUs: st.CPUs, HostCPUs: st.HostCPUs,
		DefaultBackend: st.DefaultBackend, Backends: st.Backends, SandboxesByBackend: st.SandboxesByBackend,
		Pools: make(map[string]poolView, len(st.Pools)),
	}
	for name, p := range st.Pools {
		out.Pools[name] = poolView{Ready: p.Ready, Filling: p.Filling, Target: p.Target}
	}
	for s, n := range st.States {
		out.States[string(s)] = n
	}
	if st.DiskDir != "" {
		out.Disk = &hostDiskView{Dir: st.DiskDir, Free: st.DiskFree, Total: st.DiskTotal, Reserve: st.DiskReserve, ReserveSetting: st.DiskReserveSetting}
	}
	writeJSON(w, http.StatusOK, out)
}
