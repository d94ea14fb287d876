package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// v1Controllers are the hierarchies a group is made in on v1, in order.
// cpuset and blkio are optional: they are used when mounted (and needed
// only for Limits.CPUSet and LimitIO).
var v1Controllers = []struct {
	name     cgroup1.Name
	new      func(root string) cgroup1.Subsystem
	optional bool
}{
	{name: cgroup1.Freezer, new: func(root string) cgroup1.Subsystem { return cgroup1.NewFreezer(root) }},
	{name: cgroup1.Pids, new: func(root string) cgroup1.Subsystem { return cgroup1.NewPids(root) }},
	{name: cgroup1.Memory, new: func(root string) cgroup1.Subsystem { return cgroup1.NewMemory(root) }},
	{name: cgroup1.Cpuacct, new: func(root string) cgroup1.Subsystem { return cgroup1.NewCpuacct(root) }},
	{name: cgroup1.Cpuset, new: func(root string) cgroup1.Subsystem { return cgroup1.NewCpuset(root) }, optional: true},
	{name: cgroup1.Cpu, new: func(root string) cgroup1.Subsystem { return cgroup1.NewCpu(root) }},
	{name: cgroup1.Blkio, new: func(root string) cgroup1.Subsystem { return cgroup1.NewBlkio(root) }, optional: true},
}

// v1Subsystems returns the library's controllers for the v1 hierarchies
// under root, failing if a required one is not mounted.
func v1Subsystems(root string) ([]cgroup1.Subsystem, error) {
	var subs []cgroup1.Subsystem
	for _, ctl := range v1Controllers {
		dir := filepath.Join(root, string(ctl.name))
		if typ, err := fsType(dir); err != nil || typ != unix.CGROUP_SUPER_MAGIC {
			if ctl.optional {
				continue
			}
			return nil, fmt.Errorf("cgroup v1 controller %s is not mounted at %s", ctl.name, dir)
		}
		subs = append(subs, ctl.new(root))
	}
	return subs, nil
}

func createV1(lay layout, name string, l Limits) (_ *Cgroup, err error) {
	subs, err := v1Subsystems(lay.root)
	if err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	c := &Cgroup{name: name, mode: lay.mode, v1dirs: make(map[cgroup1.Name]string)}
	for _, s := range subs {
		dir := filepath.Join(lay.root, string(s.Name()), name)
		if exists(dir) {
			return nil, fmt.Errorf("creating cgroup %s: %s: %w", name, dir, ErrExist)
		}
		c.v1dirs[s.Name()] = dir
	}
	defer func() {
		if err != nil {
			err = c.rollback(err)
		}
	}()

	// The library makes the directories (and copies cpuset.cpus and
	// cpuset.mems down from the parents); the limits follow one at a time
	// so that an error names the one that failed.
	c.v1, err = cgroup1.New(cgroup1.StaticPath("/"+name), &specs.LinuxResources{},
		cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subs, nil }))
	if err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	if l.CPUs > 0 {
		period, quota := uint64(cpuPeriod), cpuQuota(l.CPUs)
		cpu := &specs.LinuxCPU{Period: &period, Quota: &quota}
		if err := c.v1.Update(&specs.LinuxResources{CPU: cpu}); err != nil {
			return nil, fmt.Errorf("setting cpu limit of %s: %w", name, err)
		}
	}
	if l.MemoryBytes > 0 {
		mem := &specs.LinuxMemory{Limit: &l.MemoryBytes}
		if exists(filepath.Join(lay.root, "memory", "memory.memsw.limit_in_bytes")) {
			mem.Swap = &l.MemoryBytes // memory+swap = memory: no swap
		} else {
			var never uint64 // no swap accounting: ask reclaim not to swap
			mem.Swappiness = &never
		}
		if err := c.v1.Update(&specs.LinuxResources{Memory: mem}); err != nil {
			return nil, fmt.Errorf("setting memory limit of %s: %w", name, err)
		}
	}
	if l.Pids > 0 {
		if err := c.v1.Update(&specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &l.Pids}}); err != nil {
			return nil, fmt.Errorf("setting pids limit of %s: %w", name, err)
		}
	}
	if len(l.CPUSet) > 0 {
		if _, err := c.v1dir(cgroup1.Cpuset); err != nil {
			return nil, fmt.Errorf("setting cpu set of %s: %w", name, err)
		}
		if err := c.v1.Update(&specs.LinuxResources{CPU: &specs.LinuxCPU{Cpus: cpuList(l.CPUSet)}}); err != nil {
			return nil, fmt.Errorf("setting cpu set of %s: %w", name, err)
		}
	}
	return c, nil
}

