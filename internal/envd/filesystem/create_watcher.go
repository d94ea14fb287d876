package filesystem

import (
	"context"
	"crypto/rand"
	"errors"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// CreateWatcher implements filesystemconnect.FilesystemHandler. The watcher
// outlives the request: it runs until RemoveWatcher or Close.
func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	w, err := s.watch(req.Header(), watchRequest{
		path:               req.Msg.GetPath(),
		recursive:          req.Msg.GetRecursive(),
		includeEntry:       req.Msg.GetIncludeEntry(),
		allowNetworkMounts: req.Msg.GetAllowNetworkMounts(),
	})
	if err != nil {
		return nil, err
	}
	id := rand.Text()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = w.Close()
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("envd is shutting down"))
	}
	s.watchers[id] = newPollingWatcher(w, s.log.With("watcher_id", id))
	s.mu.Unlock()
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}
