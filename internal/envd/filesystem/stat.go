package filesystem

import (
	"context"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// Stat implements filesystemconnect.FilesystemHandler.
func (s *Service) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	u, path, err := s.userPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	var ent *pb.EntryInfo
	if err := u.As(func() (err error) { ent, err = s.entries.info(path); return err }); err != nil {
		return nil, pathError("stat", path, err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: ent}), nil
}
