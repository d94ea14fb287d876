package process

import (
	"context"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

// List implements processconnect.ProcessHandler: the running processes,
// PTYs included, with the config they were started with.
func (s *Service) List(_ context.Context, _ *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	procs := s.list()
	res := &pb.ListResponse{Processes: make([]*pb.ProcessInfo, 0, len(procs))}
	for _, p := range procs {
		res.Processes = append(res.Processes, p.info())
	}
	return connect.NewResponse(res), nil
}
