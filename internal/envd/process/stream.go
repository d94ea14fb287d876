package process

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
)

const (
	// keepaliveHeader carries the keepalive interval in seconds; the SDKs
	// send 50.
	keepaliveHeader  = "Keepalive-Ping-Interval"
	defaultKeepalive = 90 * time.Second

	// timeoutHeader is the Connect deadline; envd also uses it as the
	// lifetime of the process a Start request runs.
	timeoutHeader = "Connect-Timeout-Ms"

	// endGrace is how long a Start stream whose deadline passed waits for
	// the process (killed at the same moment) to end, so the client still
	// gets the end event rather than a bare deadline error.
	endGrace = drainMax + 2*time.Second
)

// keepaliveInterval reads Keepalive-Ping-Interval; missing or invalid
// values get the reference default.
func keepaliveInterval(h http.Header) time.Duration {
	secs, err := strconv.Atoi(h.Get(keepaliveHeader))
	if err != nil || secs <= 0 {
		return defaultKeepalive
	}
	return time.Duration(secs) * time.Second
}

// processTimeout reads Connect-Timeout-Ms; 0 (or no header) means no limit.
func processTimeout(h http.Header) (time.Duration, error) {
	v := h.Get(timeoutHeader)
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 {
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("parsing %s %q: invalid value", timeoutHeader, v))
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// streamOptions are how one stream of events behaves.
type streamOptions struct {
	keepalive time.Duration
	// awaitEnd: when the stream's deadline passes, keep going until the end
	// event (up to endGrace) instead of failing at once. Start sets it when
	// the deadline is also the process's lifetime, so the process is being
	// killed right then.
	awaitEnd bool
}

// streamEvents sends sub's data events, keepalives when idle, and finally
// p's end event, using send. The start event has already been sent. It
// returns nil once the end was sent, or the reason it stopped early; the
// process keeps running either way.
func streamEvents(ctx context.Context, p *proc, sub *subscription, opts streamOptions, send func(*pb.ProcessEvent) error) error {
	keepalive := time.NewTimer(opts.keepalive)
	defer keepalive.Stop()
	sendReset := func(ev *pb.ProcessEvent, what string) error {
		if err := send(ev); err != nil {
			return fmt.Errorf("sending %s event: %w", what, err)
		}
		keepalive.Reset(opts.keepalive)
		return nil
	}

	ctxDone := ctx.Done()
	var grace <-chan time.Time
	for {
		select {
		case ev := <-sub.events:
			if err := sendReset(ev, "data"); err != nil {
				return err
			}
		case <-p.done:
			// Every data event was queued before done was closed.
			for {
				select {
				case ev := <-sub.events:
					if err := sendReset(ev, "data"); err != nil {
						return err
					}
					continue
				default:
				}
				break
			}
			p.mu.Lock()
			end := p.end
			p.mu.Unlock()
			return sendReset(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}, "end")
		case <-keepalive.C:
			if err := sendReset(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}, "keepalive"); err != nil {
				return err
			}
		case <-ctxDone:
			if opts.awaitEnd && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				ctxDone = nil
				t := time.NewTimer(endGrace)
				defer t.Stop()
				grace = t.C
				continue
			}
			return ctx.Err()
		case <-grace:
			return connect.NewError(connect.CodeDeadlineExceeded, errors.New("process did not end after its timeout"))
		}
	}
}
