package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// Cgroup is one group, on whichever layout the host has. Its fields are set
// when it is made and never change, so its methods may be called from
// several goroutines (though freezing and thawing at once decides nothing).
type Cgroup struct {
	name string
	mode Mode

	// On V2: the group's directory and the library's handle on it.
	dir string
	v2  *cgroup2.Manager

	// On V1 and Hybrid: the group's directory in each controller's hierarchy
	// and the library's handle on them all.
	v1dirs map[cgroup1.Name]string
	v1     cgroup1.Cgroup
}

// layout is a cgroup layout and where it is mounted: the cgroup2 mount point
// on V2, the directory holding the v1 hierarchies otherwise.
type layout struct {
	mode Mode
	root string
}

// Detect returns the cgroup layout of the host, as mounted at Root.
func Detect() (Mode, error) {
	lay, err := detect(Root)
	return lay.mode, err
}

func detect(root string) (layout, error) {
	if typ, err := fsType(root); err != nil {
		return layout{}, fmt.Errorf("detecting cgroup layout: %w", err)
	} else if typ == unix.CGROUP2_SUPER_MAGIC {
		return layout{V2, root}, nil
	}
	if typ, err := fsType(filepath.Join(root, "memory")); err != nil || typ != unix.CGROUP_SUPER_MAGIC {
		return layout{}, fmt.Errorf("detecting cgroup layout: %s is neither a cgroup2 mount nor holds a v1 memory hierarchy", root)
	}
	if typ, err := fsType(filepath.Join(root, "unified")); err == nil && typ == unix.CGROUP2_SUPER_MAGIC {
		return layout{Hybrid, root}, nil
	}
	return layout{V1, root}, nil
}

func fsType(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	return int64(st.Type), nil // Type is not int64 on every arch
}

// Create makes the group name (such as "agent-sandbox/<sandboxID>", relative
// to the hierarchy root) with limits l, and its parents as needed. A name in
// use is an error wrapping ErrExist. If a step fails, whatever Create made of
// the group is removed again; parents are left for the next group.
func Create(name string, l Limits) (*Cgroup, error) {
	lay, err := detect(Root)
	if err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	return create(lay, name, l)
}

func create(lay layout, name string, l Limits) (*Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("creating cgroup: %w", err)
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("creating cgroup %s: %w", name, err)
	}
	if lay.mode == V2 {
		return createV2(lay.root, name, l)
	}
	return createV1(lay, name, l)
}

// Load returns the existing group name, typically to adopt a sandbox after a
// server restart. If the group is gone the error wraps ErrNotExist. On v1 a
// group left in only some hierarchies (a crash half-way through Create or
// Delete) loads with those, so that it can be killed and deleted.
func Load(name string) (*Cgroup, error) {
	lay, err := detect(Root)
	if err != nil {
		return nil, fmt.Errorf("loading cgroup %s: %w", name, err)
	}
	return load(lay, name)
}

func load(lay layout, name string) (*Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("loading cgroup: %w", err)
	}
	if lay.mode == V2 {
		return loadV2(lay.root, name)
	}
	return loadV1(lay, name)
}

