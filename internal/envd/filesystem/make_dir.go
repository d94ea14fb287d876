package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
)

// MakeDir implements filesystemconnect.FilesystemHandler.
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	u, path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	var ent *pb.EntryInfo
	if err := u.As(func() (err error) { ent, err = s.makeDir(u, path); return err }); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: ent}), nil
}

// makeDir creates path and its missing parents for u.
func (s *Service) makeDir(u *identity.User, path string) (*pb.EntryInfo, error) {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory '%s' already exists", path))
	case err == nil:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path '%s' already exists and is not a directory", path))
	case errors.Is(err, syscall.ENOTDIR):
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("creating directory '%s': a parent is not a directory", path))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, pathError("stat", path, err)
	}

	if err := u.MkdirAll(path); err != nil {
		return nil, mkdirError("creating directory", path, err)
	}
	ent, err := s.entries.info(path)
	if err != nil {
		return nil, pathError("stat of new directory", path, err)
	}
	return ent, nil
}
