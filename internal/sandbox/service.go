package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// readyTimeout bounds how long Create waits for a template's service.
const readyTimeout = 2 * time.Minute

// startService runs the template's start command through envd, as root in
// the background, and waits until its ready port accepts connections. It
// does nothing for a template without one.
func startService(ctx context.Context, inst isolation.Instance, rec store.Sandbox, tmpl *template.Template) error {
	if tmpl.Spec.StartCmd == "" {
		return nil
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return inst.Dial(ctx, EnvdPort)
		},
		DisableKeepAlives: true,
	}}
	defer hc.CloseIdleConnections()
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{
		Cmd: "/bin/bash", Args: []string{"-l", "-c", tmpl.Spec.StartCmd},
	}})
	req.Header().Set("Authorization", "Basic cm9vdDo=") // root
	req.Header().Set("X-Access-Token", rec.EnvdAccessToken)
	stream, err := processconnect.NewProcessClient(hc, "http://envd", connect.WithProtoJSON()).Start(ctx, req)
	if err != nil {
		return fmt.Errorf("running the start command: %w", err)
	}
	// The start event says it runs; closing the stream leaves it running.
	ok := stream.Receive()
	stream.Close()
	if !ok {
		return fmt.Errorf("running the start command: %w", cmp.Or(stream.Err(), errors.New("no start event")))
	}
	if tmpl.Spec.ReadyPort == 0 {
		return nil
	}
	return waitPort(ctx, inst, tmpl.Spec.ReadyPort)
}

// waitPort polls until something in the sandbox accepts connections on
// port, the sandbox dies, or readyTimeout passes.
func waitPort(ctx context.Context, inst isolation.Instance, port int) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	delay := 10 * time.Millisecond
	for {
		c, err := inst.Dial(ctx, port)
		if err == nil {
			c.Close()
			return nil
		}
		if !errors.Is(err, isolation.ErrPortClosed) {
			return fmt.Errorf("waiting for port %d: %w", port, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for port %d: %w", port, ctx.Err())
		case <-inst.Done():
			return fmt.Errorf("waiting for port %d: %w: %s", port, isolation.ErrGone, inst.Exit().Reason)
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}