// Remove kills every process of group name and deletes the group, for a
// cleanup that knows only the name (the processes' pids may be anyone's by
// now), within 10 s. Removing a group that is not there succeeds.
func Remove(ctx context.Context, name string) error {
	cg, err := Load(name)
	if errors.Is(err, ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = cg.Kill(ctx)
	if errors.Is(err, ErrNotExist) {
		err = nil
	}
	return errors.Join(err, cg.Delete(ctx))
}

// Name returns the group's name relative to the hierarchy root.
func (c *Cgroup) Name() string { return c.name }

// Mode returns the layout the group lives in. On V2 a child can be started
// inside the group with OpenDir; otherwise it must be added with Add.
func (c *Cgroup) Mode() Mode { return c.mode }

// Dirs returns the group's directory in every hierarchy it lives in: one on
// V2, one per controller on V1 and Hybrid. A process joins the group by
// writing its pid to cgroup.procs in each.
func (c *Cgroup) Dirs() []string {
	if c.v2 != nil {
		return []string{c.dir}
	}
	var dirs []string
	for _, d := range c.v1dirs {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	return slices.Compact(dirs)
}

// Controllers returns the v1 controllers whose hierarchies the group lives
// in ("memory", "cpu", ...), sorted; nil on V2, where there is one
// hierarchy. The jail mounts those hierarchies, read-only, in the sandbox.
func (c *Cgroup) Controllers() []string {
	var names []string
	for n := range c.v1dirs {
		names = append(names, string(n))
	}
	slices.Sort(names)
	return names
}

// OpenDir opens the group's directory for clone3's CLONE_INTO_CGROUP, e.g. as
// syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}; the caller
// closes it once the child has started. It needs cgroup v2; on V1 and Hybrid
// the error wraps errors.ErrUnsupported and the child must be added with Add.
func (c *Cgroup) OpenDir() (*os.File, error) {
	if c.v2 == nil {
		return nil, fmt.Errorf("opening cgroup %s for CLONE_INTO_CGROUP: needs cgroup v2, host is %v: %w", c.name, c.mode, errors.ErrUnsupported)
	}
	f, err := os.OpenFile(c.dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, fmt.Errorf("opening cgroup %s: %w", c.name, err)
	}
	return f, nil
}

// Add moves the process pid, with all its threads, into the group.
func (c *Cgroup) Add(pid int) error {
	var err error
	if pid <= 0 {
		err = errors.New("invalid pid")
	} else if c.v2 != nil {
		err = c.v2.AddProc(uint64(pid))
	} else {
		err = c.v1.AddProc(uint64(pid))
	}
	if err != nil {
		return fmt.Errorf("adding pid %d to cgroup %s: %w", pid, c.name, err)
	}
	return nil
}

// Procs returns the processes in the group and its descendants, sorted.
func (c *Cgroup) Procs() ([]int, error) {
	pids, err := c.procs()
	if err != nil {
		return nil, fmt.Errorf("listing processes of cgroup %s: %w", c.name, err)
	}
	return pids, nil
}

func (c *Cgroup) procs() ([]int, error) {
	var pids []int
	if c.v2 != nil {
		ps, err := c.v2.Procs(true)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			pids = append(pids, int(p))
		}
	} else {
		// Every hierarchy, in case a process is in some and not others.
		found := false
		for _, dir := range c.Dirs() {
			ps, err := treeProcs(dir)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			found = true
			pids = append(pids, ps...)
		}
		if !found {
			return nil, ErrNotExist
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

// treeProcs reads cgroup.procs of dir and of every group below it. It
// walks with WalkDir, which takes each entry's type from the directory
// listing: the cgroup library's filepath.Walk lstat'ed each of the dozens
// of control files in every hierarchy, on every kill round (8 % of the
// server's CPU under a burst of create-and-kill).
func treeProcs(dir string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return err
		}
		for f := range strings.FieldsSeq(string(data)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("reading %s: %w", filepath.Join(p, "cgroup.procs"), err)
			}
			pids = append(pids, pid)
		}
		return nil
	})
	return pids, err
}

// Freeze stops every process of the group and waits until the kernel
// reports the group frozen. If ctx ends first, the group is thawed again and
// the error wraps ctx.Err().
func (c *Cgroup) Freeze(ctx context.Context) error {
	if err := c.setFrozen(ctx, true); err != nil {
		_ = c.writeFreeze(false) // don't leave it half-frozen; the error says why
		return fmt.Errorf("freezing cgroup %s: %w", c.name, err)
	}
	return nil
}

// Thaw resumes a frozen group and waits until the kernel reports it thawed.
// (A group whose parent is frozen stays frozen, and Thaw waits for ctx.)
func (c *Cgroup) Thaw(ctx context.Context) error {
	if err := c.setFrozen(ctx, false); err != nil {
		return fmt.Errorf("thawing cgroup %s: %w", c.name, err)
	}
	return nil
}

// Frozen reports whether the group is frozen (fully: a group still freezing
// is not), e.g. to reconcile a sandbox's recorded state after a restart.
func (c *Cgroup) Frozen() (bool, error) {
	st, err := c.freezerState()
	if err != nil {
		return false, fmt.Errorf("reading freezer state of cgroup %s: %w", c.name, err)
	}
	return st == frozen, nil
}

func (c *Cgroup) setFrozen(ctx context.Context, freeze bool) error {
	want := thawed
	if freeze {
		want = frozen
	}
	return poll(ctx, func() (bool, error) {
		// Writing again is how v1 retries tasks that did not freeze; on v2
		// it is harmless.
		if err := c.writeFreeze(freeze); err != nil {
			return false, err
		}
		st, err := c.freezerState()
		return st == want, err
	})
}

// Kill sends SIGKILL to every process of the group and its descendants and
// waits until none is left. A frozen group is thawed, since frozen v1 tasks
// cannot die; processes forked meanwhile are killed too. It uses cgroup.kill
// where the kernel has it (v2, Linux 5.14+), otherwise freezes the group,
// signals each process, thaws, and repeats until the group is empty. If the
// group is gone the error wraps ErrNotExist.
func (c *Cgroup) Kill(ctx context.Context) error {
	if err := poll(ctx, c.killRound); err != nil {
		return fmt.Errorf("killing processes of cgroup %s: %w", c.name, err)
	}
	return nil
}

