package process

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

// Connect implements processconnect.ProcessHandler. It streams start{pid},
// then live output, then the end; for a process that exited within the
// retention window, just start and the retained end.
func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := s.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return err
	}
	sub := p.subscribe()
	defer sub.close()

	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.ConnectResponse{Event: ev}) }
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return fmt.Errorf("sending start event: %w", err)
	}
	// Connect's own deadline ends only this stream, never the process.
	return streamEvents(ctx, p, sub, streamOptions{keepalive: keepaliveInterval(req.Header())}, send)
}
