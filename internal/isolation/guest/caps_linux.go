package guest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// keptCaps is the capability bounding set inside a sandbox: Docker's
// default set. Root in the sandbox has these and nothing more, and neither
// does a setuid-root program, so sudo is useful but cannot lead out.
// CAP_MKNOD is harmless because every writable mount is nodev and /dev is
// read-only (there is no device cgroup on every host to rely on).
var keptCaps = []struct {
	nr   uintptr
	name string // as OCI runtime specs name it
}{
	{unix.CAP_CHOWN, "CAP_CHOWN"}, {unix.CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"},
	{unix.CAP_FOWNER, "CAP_FOWNER"}, {unix.CAP_FSETID, "CAP_FSETID"},
	{unix.CAP_KILL, "CAP_KILL"}, {unix.CAP_SETGID, "CAP_SETGID"},
	{unix.CAP_SETUID, "CAP_SETUID"}, {unix.CAP_SETPCAP, "CAP_SETPCAP"},
	{unix.CAP_NET_BIND_SERVICE, "CAP_NET_BIND_SERVICE"}, {unix.CAP_NET_RAW, "CAP_NET_RAW"},
	{unix.CAP_SYS_CHROOT, "CAP_SYS_CHROOT"}, {unix.CAP_MKNOD, "CAP_MKNOD"},
	{unix.CAP_AUDIT_WRITE, "CAP_AUDIT_WRITE"}, {unix.CAP_SETFCAP, "CAP_SETFCAP"},
}

// KeptCapsMask is the capability bounding set inside a sandbox as a bit
// mask, as /proc/<pid>/status shows it (CapBnd).
func KeptCapsMask() uint64 {
	var m uint64
	for _, c := range keptCaps {
		m |= 1 << c.nr
	}
	return m
}

// KeptCapNames is the capability bounding set inside a sandbox by name,
// for a runtime that takes an OCI spec (runsc) to start a sandbox's init
// with no more than that.
func KeptCapNames() []string {
	names := make([]string, len(keptCaps))
	for i, c := range keptCaps {
		names[i] = c.name
	}
	return names
}

// dropCapabilities reduces the calling thread's bounding set to keptCaps
// and clears its inheritable and ambient sets, so that whatever it executes
// (and whatever that executes) can hold no other capability. The thread's
// own effective set is left alone. Capabilities are per thread: the caller
// must have locked its OS thread and fork from it.
func dropCapabilities() error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	keep := KeptCapsMask()
	for c := uintptr(0); c <= last; c++ {
		if keep&(1<<c) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0); err != nil {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	// A kernel without ambient capabilities (EINVAL: gVisor's) has none
	// to clear.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("reading capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clearing inheritable capabilities: %w", err)
	}
	return nil
}

// lastCap is the highest capability the kernel knows: cap_last_cap, or,
// where /proc has no such file (gVisor's), the highest one the bounding
// set can be asked about.
func lastCap() (uintptr, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if errors.Is(err, fs.ErrNotExist) {
		return probeLastCap(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the last capability: %w", err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 8)
	if err != nil || n > 63 {
		return 0, fmt.Errorf("parsing cap_last_cap %q", b)
	}
	return uintptr(n), nil
}

// probeLastCap is the highest capability PR_CAPBSET_READ accepts (it
// refuses one the kernel does not know with EINVAL).
func probeLastCap() uintptr {
	c := uintptr(0)
	for c < 63 {
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c+1, 0, 0, 0); err != nil {
			break
		}
		c++
	}
	return c
}
