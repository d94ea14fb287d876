package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// serveConns accepts connections from ln and runs handle on each in a
// goroutine, at most cap(slots) at once; refuse gets the others (and must
// close them). It stops when ctx is done (returning nil) or when ln fails
// (returning the error); either way it closes ln, cancels the context the
// handlers got, and returns once every handler has ended. what names the
// service in errors and logs.
func serveConns(ctx context.Context, ln net.Listener, what string, log *slog.Logger, slots chan struct{},
	handle func(context.Context, net.Conn), refuse func(net.Conn)) error {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before wg.Wait: it ends the live connections
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accepting %s connections: %w", what, err)
			}
			// Likely out of file descriptors: wait and retry, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			log.Warn(what+": accepting connection", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		select {
		case slots <- struct{}{}:
		default:
			refuse(c)
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			handle(ctx, c)
		})
	}
}
