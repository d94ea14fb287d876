package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
)

// watchRequest is what WatchDir and CreateWatcher requests have in common.
type watchRequest struct {
	path               string
	recursive          bool
	includeEntry       bool
	allowNetworkMounts bool
}

// watch checks a watch request for the user in h and starts its watcher.
func (s *Service) watch(h http.Header, req watchRequest) (*watcher, error) {
	u, path, err := s.userPath(h, req.path)
	if err != nil {
		return nil, err
	}
	var w *watcher
	err = u.As(func() (err error) { w, err = s.startWatch(u, path, req); return err })
	return w, err
}

// startWatch checks path and starts its watcher for u.
func (s *Service) startWatch(u *identity.User, path string, req watchRequest) (*watcher, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, pathError("stat of watched directory", path, err)
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path '%s' is not a directory", path))
	}
	if !req.allowNetworkMounts {
		kind, err := networkFilesystem(path)
		if err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return nil, pathError("checking the filesystem of", path, err)
		}
		if kind != "" {
			return nil, connect.NewError(connect.CodeFailedPrecondition,
				fmt.Errorf("path '%s' is on a %s filesystem, where watches miss remote changes; set allow_network_mounts to watch it anyway", path, kind))
		}
	}
	w, err := newWatcher(path, u, req.recursive, req.includeEntry, s.entries, s.log)
	if err != nil {
		return nil, pathError("watching", path, err)
	}
	return w, nil
}

// watcher turns the fsnotify events under one directory into
// FilesystemEvents on a channel. A recursive watcher also watches every
// subdirectory, including ones created after it started. It runs one
// goroutine, from newWatcher until Close. What it adds and stats it does
// as user, who must be allowed to.
type watcher struct {
	root         string
	user         *identity.User
	recursive    bool
	includeEntry bool
	entries      *entries
	log          *slog.Logger
	fsw          *fsnotify.Watcher

	events    chan *pb.FilesystemEvent // closed when run returns
	done      chan struct{}            // closed by Close
	stopped   chan struct{}            // closed when run returns
	closeOnce sync.Once
	closeErr  error

	// Used only by newWatcher, then by the run goroutine.
	dirs  map[string]struct{} // subdirectories a recursive watcher added
	moved map[string]struct{} // watched subdirectories renamed away; see handle
}

// newWatcher starts watching root, an existing directory, for u. It is
// called as u.
func newWatcher(root string, u *identity.User, recursive, includeEntry bool, ents *entries, log *slog.Logger) (*watcher, error) {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("creating inotify watcher: %w", err)
	}
	if err := fsw.Add(root); err != nil {
		fsw.Close()
		return nil, err
	}
	w := &watcher{
		root:         root,
		user:         u,
		recursive:    recursive,
		includeEntry: includeEntry,
		entries:      ents,
		log:          log.With("watched", root),
		fsw:          fsw,
		events:       make(chan *pb.FilesystemEvent, 64),
		done:         make(chan struct{}),
		stopped:      make(chan struct{}),
		dirs:         map[string]struct{}{},
		moved:        map[string]struct{}{},
	}
	if recursive {
		// The root may be a symlink; walk its target, but name what is
		// below it by the path as requested.
		target, err := filepath.EvalSymlinks(root)
		if err != nil {
			fsw.Close()
			return nil, err
		}
		w.addTree(root, target)
	}
	go w.run()
	return w, nil
}

// Events returns the watcher's events. The channel is closed after Close.
func (w *watcher) Events() <-chan *pb.FilesystemEvent { return w.events }

// Close stops the watcher and waits for its goroutine to end.
func (w *watcher) Close() error {
	w.closeOnce.Do(func() {
		close(w.done)
		<-w.stopped
		w.closeErr = w.fsw.Close()
	})
	return w.closeErr
}

