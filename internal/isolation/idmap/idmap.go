// Package idmap hands out host uid/gid ranges for sandboxes' user
// namespaces: each sandbox maps its ids 0..Size-1 onto its own range of
// Size host ids, so root in one sandbox is an unprivileged host user that
// owns nothing outside it, and no two sandboxes share an id.
//
// A range is reserved by a file in a host-wide directory (on tmpfs, like
// /run: ranges matter only while their processes live), created with
// O_EXCL and naming the sandbox, so concurrent servers on one host never
// hand out the same range, and a restarted server keeps its sandboxes'
// ranges. Ranges listed in /etc/subuid or /etc/subgid (other runtimes'
// and users' delegated ids) and ranges some live process's user namespace
// already maps are skipped.
package idmap

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Size is how many ids a sandbox's user namespace maps: 0..65535, every id
// a Linux distribution uses, including nobody (65534).
const Size = 65536

// DefaultBase is the first host id of the first range.
const DefaultBase = 100000

// Files a host's id delegations are read from.
var (
	subuidFile = "/etc/subuid"
	subgidFile = "/etc/subgid"
)

// span is a range of host ids [start, start+count).
type span struct{ start, count uint64 }

func (s span) overlaps(o span) bool {
	return s.start < o.start+o.count && o.start < s.start+s.count
}

// Allocator reserves ranges of Size host ids starting at base, base+Size,
// and so on.
type Allocator struct {
	dir  string
	base uint32
	mu   sync.Mutex // serialises this process's reservations; files do it across processes
}

// CheckBase reports whether base can start the ranges: below Size they
// would map onto the host's own users and system accounts (root included),
// and the first range must fit below the invalid id 2^32-1.
func CheckBase(base uint32) error {
	if base < Size || base > maxBase {
		return fmt.Errorf("uid range base %d: want %d to %d, above the host's own users", base, Size, maxBase)
	}
	return nil
}

// NewAllocator returns an allocator reserving in dir, which it creates,
// from base (see CheckBase).
func NewAllocator(dir string, base uint32) (*Allocator, error) {
	if err := CheckBase(base); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the uid range directory: %w", err)
	}
	return &Allocator{dir: dir, base: base}, nil
}

// maxBase is the last base whose range ends below 2^32-1, which the kernel
// reserves as the invalid id.
const maxBase = math.MaxUint32 - Size

// Allocate reserves the lowest free range for the sandbox id and returns
// its first host id.
func (a *Allocator) Allocate(id string) (uint32, error) {
	// Outside the lock: the scan of every process is the slow part, and a
	// range reserved meanwhile is found by its file.
	avoid, err := delegated()
	if err != nil {
		return 0, err
	}
	avoid = append(avoid, liveMappings()...)
	a.mu.Lock()
	defer a.mu.Unlock()
	for b := uint64(a.base); b <= maxBase; b += Size {
		r := span{b, Size}
		if overlapsAny(r, avoid) {
			continue
		}
		err := a.create(uint32(b), id)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		return uint32(b), nil
	}
	return 0, errors.New("no free uid range left")
}

// Reserve records that the sandbox id holds the range at base, as after a
// restart, when it already runs with it. It fails when another sandbox
// holds that range.
func (a *Allocator) Reserve(id string, base uint32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.create(base, id)
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	b, rerr := os.ReadFile(a.file(base))
	if rerr != nil {
		return fmt.Errorf("reading the reservation of uid range %d: %w", base, rerr)
	}
	if holder := string(b); holder != id {
		return fmt.Errorf("uid range %d is reserved by sandbox %s", base, holder)
	}
	return nil
}

// Release frees whatever range the sandbox id holds. Releasing nothing is
// not an error.
func (a *Allocator) Release(id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	entries, err := os.ReadDir(a.dir)
	if err != nil {
		return fmt.Errorf("releasing the uid range of %s: %w", id, err)
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(a.dir, e.Name())
		if b, err := os.ReadFile(p); err == nil && string(b) == id {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("releasing the uid range of %s: %w", id, err)
	}
	return nil
}

func (a *Allocator) file(base uint32) string {
	return filepath.Join(a.dir, strconv.FormatUint(uint64(base), 10))
}

// create makes the reservation file of base, holding id; fs.ErrExist when
// the range is taken. The content is written to a temporary file first and
// linked into place, so a reader never sees a reservation without its
// holder.
func (a *Allocator) create(base uint32, id string) error {
	tmp, err := os.CreateTemp(a.dir, ".new-*")
	if err != nil {
		return fmt.Errorf("reserving uid range %d: %w", base, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(id)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), a.file(base))
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("reserving uid range %d: %w", base, err)
	}
	return err
}

func overlapsAny(r span, spans []span) bool {
	for _, s := range spans {
		if r.overlaps(s) {
			return true
		}
	}
	return false
}

// delegated returns the host id ranges in /etc/subuid and /etc/subgid.
func delegated() ([]span, error) {
	var out []span
	for _, f := range []string{subuidFile, subgidFile} {
		spans, err := readSubid(f)
		if err != nil {
			return nil, err
		}
		out = append(out, spans...)
	}
	return out, nil
}

// readSubid parses a subuid(5)-style file: "name:start:count" lines. A
// missing file delegates nothing; a line that does not parse is skipped,
// as shadow-utils does.
func readSubid(path string) ([]span, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	var out []span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(fields) != 3 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		start, err1 := strconv.ParseUint(fields[1], 10, 32)
		count, err2 := strconv.ParseUint(fields[2], 10, 32)
		if err1 == nil && err2 == nil && count > 0 {
			out = append(out, span{start, count})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}

// liveMappings returns the host ranges that running processes' user
// namespaces map (uid_map and gid_map), other than the initial namespace's
// identity map: ranges other runtimes, other servers and surviving
// sandboxes use. Processes that end while being read are skipped.
func liveMappings() []span {
	procs, _ := os.ReadDir("/proc")
	seen := map[string]bool{} // one process per namespace: "user:[inode]"
	var out []span
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		ns, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns/user"))
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		for _, m := range []string{"uid_map", "gid_map"} {
			b, err := os.ReadFile(filepath.Join("/proc", p.Name(), m))
			if err == nil {
				out = append(out, parseMap(string(b))...)
			}
		}
	}
	return out
}

// parseMap parses a uid_map or gid_map ("inside outside count" lines) into
// the host ranges it covers, leaving out the initial namespace's identity
// map.
func parseMap(s string) []span {
	var out []span
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		outside, err1 := strconv.ParseUint(f[1], 10, 32)
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || count == 0 || (f[0] == "0" && outside == 0 && count == math.MaxUint32) {
			continue
		}
		out = append(out, span{outside, count})
	}
	return out
}
