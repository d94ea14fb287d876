package process

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

// Update implements processconnect.ProcessHandler: it resizes a PTY. A
// request without pty changes nothing.
func (s *Service) Update(_ context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.running(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.GetPty() != nil {
		if err := p.resize(req.Msg.GetPty().GetSize()); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error resizing tty: %w", err))
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}