func (w *watcher) run() {
	defer close(w.stopped)
	defer close(w.events)
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			var evs []*pb.FilesystemEvent
			_ = w.user.As(func() error { evs = w.handle(ev); return nil })
			for _, fe := range evs {
				select {
				case w.events <- fe:
				case <-w.done:
					return
				}
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			// Overflow and the like lose events but leave the watch working.
			w.log.Warn("watching directory", "error", err)
		}
	}
}

// handle keeps a recursive watcher's set of watched directories current and
// returns the wire events for ev. Watches for a new directory are added
// before its CREATE event is returned, so a client that reacts to the event
// sees what happens inside the directory from then on.
func (w *watcher) handle(ev fsnotify.Event) []*pb.FilesystemEvent {
	if w.recursive {
		if ev.Has(fsnotify.Create) {
			delete(w.moved, ev.Name)
			w.addTree(ev.Name, ev.Name)
		}
		if ev.Has(fsnotify.Rename) || ev.Has(fsnotify.Remove) {
			// A renamed subdirectory is reported twice by fsnotify: by its
			// parent, then by its own watch (IN_MOVE_SELF). Drop the echo.
			if _, ok := w.moved[ev.Name]; ok && ev.Op == fsnotify.Rename {
				delete(w.moved, ev.Name)
				return nil
			}
			if _, ok := w.dirs[ev.Name]; ok {
				w.forget(ev.Name)
				if ev.Has(fsnotify.Rename) {
					w.moved[ev.Name] = struct{}{}
				}
			}
		}
	}
	return w.toEvents(ev)
}

// eventTypes maps fsnotify ops to wire event types, in the order in which one
// fsnotify event carrying several ops is split into wire events.
var eventTypes = []struct {
	op  fsnotify.Op
	typ pb.EventType
}{
	{fsnotify.Create, pb.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Write, pb.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, pb.EventType_EVENT_TYPE_REMOVE},
	{fsnotify.Rename, pb.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, pb.EventType_EVENT_TYPE_CHMOD},
}

// toEvents returns one wire event per op in ev, named relative to the
// watched directory.
func (w *watcher) toEvents(ev fsnotify.Event) []*pb.FilesystemEvent {
	name, err := filepath.Rel(w.root, ev.Name)
	if err != nil {
		name = ev.Name
	}
	var (
		out     []*pb.FilesystemEvent
		entry   *pb.EntryInfo
		statted bool
	)
	for _, et := range eventTypes {
		if !ev.Has(et.op) {
			continue
		}
		fe := &pb.FilesystemEvent{Name: name, Type: et.typ}
		if w.includeEntry && et.typ != pb.EventType_EVENT_TYPE_REMOVE && et.typ != pb.EventType_EVENT_TYPE_RENAME {
			if !statted {
				entry, _ = w.entries.info(ev.Name) // gone already: no entry
				statted = true
			}
			fe.Entry = entry
		}
		out = append(out, fe)
	}
	return out
}

// addTree watches dir and every directory below it. It walks from, which is
// dir or, for the root, what dir resolves to, and watches what it finds under
// the matching path below dir. Symlinks inside are not followed. A dir that
// is a file or gone already is not watched.
func (w *watcher) addTree(dir, from string) {
	_ = filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			w.log.Debug("walking directory to watch", "path", p, "error", err)
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		p = filepath.Join(dir, rel)
		if p == w.root {
			return nil
		}
		if err := w.fsw.Add(p); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				w.log.Warn("watching subdirectory", "path", p, "error", err)
			}
			return filepath.SkipDir
		}
		w.dirs[p] = struct{}{}
		return nil
	})
}

// forget drops the watches on dir and the directories below it, after dir
// was removed or renamed away.
func (w *watcher) forget(dir string) {
	prefix := dir + string(filepath.Separator)
	for p := range w.dirs {
		if p == dir || strings.HasPrefix(p, prefix) {
			_ = w.fsw.Remove(p) // often gone already with the directory
			delete(w.dirs, p)
		}
	}
}
