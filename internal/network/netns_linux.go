package network

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Namespace is a named network namespace persisted by a bind mount. Its
// fields never change, so its methods may be called concurrently.
type Namespace struct {
	name string
	path string
}

// Dir returns the directory holding the namespaces' bind mounts under runDir.
func Dir(runDir string) string { return filepath.Join(runDir, "netns") }

// Create makes the network namespace name with its loopback interface up
// and pins it at Dir(runDir)/name. A name in use is an error wrapping
// fs.ErrExist. On error nothing is left behind.
func Create(runDir, name string) (*Namespace, error) {
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("creating network namespace: %w", err)
	}
	dir := Dir(runDir)
	if err := sharedDir(dir); err != nil {
		return nil, fmt.Errorf("creating network namespace %s: %w", name, err)
	}
	ns := &Namespace{name: name, path: filepath.Join(dir, name)}
	f, err := os.OpenFile(ns.path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return nil, fmt.Errorf("creating network namespace %s: %w", name, err)
	}
	f.Close()
	err = onNewThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, ns.path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mounting %s: %w", src, err)
		}
		return setLoopbackUp()
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("creating network namespace %s: %w", name, err), ns.Delete())
	}
	return ns, nil
}

// Open returns the existing namespace name under runDir, e.g. to adopt a
// sandbox after a server restart. If it is gone the error wraps
// fs.ErrNotExist.
func Open(runDir, name string) (*Namespace, error) {
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("opening network namespace: %w", err)
	}
	ns := &Namespace{name: name, path: filepath.Join(Dir(runDir), name)}
	if ok, err := isNsfs(ns.path); err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", name, err)
	} else if !ok {
		return nil, fmt.Errorf("opening network namespace %s: %s is not a namespace mount: %w", name, ns.path, fs.ErrNotExist)
	}
	return ns, nil
}

// List returns the names of the namespaces pinned under runDir.
func List(runDir string) ([]string, error) {
	entries, err := os.ReadDir(Dir(runDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing network namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// Name returns the namespace's name.
func (ns *Namespace) Name() string { return ns.name }

// Path returns the namespace's bind mount, which can be opened and passed to
// setns(2) or netlink.LinkSetNsFd.
func (ns *Namespace) Path() string { return ns.path }

// Do runs fn on a locked OS thread inside the namespace and returns its
// error. Goroutines that fn starts run outside. If the thread cannot be
// returned to its original namespace afterwards, it is never unlocked, so
// that the runtime discards it rather than reuse it.
func (ns *Namespace) Do(fn func() error) error {
	return onNewThread(func() error {
		fd, err := unix.Open(ns.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("entering network namespace %s: %w", ns.name, &fs.PathError{Op: "open", Path: ns.path, Err: err})
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering network namespace %s: setns: %w", ns.name, err)
		}
		return fn()
	})
}

// Dial connects to addr (a literal IP address and port; names would be
// resolved outside) from inside the namespace.
func (ns *Namespace) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := ns.Do(func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// Delete unmounts and removes the namespace's bind mount. The namespace
// itself goes away when no process or open descriptor uses it any more.
// Deleting a namespace that is gone succeeds.
func (ns *Namespace) Delete() error {
	err := unix.Unmount(ns.path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("deleting network namespace %s: unmounting: %w", ns.name, err)
	}
	if err := os.Remove(ns.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting network namespace %s: %w", ns.name, err)
	}
	return nil
}

// Remove deletes the namespace name under runDir like Delete, and also the
// file a Create that stopped half-way left without its mount. Removing a
// namespace that is gone succeeds.
func Remove(runDir, name string) error {
	if err := validName(name); err != nil {
		return fmt.Errorf("deleting network namespace: %w", err)
	}
	ns := &Namespace{name: name, path: filepath.Join(Dir(runDir), name)}
	return ns.Delete()
}

// onNewThread runs fn on a locked OS thread of its own, which fn may move
// into another network namespace (setns or unshare), and puts the thread
// back into the namespace it started in afterwards.
func onNewThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("opening current network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			// Stay locked: the thread dies with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("restoring network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func setLoopbackUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("finding lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("setting lo up: %w", err)
	}
	return nil
}

// sharedDir makes dir exist as a mount point with shared propagation.
func sharedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("making %s shared: %w", dir, err)
	}
	// Not a mount point yet: bind it onto itself first.
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s onto itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making %s shared: %w", dir, err)
	}
	return nil
}

func isNsfs(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	return st.Type == unix.NSFS_MAGIC, nil
}

func validName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 200 {
		return fmt.Errorf("invalid name %q", name)
	}
	for _, r := range name {
		if r == '/' || r == 0 {
			return fmt.Errorf("invalid name %q", name)
		}
	}
	return nil
}
