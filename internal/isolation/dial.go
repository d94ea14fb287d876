package isolation

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/network"
)

// DialIn is the Dial of a backend's Instance for sandbox id: ErrPaused
// while it is paused, ErrGone once done is closed, else a TCP connection
// to host:port opened from inside the sandbox's network namespace ns
// (loopback services included), ErrPortClosed when nothing listens there.
func DialIn(ctx context.Context, ns *network.Namespace, id string, paused bool, done <-chan struct{}, host string, port int) (net.Conn, error) {
	if paused {
		return nil, fmt.Errorf("dialing port %d of sandbox %s: %w", port, id, ErrPaused)
	}
	select {
	case <-done:
		return nil, fmt.Errorf("dialing port %d of sandbox %s: %w", port, id, ErrGone)
	default:
	}
	c, err := ns.Dial(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("dialing port %d of sandbox %s: %w: %w", port, id, ErrPortClosed, err)
	}
	if err != nil {
		return nil, fmt.Errorf("dialing port %d of sandbox %s: %w", port, id, err)
	}
	return c, nil
}