// Signal sends SIGKILL once to every process of the group, as one round of
// Kill does, without waiting for them to die: for a caller that waits for
// a process whose end implies theirs (a PID namespace's init). If the
// group is gone the error wraps ErrNotExist.
func (c *Cgroup) Signal() error {
	if _, err := c.killRound(); err != nil {
		return fmt.Errorf("killing processes of cgroup %s: %w", c.name, err)
	}
	return nil
}

// killRound signals what is left of the group and reports whether it is empty.
func (c *Cgroup) killRound() (empty bool, err error) {
	if c.v2 != nil {
		ev, err := readKeyed(filepath.Join(c.dir, "cgroup.events"))
		if err != nil {
			return false, err
		}
		if ev["populated"] == 0 {
			return true, nil
		}
		err = writeFile(filepath.Join(c.dir, "cgroup.kill"), "1")
		if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		// Before Linux 5.14: signal each process, as on v1.
	}
	pids, err := c.procs()
	if err != nil || len(pids) == 0 {
		return err == nil, err
	}
	// Freezing (without waiting) keeps most forks from racing the signals;
	// the group is then thawed so that the signals can take effect.
	_ = c.writeFreeze(true)
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return false, fmt.Errorf("signalling pid %d: %w", pid, err)
		}
	}
	if err := c.writeFreeze(false); err != nil && !errors.Is(err, ErrNotExist) {
		return false, err
	}
	return false, nil
}

// Delete removes the group from every hierarchy, and any child groups left
// under it. It fails if processes are left (Kill first). Deleting a group
// that is already gone succeeds.
func (c *Cgroup) Delete(ctx context.Context) error {
	pids, err := c.procs()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting cgroup %s: %w", c.name, err)
	}
	if len(pids) > 0 {
		return fmt.Errorf("deleting cgroup %s: %d processes left, kill them first", c.name, len(pids))
	}
	if err := c.removeDirs(ctx); err != nil {
		return fmt.Errorf("deleting cgroup %s: %w", c.name, err)
	}
	return nil
}

func (c *Cgroup) removeDirs(ctx context.Context) error {
	var errs []error
	for _, d := range c.Dirs() {
		errs = append(errs, removeTree(ctx, d))
	}
	return errors.Join(errs...)
}

// rollback removes what Create made of c, after the step that failed with
// err, and returns err with any trouble removing it.
func (c *Cgroup) rollback(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rerr := c.removeDirs(ctx); rerr != nil {
		return errors.Join(err, fmt.Errorf("removing cgroup %s again: %w", c.name, rerr))
	}
	return err
}

// removeTree removes the cgroup directory dir, children first. A directory
// that is gone counts as removed; one that is busy (its last tasks are still
// leaving) is retried until ctx ends.
func removeTree(ctx context.Context, dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(ctx, filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	var busy error
	err = poll(ctx, func() (bool, error) {
		err := unix.Rmdir(dir)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
			return true, nil
		case errors.Is(err, unix.EBUSY):
			busy = err
			return false, nil
		}
		return false, &fs.PathError{Op: "rmdir", Path: dir, Err: err}
	})
	if err != nil && busy != nil {
		return fmt.Errorf("removing %s: %w (%w)", dir, busy, err)
	}
	return err
}

// LimitIO caps the group's I/O on the block device l names. It is set
// after Create because a sandbox's disk is attached once its init runs.
// On v1 the kernel charges writeback of buffered writes to no group, so
// only direct and synchronous writes are held to the write caps; on v2 the
// page cache's writeback is charged to the group that dirtied it.
func (c *Cgroup) LimitIO(l IOLimit) error {
	var err error
	if c.v2 != nil {
		err = c.limitIOV2(l)
	} else {
		err = c.limitIOV1(l)
	}
	if err != nil {
		return fmt.Errorf("setting the I/O limits of cgroup %s on device %d:%d: %w", c.name, l.Major, l.Minor, err)
	}
	return nil
}

// Stats returns the group's resource use.
func (c *Cgroup) Stats() (Stats, error) {
	var s Stats
	var err error
	if c.v2 != nil {
		s, err = c.statsV2()
	} else {
		s, err = c.statsV1()
	}
	if err != nil {
		return Stats{}, fmt.Errorf("reading stats of cgroup %s: %w", c.name, err)
	}
	return s, nil
}

// poll calls done until it reports true or fails, sleeping between calls
// with a backoff from 1 ms to 20 ms, and gives up with ctx.Err() when ctx
// ends.
func poll(ctx context.Context, done func() (bool, error)) error {
	delay := time.Millisecond
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// writeFile writes s to the existing cgroup file path. (os.WriteFile would
// try to create a missing file, and the kernel would answer EACCES rather
// than ENOENT.)
func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readKeyed(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m, err := parseKeyed(data)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return m, nil
}

func readValue(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := parseValue(data)
	if err != nil {
		return 0, fmt.Errorf("parsing %s: %w", path, err)
	}
	return v, nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
