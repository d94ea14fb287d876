package filesystem

import (
	"context"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// Stat implements filesystemconnect.FilesystemHandler.
func (s *Service) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	_, path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	ent, err := s.entries.info(path)
	if err != nil {
		return nil, pathError("stat", path, err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: ent}), nil
}
