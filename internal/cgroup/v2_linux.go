package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
)

func createV2(root, name string, l Limits) (_ *Cgroup, err error) {
	dir := filepath.Join(root, name)
	if exists(dir) {
		return nil, fmt.Errorf("creating cgroup %s: %s: %w", name, dir, ErrExist)
	}
	res, err := v2Controllers(root, l)
	if err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	// The library makes the directory and enables the controllers in
	// cgroup.subtree_control of every ancestor; the limits follow one at a
	// time so that an error names the one that failed.
	m, err := cgroup2.NewManager(root, "/"+name, res)
	if err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	c := &Cgroup{name: name, mode: V2, dir: dir, v2: m}
	defer func() {
		if err != nil {
			err = c.rollback(err)
		}
	}()
	if l.CPUs > 0 {
		cpu := &cgroup2.CPU{Max: cgroup2.CPUMax(cpuMax(l.CPUs))}
		if err := m.Update(&cgroup2.Resources{CPU: cpu}); err != nil {
			return nil, fmt.Errorf("setting cpu limit of %s: %w", name, err)
		}
	}
	if l.MemoryBytes > 0 {
		mem := &cgroup2.Memory{Max: &l.MemoryBytes}
		if exists(filepath.Join(dir, "memory.swap.max")) { // absent without swap accounting
			var none int64
			mem.Swap = &none
		}
		if err := m.Update(&cgroup2.Resources{Memory: mem}); err != nil {
			return nil, fmt.Errorf("setting memory limit of %s: %w", name, err)
		}
	}
	if l.Pids > 0 {
		if err := m.Update(&cgroup2.Resources{Pids: &cgroup2.Pids{Max: l.Pids}}); err != nil {
			return nil, fmt.Errorf("setting pids limit of %s: %w", name, err)
		}
	}
	if len(l.CPUSet) > 0 {
		// The library enables cpuset only for a CPU with Cpus set at
		// creation; enable it here so that the error names the step.
		if err := m.ToggleControllers([]string{"cpuset"}, cgroup2.Enable); err != nil {
			return nil, fmt.Errorf("enabling the cpuset controller for %s: %w", name, err)
		}
		if err := m.Update(&cgroup2.Resources{CPU: &cgroup2.CPU{Cpus: cpuList(l.CPUSet)}}); err != nil {
			return nil, fmt.Errorf("setting cpu set of %s: %w", name, err)
		}
	}
	return c, nil
}

// limitIOV2 writes l to io.max, one key at a time (the kernel keeps the
// keys not written). Zero rates are left out, which leaves them at max.
func (c *Cgroup) limitIOV2(l IOLimit) error {
	if !exists(filepath.Join(c.dir, "io.max")) {
		return fmt.Errorf("the io controller is not enabled for the group (not in %s/cgroup.controllers?)", filepath.Dir(c.dir))
	}
	var max []cgroup2.Entry
	for _, e := range []struct {
		typ  cgroup2.IOType
		rate uint64
	}{
		{cgroup2.ReadBPS, l.ReadBPS}, {cgroup2.WriteBPS, l.WriteBPS},
		{cgroup2.ReadIOPS, l.ReadIOPS}, {cgroup2.WriteIOPS, l.WriteIOPS},
	} {
		if e.rate > 0 {
			max = append(max, cgroup2.Entry{Type: e.typ, Major: int64(l.Major), Minor: int64(l.Minor), Rate: e.rate})
		}
	}
	return c.v2.Update(&cgroup2.Resources{IO: &cgroup2.IO{Max: max}})
}

// v2Controllers returns the (empty) resources whose controllers a new group
// gets: cpu, memory, pids and io, each when the hierarchy offers it. A
// limit on a controller it does not offer is an error (io's limits come
// later, from LimitIO, which reports its absence).
func v2Controllers(root string, l Limits) (*cgroup2.Resources, error) {
	data, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("reading available controllers: %w", err)
	}
	have := strings.Fields(string(data))
	var res cgroup2.Resources
	for _, ctl := range []struct {
		name    string
		limited bool
		enable  func()
	}{
		{"cpu", l.CPUs > 0, func() { res.CPU = &cgroup2.CPU{} }},
		{"memory", l.MemoryBytes > 0, func() { res.Memory = &cgroup2.Memory{} }},
		{"pids", l.Pids > 0, func() { res.Pids = &cgroup2.Pids{} }},
		{"io", false, func() { res.IO = &cgroup2.IO{} }},
		{"cpuset", len(l.CPUSet) > 0, func() {}}, // enabled by createV2 when needed
	} {
		switch {
		case slices.Contains(have, ctl.name):
			ctl.enable()
		case ctl.limited:
			return nil, fmt.Errorf("cgroup v2 controller %s is not available at %s", ctl.name, root)
		}
	}
	return &res, nil
}

func loadV2(root, name string) (*Cgroup, error) {
	dir := filepath.Join(root, name)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return nil, fmt.Errorf("loading cgroup %s: %w", name, err)
	}
	m, err := cgroup2.Load("/"+name, cgroup2.WithMountpoint(root))
	if err != nil {
		return nil, fmt.Errorf("loading cgroup %s: %w", name, err)
	}
	return &Cgroup{name: name, mode: V2, dir: dir, v2: m}, nil
}

func (c *Cgroup) statsV2() (Stats, error) {
	var s Stats
	cpu, err := readKeyed(filepath.Join(c.dir, "cpu.stat")) // always there
	if err != nil {
		return s, err
	}
	s.CPUTime = time.Duration(cpu["usage_usec"]) * time.Microsecond
	// The rest is there only when the controller is enabled.
	for _, f := range []struct {
		file string
		v    *uint64
	}{
		{"memory.current", &s.MemoryUsage},
		{"memory.max", &s.MemoryLimit},
		{"pids.current", &s.Pids},
	} {
		v, err := readValue(filepath.Join(c.dir, f.file))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return s, err
		}
		*f.v = v
	}
	for _, f := range []struct {
		file, key string
		v         *uint64
	}{
		{"memory.stat", "file", &s.MemoryCache},
		{"memory.events", "oom_kill", &s.OOMKills}, // hierarchical
	} {
		m, err := readKeyed(filepath.Join(c.dir, f.file))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return s, err
		}
		*f.v = m[f.key]
	}
	return s, nil
}

func (c *Cgroup) freezerStateV2() (string, error) {
	ev, err := readKeyed(filepath.Join(c.dir, "cgroup.events"))
	if err != nil {
		return "", err
	}
	if ev["frozen"] == 1 {
		return frozen, nil
	}
	want, err := readValue(filepath.Join(c.dir, "cgroup.freeze"))
	if err != nil {
		return "", err
	}
	if want == 1 {
		return freezing, nil
	}
	return thawed, nil
}
