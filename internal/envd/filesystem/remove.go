package filesystem

import (
	"context"
	"os"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// Remove implements filesystemconnect.FilesystemHandler. Removing a path
// that does not exist succeeds.
func (s *Service) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	u, path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := u.As(func() error { return os.RemoveAll(path) }); err != nil {
		return nil, pathError("removing", path, err)
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}
