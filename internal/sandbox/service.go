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
	client := processconnect.NewProcessClient(envdClient(inst), "http://envd", connect.WithProtoJSON())
	code, err := runToEnd(ctx, client, shellCommand(user, token, "true"))
	switch {
	case err != nil:
		return fmt.Errorf("warming up: %w", err)
	case code != 0:
		return fmt.Errorf("warming up: bash -l -c true exited %d", code)
	}
	return nil
}

// envdClient reaches envd in inst, a connection per request.
func envdClient(inst isolation.Instance) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return inst.Dial(ctx, EnvdPort)
		},
		DisableKeepAlives: true,
		// Go asks for gzip by default, and envd compresses what it sends:
		// the CA bundle the egress CA is added to at every start (~200 KB)
		// cost envd a compression and the server a decompression (6 % of
		// the server's CPU under a burst of creates) over a link that
		// does not need it.
		DisableCompression: true,
	}}
}

// startService runs the template's start command through envd, as root in
// the background, and waits until the template's ready check passes: its
// ready port accepts connections, or its ready command exits 0. It does
// nothing for a template without either.
func startService(ctx context.Context, inst isolation.Instance, rec store.Sandbox, tmpl *template.Template) error {
	spec := tmpl.Spec
	if spec.StartCmd == "" && spec.ReadyCmd == "" {
		return nil
	}
	// Cancelling stops following the start command, not the command.
	ctx, cancel := context.WithTimeoutCause(ctx, readyTimeout, fmt.Errorf("not ready within %s", readyTimeout))
	defer cancel()
	client := processconnect.NewProcessClient(envdClient(inst), "http://envd", connect.WithProtoJSON())
	var startEnded <-chan int
	if spec.StartCmd != "" {
		stream, err := client.Start(ctx, shellCommand("root", rec.EnvdAccessToken, spec.StartCmd))
		if err != nil {
			return fmt.Errorf("running the start command: %w", err)
		}
		// The start event says it runs.
		if !stream.Receive() {
			stream.Close()
			return fmt.Errorf("running the start command: %w", cmp.Or(stream.Err(), errors.New("no start event")))
		}
		ended := make(chan int, 1)
		go func() {
			defer stream.Close()
			for stream.Receive() {
				if end := stream.Msg().GetEvent().GetEnd(); end != nil {
					ended <- exitCode(end)
					return
				}
			}
		}()
		startEnded = ended
	}
	switch {
	case spec.ReadyPort != 0:
		return waitReady(ctx, inst, startEnded, fmt.Sprintf("port %d", spec.ReadyPort), 200*time.Millisecond, func(ctx context.Context) (bool, error) {
			c, err := inst.Dial(ctx, spec.ReadyPort)
			if err == nil {
				c.Close()
				return true, nil
			}
			return false, ignore(err, isolation.ErrPortClosed)
		})
	case spec.ReadyCmd != "":
		return waitReady(ctx, inst, startEnded, fmt.Sprintf("the ready command %q", spec.ReadyCmd), 500*time.Millisecond, func(ctx context.Context) (bool, error) {
			code, err := runToEnd(ctx, client, shellCommand("root", rec.EnvdAccessToken, spec.ReadyCmd))
			return err == nil && code == 0, err
		})
	}
	return nil
}

// shellCommand is the request that runs the shell command line cmd as
// user (bash -l -c, as the SDKs run commands), with envd access token
// token.
func shellCommand(user, token, cmd string) *connect.Request[process.StartRequest] {
	return startRequest(user, token, &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}})
}

// startRequest is the envd request that starts p as user, with envd
// access token token.
func startRequest(user, token string, p *process.ProcessConfig) *connect.Request[process.StartRequest] {
	req := connect.NewRequest(&process.StartRequest{Process: p})
	authorizeEnvd(req.Header(), user, token)
	return req
}

// runToEnd runs req's command and returns its exit code.
func runToEnd(ctx context.Context, client processconnect.ProcessClient, req *connect.Request[process.StartRequest]) (int, error) {
	stream, err := client.Start(ctx, req)
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil {
			return exitCode(end), nil
		}
	}
	return 0, cmp.Or(stream.Err(), errors.New("no end event"))
}

// ignore returns err unless it is target.
func ignore(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return err
}

// waitReady polls ready, with a delay growing up to maxDelay, until it
// reports true, the sandbox dies, the start command (whose exit code
// startEnded delivers; nil: none) exits non-zero, or ctx ends. what names
// the check in errors.
func waitReady(ctx context.Context, inst isolation.Instance, startEnded <-chan int, what string, maxDelay time.Duration, ready func(context.Context) (bool, error)) error {
	delay := 10 * time.Millisecond
	for {
		ok, err := ready(ctx)
		if ok {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		case <-inst.Done():
			return fmt.Errorf("waiting for %s: %w: %s", what, isolation.ErrGone, inst.Exit().Reason)
		case code := <-startEnded:
			if code != 0 {
				return fmt.Errorf("waiting for %s: the start command exited with code %d", what, code)
			}
			startEnded = nil // a daemon may run on
		case <-time.After(delay):
		}
		delay = min(2*delay, maxDelay)
	}
}