// limitIOV1 writes l to the blkio throttle files. Zero rates are left
// out: writing 0 would remove a rule, and there is none yet.
func (c *Cgroup) limitIOV1(l IOLimit) error {
	if _, err := c.v1dir(cgroup1.Blkio); err != nil {
		return err
	}
	dev := func(rate uint64) []specs.LinuxThrottleDevice {
		if rate == 0 {
			return nil
		}
		d := specs.LinuxThrottleDevice{Rate: rate}
		d.Major, d.Minor = int64(l.Major), int64(l.Minor)
		return []specs.LinuxThrottleDevice{d}
	}
	return c.v1.Update(&specs.LinuxResources{BlockIO: &specs.LinuxBlockIO{
		ThrottleReadBpsDevice:   dev(l.ReadBPS),
		ThrottleWriteBpsDevice:  dev(l.WriteBPS),
		ThrottleReadIOPSDevice:  dev(l.ReadIOPS),
		ThrottleWriteIOPSDevice: dev(l.WriteIOPS),
	}})
}

func loadV1(lay layout, name string) (*Cgroup, error) {
	subs, err := v1Subsystems(lay.root)
	if err != nil {
		return nil, fmt.Errorf("loading cgroup %s: %w", name, err)
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath("/"+name),
		cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subs, nil }))
	if errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return nil, fmt.Errorf("loading cgroup %s: %w", name, ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("loading cgroup %s: %w", name, err)
	}
	c := &Cgroup{name: name, mode: lay.mode, v1: cg, v1dirs: make(map[cgroup1.Name]string)}
	for _, s := range cg.Subsystems() {
		c.v1dirs[s.Name()] = filepath.Join(lay.root, string(s.Name()), name)
	}
	return c, nil
}

// v1dir returns the group's directory in the hierarchy of controller n.
func (c *Cgroup) v1dir(n cgroup1.Name) (string, error) {
	d, ok := c.v1dirs[n]
	if !ok {
		return "", fmt.Errorf("not in the %s hierarchy: %w", n, ErrNotExist)
	}
	return d, nil
}

func (c *Cgroup) statsV1() (Stats, error) {
	var s Stats
	cpuacct, err := c.v1dir(cgroup1.Cpuacct)
	if err != nil {
		return s, err
	}
	mem, err := c.v1dir(cgroup1.Memory)
	if err != nil {
		return s, err
	}
	pids, err := c.v1dir(cgroup1.Pids)
	if err != nil {
		return s, err
	}

	ns, err := readValue(filepath.Join(cpuacct, "cpuacct.usage"))
	if err != nil {
		return s, err
	}
	s.CPUTime = time.Duration(ns)
	if s.MemoryUsage, err = readValue(filepath.Join(mem, "memory.usage_in_bytes")); err != nil {
		return s, err
	}
	if s.MemoryLimit, err = readValue(filepath.Join(mem, "memory.limit_in_bytes")); err != nil {
		return s, err
	}
	s.MemoryLimit = v1Limit(s.MemoryLimit)
	stat, err := readKeyed(filepath.Join(mem, "memory.stat"))
	if err != nil {
		return s, err
	}
	s.MemoryCache = stat["total_cache"] // the group and its descendants
	oom, err := readKeyed(filepath.Join(mem, "memory.oom_control"))
	if err != nil {
		return s, err
	}
	s.OOMKills = oom["oom_kill"]
	if s.Pids, err = readValue(filepath.Join(pids, "pids.current")); err != nil {
		return s, err
	}
	return s, nil
}

// freezerState returns the group's freezer state: frozen, freezing or thawed.
func (c *Cgroup) freezerState() (string, error) {
	if c.v2 != nil {
		return c.freezerStateV2()
	}
	dir, err := c.v1dir(cgroup1.Freezer)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(dir, "freezer.state"))
	if err != nil {
		return "", err
	}
	return parseFreezerState(data)
}

// writeFreeze asks the kernel to freeze or thaw the group, without waiting.
func (c *Cgroup) writeFreeze(freeze bool) error {
	if c.v2 != nil {
		v := "0"
		if freeze {
			v = "1"
		}
		return writeFile(filepath.Join(c.dir, "cgroup.freeze"), v)
	}
	dir, err := c.v1dir(cgroup1.Freezer)
	if err != nil {
		return err
	}
	v := thawed
	if freeze {
		v = frozen
	}
	return writeFile(filepath.Join(dir, "freezer.state"), v)
}
