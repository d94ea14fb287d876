// Package metrics samples the resource use envd reports on GET /metrics:
// CPU, memory and the root filesystem, as the control plane reads them for
// GET /sandboxes/{id}/metrics.
package metrics

// Snapshot is one sample, in the JSON shape of GET /metrics. Sizes are bytes
// unless the name says MiB.
type Snapshot struct {
	Timestamp   int64   `json:"ts"` // unix seconds
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"` // 0–100, over all CPUs
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemCache    uint64  `json:"mem_cache"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	DiskUsed    uint64  `json:"disk_used"`
	DiskTotal   uint64  `json:"disk_total"`
}
