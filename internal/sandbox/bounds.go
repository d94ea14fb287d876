package sandbox

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/bytesize"
)

// Host bounds besides the sandbox cap (Config.MaxSandboxes): free disk
// checked at create, and how long a paused sandbox is kept.
//
// Disk images are sparse: a sandbox takes disk as it writes, up to its
// disk size, so the free space a create sees is shared by every sandbox
// still growing. A create therefore needs the reserve plus its own disk
// size free; the reserve is what absorbs the growth of those already
// running.

// ErrNoSpace is returned (wrapped) by Create while the disk that holds
// sandbox images has less free space than Config.DiskReserve plus the new
// sandbox's disk size (507).
var ErrNoSpace = errors.New("not enough free disk")

// DiskReserve is the free space creates leave on the disk of Config.DiskDir:
// Percent of the file system's size when set, else Bytes.
type DiskReserve struct {
	Bytes   uint64
	Percent float64
}

// of returns the reserve on a file system of total bytes.
func (r DiskReserve) of(total uint64) uint64 {
	if r.Percent > 0 {
		return uint64(float64(total) * r.Percent / 100)
	}
	return r.Bytes
}

// ParseDiskReserve reads the --disk-reserve setting: a percentage of the
// file system ("5%", below 100) or a size ("4GiB", see package bytesize).
func ParseDiskReserve(s string) (DiskReserve, error) {
	if p, ok := strings.CutSuffix(s, "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v < 0 || v >= 100 {
			return DiskReserve{}, fmt.Errorf("disk reserve %q: want a percentage from 0 to below 100, or a size such as 4GiB", s)
		}
		return DiskReserve{Percent: v}, nil
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return DiskReserve{}, fmt.Errorf("disk reserve: %w, or a percentage such as 5%%", err)
	}
	return DiskReserve{Bytes: n}, nil
}

// String is the reserve as ParseDiskReserve reads it: "5%" or "4GiB".
func (r DiskReserve) String() string {
	if r.Percent > 0 {
		return strconv.FormatFloat(r.Percent, 'f', -1, 64) + "%"
	}
	return bytesize.Format(r.Bytes)
}

// checkDisk refuses a create of a sandbox with a disk of diskMB while the
// disk of Config.DiskDir is short of the reserve plus that disk.
func (m *Manager) checkDisk(diskMB int) error {
	if m.cfg.DiskDir == "" {
		return nil
	}
	avail, total, err := m.cfg.diskSpace(m.cfg.DiskDir)
	if err != nil {
		return fmt.Errorf("checking the free disk under %s: %w", m.cfg.DiskDir, err)
	}
	reserve := m.cfg.DiskReserve.of(total)
	disk := uint64(diskMB) << 20
	if avail >= reserve+disk {
		return nil
	}
	m.log.Warn("create refused: free disk below the reserve plus the sandbox's disk",
		"dir", m.cfg.DiskDir, "free", bytesize.Format(avail), "reserve", m.cfg.DiskReserve.String(), "disk", bytesize.Format(disk))
	kept := ""
	switch {
	case m.cfg.DiskReserve.Percent > 0:
		kept = fmt.Sprintf(" while the server keeps %s (%s of the disk) free", bytesize.Format(reserve), m.cfg.DiskReserve)
	case reserve > 0:
		kept = fmt.Sprintf(" while the server keeps %s free", bytesize.Format(reserve))
	}
	return &userError{kind: ErrNoSpace, msg: fmt.Sprintf(
		"not enough free disk for a new sandbox: %s free, and a sandbox may write %s%s; "+
			"kill sandboxes you no longer need (paused ones keep their disk) or retry later",
		bytesize.Format(avail), bytesize.Format(disk), kept)}
}

// DefaultPausedRetention is how long a paused sandbox is kept by default
// (Config.PausedRetention): the 30 days E2B's persistence documentation
// gave paused sandboxes. A paused jail sandbox is a frozen cgroup: it
// keeps its memory, its disk and a sandbox slot.
const DefaultPausedRetention = 30 * 24 * time.Hour

// pausedTooLong is the reason recorded for a sandbox killed after
// Config.PausedRetention paused.
func pausedTooLong(retention time.Duration) string {
	return "paused for longer than the retention of " + formatRetention(retention)
}

// formatRetention writes whole days as days, anything else as Go does
// without trailing zero units ("1h", "1h30m").
func formatRetention(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == day:
		return "1 day"
	case d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + " days"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
