package filesystem

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// RemoveWatcher implements filesystemconnect.FilesystemHandler.
func (s *Service) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	p, ok := s.watchers[id]
	delete(s.watchers, id)
	s.mu.Unlock()
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher '%s' not found", id))
	}
	if err := p.Close(); err != nil {
		s.log.Debug("closing watcher", "watcher_id", id, "error", err)
	}
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}
