package sandbox

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Maxima are the most a template may give each of its sandboxes (the
// operator's serve --max-* flags). A zero field is no maximum.
type Maxima struct {
	CPUCount int
	MemoryMB int
	DiskIO   isolation.DiskIO
}

// Check returns an error wrapping ErrInvalid that names the first of the
// settings above m, and the flag that raises it; nil when none is.
// Nothing is ever lowered to fit.
func (m Maxima) Check(cpuCount, memoryMB int, io isolation.DiskIO) error {
	for _, f := range []struct {
		name, flag string
		v, max     uint64
	}{
		{"cpuCount", "--max-cpu-count", uint64(cpuCount), uint64(m.CPUCount)},
		{"memoryMB", "--max-memory-mb", uint64(memoryMB), uint64(m.MemoryMB)},
		{"diskIO.readMiBps", "--max-disk-io read", io.ReadBytesPerSec >> 20, m.DiskIO.ReadBytesPerSec >> 20},
		{"diskIO.writeMiBps", "--max-disk-io write", io.WriteBytesPerSec >> 20, m.DiskIO.WriteBytesPerSec >> 20},
		{"diskIO.readIOPS", "--max-disk-io read-iops", io.ReadIOPS, m.DiskIO.ReadIOPS},
		{"diskIO.writeIOPS", "--max-disk-io write-iops", io.WriteIOPS, m.DiskIO.WriteIOPS},
	} {
		if f.max > 0 && f.v > f.max {
			return invalid("%s %d is more than this server allows: at most %d (serve %s)", f.name, f.v, f.max, f.flag)
		}
	}
	return nil
}

// templateDiskIO converts a template's disk I/O setting.
func templateDiskIO(d template.DiskIO) isolation.DiskIO {
	return isolation.DiskIO{
		ReadBytesPerSec: uint64(d.ReadMiBps) << 20, WriteBytesPerSec: uint64(d.WriteMiBps) << 20,
		ReadIOPS: uint64(d.ReadIOPS), WriteIOPS: uint64(d.WriteIOPS),
	}
}

// resources returns what each sandbox of tmpl gets: the template's
// settings where it has them (E2B: cpuCount and memoryMB are the
// template's), the operator's defaults elsewhere. A template above a
// maximum is refused with the limit named.
func (m *Manager) resources(tmpl *template.Template) (isolation.Resources, error) {
	spec := tmpl.Spec
	io := templateDiskIO(spec.DiskIO)
	if err := m.cfg.Max.Check(spec.CPUCount, spec.MemoryMB, io); err != nil {
		return isolation.Resources{}, fmt.Errorf("template %s: %w", tmpl.Name, err)
	}
	def := m.cfg.DefaultDiskIO
	res := isolation.Resources{
		CPUCount:   cmp.Or(spec.CPUCount, m.cfg.DefaultCPU),
		MemoryMB:   cmp.Or(spec.MemoryMB, m.cfg.DefaultMemory),
		DiskSizeMB: m.cfg.DefaultDisk,
		DiskIO: isolation.DiskIO{
			ReadBytesPerSec:  cmp.Or(io.ReadBytesPerSec, def.ReadBytesPerSec),
			WriteBytesPerSec: cmp.Or(io.WriteBytesPerSec, def.WriteBytesPerSec),
			ReadIOPS:         cmp.Or(io.ReadIOPS, def.ReadIOPS),
			WriteIOPS:        cmp.Or(io.WriteIOPS, def.WriteIOPS),
		},
	}
	return res, nil
}

// diskIOKeys are the keys of ParseDiskIO, in FormatDiskIO's order.
var diskIOKeys = []string{"read", "write", "read-iops", "write-iops"}

// ParseDiskIO parses a disk I/O quota as serve's --disk-io takes it:
// comma-separated read=MIB, write=MIB (MiB/s), read-iops=N, write-iops=N;
// a key left out is no cap, and "none" caps nothing.
func ParseDiskIO(s string) (isolation.DiskIO, error) {
	var d isolation.DiskIO
	if s = strings.TrimSpace(s); s == "" || s == "none" {
		return d, nil
	}
	fields := []*uint64{&d.ReadBytesPerSec, &d.WriteBytesPerSec, &d.ReadIOPS, &d.WriteIOPS}
	for item := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(item), "=")
		i := slices.Index(diskIOKeys, k)
		if i < 0 {
			return isolation.DiskIO{}, fmt.Errorf("disk I/O %q: want %s=N, comma-separated", item, strings.Join(diskIOKeys, "|"))
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return isolation.DiskIO{}, fmt.Errorf("disk I/O %q: %q is not a count", item, v)
		}
		if i < 2 {
			n <<= 20 // MiB/s
		}
		*fields[i] = n
	}
	return d, nil
}

// FormatDiskIO is the inverse of ParseDiskIO.
func FormatDiskIO(d isolation.DiskIO) string {
	var items []string
	for i, v := range []uint64{d.ReadBytesPerSec >> 20, d.WriteBytesPerSec >> 20, d.ReadIOPS, d.WriteIOPS} {
		if v > 0 {
			items = append(items, fmt.Sprintf("%s=%d", diskIOKeys[i], v))
		}
	}
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, ",")
}
