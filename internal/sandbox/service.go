package sandbox

import (
	"cmp"
	"context"
	"encoding/base64"
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

// warmUpTimeout bounds a pool member's warm-up command.
const warmUpTimeout = time.Minute

// warmUp runs, as user, the shell command line the SDKs run a command
// with (bash -l -c) once in a booted sandbox, and waits for its end, so
// that its first command of a caller's does not pay for first-run costs:
// the page cache in a jail, the translation of the guest's code in an
// emulated VM (measured under TCG: 530–660 ms of QEMU's CPU for the first
// command in a restored VM against 230–260 ms for the next ones).
func warmUp(ctx context.Context, inst isolation.Instance, token, user string) error {
	ctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{
		Cmd: "/bin/bash", Args: []string{"-l", "-c", "true"},
	}})
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	req.Header().Set("X-Access-Token", token)
	stream, err := processconnect.NewProcessClient(envdClient(inst), "http://envd", connect.WithProtoJSON()).Start(ctx, req)
	if err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	defer stream.Close()
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil {
			if end.GetExitCode() != 0 {
				return fmt.Errorf("warming up: bash -l -c true exited %d: %s", end.GetExitCode(), end.GetError())
			}
			return nil
		}
	}
	return fmt.Errorf("warming up: %w", cmp.Or(stream.Err(), errors.New("no end event")))
}

// envdClient reaches envd in inst, a connection per request.
func envdClient(inst isolation.Instance) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return inst.Dial(ctx, EnvdPort)
		},
		DisableKeepAlives: true,
	}}
}

// startService runs the template's start command through envd, as root in
// the background, and waits until its ready port accepts connections. It
// does nothing for a template without one.
func startService(ctx context.Context, inst isolation.Instance, rec store.Sandbox, tmpl *template.Template) error {
	if tmpl.Spec.StartCmd == "" {
		return nil
	}
	hc := envdClient(inst)
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
