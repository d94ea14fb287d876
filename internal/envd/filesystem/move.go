package filesystem

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
)

// Move implements filesystemconnect.FilesystemHandler.
func (s *Service) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	u, src, err := s.userPath(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := s.resolve(u, req.Msg.GetDestination())
	if err != nil {
		return nil, err
	}
	var ent *pb.EntryInfo
	if err := u.As(func() (err error) { ent, err = s.move(u, src, dst); return err }); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: ent}), nil
}

// move renames src to dst for u, creating dst's missing parents.
func (s *Service) move(u *identity.User, src, dst string) (*pb.EntryInfo, error) {
	if _, err := os.Lstat(src); err != nil {
		return nil, pathError("stat of source", src, err)
	}
	if err := u.MkdirAll(filepath.Dir(dst)); err != nil {
		return nil, mkdirError("creating parents of destination", dst, err)
	}
	if err := os.Rename(src, dst); err != nil {
		code := errorCode(err)
		if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR) {
			// A directory onto a file, or a file onto a directory.
			code = connect.CodeInvalidArgument
		}
		return nil, connect.NewError(code, fmt.Errorf("moving '%s' to '%s': %w", src, dst, bareError(src, err)))
	}
	ent, err := s.entries.info(dst)
	if err != nil {
		return nil, pathError("stat of destination", dst, err)
	}
	return ent, nil
}
