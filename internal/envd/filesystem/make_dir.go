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
)

// MakeDir implements filesystemconnect.FilesystemHandler.
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	u, path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
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
	return connect.NewResponse(&pb.MakeDirResponse{Entry: ent}), nil
}
