package filesystem

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/fsmeta"
)

// nameTTL bounds how long a uid or gid → name lookup is reused, so accounts
// added inside the sandbox after envd started show up by name soon.
const nameTTL = 30 * time.Second

// entries builds EntryInfo messages. It is safe for concurrent use.
type entries struct {
	log *slog.Logger

	mu     sync.Mutex // guards users and groups
	users  map[uint32]cachedName
	groups map[uint32]cachedName
}

type cachedName struct {
	name    string
	expires time.Time
}

func newEntries(log *slog.Logger) *entries {
	return &entries{log: log, users: map[uint32]cachedName{}, groups: map[uint32]cachedName{}}
}

// info returns the EntryInfo of path, which must be absolute. Its errors are
// those of lstat(2).
func (e *entries) info(path string) (*pb.EntryInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	return e.fromFileInfo(path, fi), nil
}

// fromFileInfo returns the EntryInfo of path given its lstat result fi.
// path is reported as given: symlinks in it are not resolved.
func (e *entries) fromFileInfo(path string, fi fs.FileInfo) *pb.EntryInfo {
	ent := &pb.EntryInfo{
		Name:         filepath.Base(path),
		Type:         fileType(fi.Mode()),
		Path:         path,
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	if uid, gid, ok := fileOwner(fi); ok {
		ent.Owner = e.userName(uid)
		ent.Group = e.groupName(gid)
	}

	dangling := false
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, tfi, err := resolveSymlink(path)
		if err == nil {
			// A link reports its target's type and permission bits.
			ent.Type = fileType(tfi.Mode())
			ent.Mode = uint32(tfi.Mode().Perm())
		} else {
			dangling = true
		}
		if target != "" {
			ent.SymlinkTarget = &target
		}
	}

	if !dangling {
		md, err := fsmeta.Read(path)
		switch {
		case err == nil:
			ent.Metadata = md
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, errors.ErrUnsupported):
		case errors.Is(err, fs.ErrPermission):
			// Metadata is the file's content to the kernel: a user who may
			// not read the file sees none.
		default:
			e.log.Warn("reading file metadata", "path", path, "error", err)
		}
	}
	return ent
}

// resolveSymlink returns the fully resolved absolute target of the link at
// path and the target's FileInfo. For a dangling link (or a loop) it returns
// the link's own target made absolute, and an error.
func resolveSymlink(path string) (string, fs.FileInfo, error) {
	target, err := filepath.EvalSymlinks(path)
	if err == nil {
		if target, err = filepath.Abs(target); err == nil {
			var fi fs.FileInfo
			if fi, err = os.Stat(target); err == nil {
				return target, fi, nil
			}
		}
	}
	link, lerr := os.Readlink(path)
	if lerr != nil {
		return "", nil, lerr
	}
	if !filepath.IsAbs(link) {
		link = filepath.Join(filepath.Dir(path), link)
	}
	return filepath.Clean(link), nil, err
}

// fileType maps a mode to the wire FileType: sockets, FIFOs and devices are
// UNSPECIFIED (the SDK skips those), and only a link whose target could not
// be resolved keeps SYMLINK.
func fileType(m fs.FileMode) pb.FileType {
	switch {
	case m.IsRegular():
		return pb.FileType_FILE_TYPE_FILE
	case m.IsDir():
		return pb.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return pb.FileType_FILE_TYPE_SYMLINK
	default:
		return pb.FileType_FILE_TYPE_UNSPECIFIED
	}
}

func (e *entries) userName(uid uint32) string {
	return e.cachedLookup(e.users, uid, func(id string) (string, error) {
		u, err := user.LookupId(id)
		if err != nil {
			return "", err
		}
		return u.Username, nil
	})
}

func (e *entries) groupName(gid uint32) string {
	return e.cachedLookup(e.groups, gid, func(id string) (string, error) {
		g, err := user.LookupGroupId(id)
		if err != nil {
			return "", err
		}
		return g.Name, nil
	})
}

// cachedLookup returns the name of id from cache (users or groups), asking
// lookup on a miss; an id without a name is reported as the number.
func (e *entries) cachedLookup(cache map[uint32]cachedName, id uint32, lookup func(string) (string, error)) string {
	now := time.Now()
	e.mu.Lock()
	c, ok := cache[id]
	e.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.name
	}
	s := strconv.FormatUint(uint64(id), 10)
	name, err := lookup(s)
	if err != nil || name == "" {
		name = s
	}
	e.mu.Lock()
	cache[id] = cachedName{name: name, expires: now.Add(nameTTL)}
	e.mu.Unlock()
	return name
}
