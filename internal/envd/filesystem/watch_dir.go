package filesystem

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/filesystem"
)

// defaultKeepalive is the keepalive interval when a request does not set
// Keepalive-Ping-Interval.
const defaultKeepalive = 90 * time.Second

// WatchDir implements filesystemconnect.FilesystemHandler. It sends a start
// event once the watch is in place, then one event per change and a
// keepalive whenever the stream has been idle for the requested interval,
// until the client goes away or the request's deadline passes.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	w, err := s.watch(req.Header(), watchRequest{
		path:               req.Msg.GetPath(),
		recursive:          req.Msg.GetRecursive(),
		includeEntry:       req.Msg.GetIncludeEntry(),
		allowNetworkMounts: req.Msg.GetAllowNetworkMounts(),
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := w.Close(); err != nil {
			s.log.Debug("closing watcher", "path", w.root, "error", err)
		}
	}()

	start := &pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}
	if err := stream.Send(start); err != nil {
		return err
	}
	interval := keepaliveInterval(req.Header())
	idle := time.NewTimer(interval)
	defer idle.Stop()
	for {
		var msg *pb.WatchDirResponse
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-w.Events():
			if !ok {
				return connect.NewError(connect.CodeInternal, fmt.Errorf("watcher of '%s' stopped", w.root))
			}
			msg = &pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: ev}}
		case <-idle.C:
			msg = &pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		idle.Reset(interval)
	}
}

// keepaliveInterval reads the Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n <= 0 {
		return defaultKeepalive
	}
	return time.Duration(n) * time.Second
}
