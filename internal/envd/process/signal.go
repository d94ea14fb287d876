package process

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

// SendSignal implements processconnect.ProcessHandler. SIGKILL and SIGTERM
// go to the process and its process group.
func (s *Service) SendSignal(_ context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p, err := s.running(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("invalid signal: %s", req.Msg.GetSignal()))
	}
	if err := p.signal(sig); err != nil {
		if errors.Is(err, errExited) {
			// It exited between the lookup and now.
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", p.pid))
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error sending signal: %w", err))
	}
	p.log.Info("signalled process", "signal", sig.String())
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}
