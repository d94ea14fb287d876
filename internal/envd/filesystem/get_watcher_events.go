package filesystem

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// GetWatcherEvents implements filesystemconnect.FilesystemHandler. It
// returns the events since the previous call for the same watcher.
func (s *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	p, ok := s.watchers[id]
	s.mu.Unlock()
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher '%s' not found", id))
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: p.take()}), nil
}
