package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// ListDir implements filesystemconnect.FilesystemHandler. It walks the
// directory (following a symlinked root) in lexical depth-first pre-order,
// down to the requested depth, and reports each entry under the path as
// requested.
func (s *Service) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	u, root, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	var list []*pb.EntryInfo
	if err := u.As(func() (err error) { list, err = s.listDir(ctx, root, depth); return err }); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.ListDirResponse{Entries: list}), nil
}

// listDir lists root down to depth.
func (s *Service) listDir(ctx context.Context, root string, depth int) ([]*pb.EntryInfo, error) {
	dir, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, pathError("resolving directory", root, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, pathError("stat of directory", root, err)
	}
	if !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path '%s' is not a directory", root))
	}

	var list []*pb.EntryInfo
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if p == dir {
			return err // the root itself is not listed; failing to read it is an error
		}
		if err != nil {
			// A subdirectory that vanished or cannot be read: it is
			// listed already (WalkDir reported it before reading it), its
			// contents are skipped.
			s.log.Debug("listing directory", "path", p, "error", err)
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return fmt.Errorf("relating %s to %s: %w", p, dir, err)
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while listing
			}
			return fmt.Errorf("stat of %s: %w", p, err)
		}
		list = append(list, s.entries.fromFileInfo(filepath.Join(root, rel), info))
		if d.IsDir() && strings.Count(rel, string(filepath.Separator))+1 >= depth {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr // connect turns it into canceled or deadline_exceeded
		}
		return nil, pathError("listing directory", root, err)
	}
	return list, nil
}
