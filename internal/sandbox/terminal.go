package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"connectrpc.com/connect"

	"github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
)

// Terminal is an interactive login shell on a PTY in a sandbox, opened by
// OpenTerminal for the dashboard: the server holds the sandbox's envd
// access token, so a person at the dashboard never types it.
type Terminal struct {
	client processconnect.ProcessClient
	stream *connect.ServerStreamForClient[process.StartResponse]
	token  string
	pid    uint32
}

// OpenTerminal starts a login shell on a cols×rows PTY in running sandbox
// id, as the template's user.
func (m *Manager) OpenTerminal(ctx context.Context, id string, cols, rows uint32) (*Terminal, error) {
	e, err := m.envd(ctx, id)
	if err != nil {
		return nil, err
	}
	req := startRequest(e.user, e.token, &process.ProcessConfig{
		Cmd:  "/bin/bash",
		Args: []string{"-l", "-i"},
		Envs: map[string]string{"TERM": "xterm-256color"},
	})
	req.Msg.Pty = &process.PTY{Size: &process.PTY_Size{Cols: cols, Rows: rows}}
	stream, err := e.client.Start(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("starting a terminal in sandbox %s: %w", id, err)
	}
	// The first event names the shell's pid, which input and resizes need.
	if !stream.Receive() {
		stream.Close()
		return nil, fmt.Errorf("starting a terminal in sandbox %s: %w", id, cmp.Or(stream.Err(), errors.New("no start event")))
	}
	start := stream.Msg().GetEvent().GetStart()
	if start == nil {
		stream.Close()
		return nil, fmt.Errorf("starting a terminal in sandbox %s: the first event is not the start", id)
	}
	return &Terminal{client: e.client, stream: stream, token: e.token, pid: start.GetPid()}, nil
}

// Read returns the next output of the shell. ok is false once the shell
// has exited (err nil) or the stream broke or was cancelled (err says
// which).
func (t *Terminal) Read() (out []byte, ok bool, err error) {
	for t.stream.Receive() {
		ev := t.stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil && len(d.GetPty()) > 0 {
			return d.GetPty(), true, nil
		}
		if ev.GetEnd() != nil {
			return nil, false, nil
		}
	}
	return nil, false, t.stream.Err()
}

// Write sends p to the shell as typed input.
func (t *Terminal) Write(ctx context.Context, p []byte) error {
	req := connect.NewRequest(&process.SendInputRequest{
		Process: t.selector(),
		Input:   &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: p}},
	})
	req.Header().Set("X-Access-Token", t.token)
	if _, err := t.client.SendInput(ctx, req); err != nil {
		return fmt.Errorf("sending terminal input: %w", err)
	}
	return nil
}

// Resize sets the PTY's size.
func (t *Terminal) Resize(ctx context.Context, cols, rows uint32) error {
	req := connect.NewRequest(&process.UpdateRequest{
		Process: t.selector(),
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: cols, Rows: rows}},
	})
	req.Header().Set("X-Access-Token", t.token)
	if _, err := t.client.Update(ctx, req); err != nil {
		return fmt.Errorf("resizing the terminal: %w", err)
	}
	return nil
}

// Close kills the shell (a closed page leaves no shell behind) and ends
// the output stream.
func (t *Terminal) Close(ctx context.Context) error {
	req := connect.NewRequest(&process.SendSignalRequest{Process: t.selector(), Signal: process.Signal_SIGNAL_SIGKILL})
	req.Header().Set("X-Access-Token", t.token)
	_, err := t.client.SendSignal(ctx, req)
	if connect.CodeOf(err) == connect.CodeNotFound {
		err = nil // it had exited
	}
	return errors.Join(err, t.stream.Close())
}

func (t *Terminal) selector() *process.ProcessSelector {
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: t.pid}}
}

// envdURL is the base URL of every envd call; the client dials the
// sandbox whatever the host.
const envdURL = "http://envd"

// envdConn is how the server reaches the envd of one sandbox.
type envdConn struct {
	client processconnect.ProcessClient
	// http reaches the envd (host "envd") for its other APIs.
	http  *http.Client
	user  string
	token string
}

// envd returns a client of running sandbox id's envd process API, an
// HTTP client for its others, and the user and token its calls carry.
func (m *Manager) envd(ctx context.Context, id string) (envdConn, error) {
	rec, err := m.Get(ctx, id)
	if err != nil {
		return envdConn{}, err
	}
	// A template deleted since the sandbox started leaves the default user,
	// which is every built-in template's.
	user := defaultUser
	if tmpl, err := m.cfg.Templates.Lookup(rec.TemplateID); err == nil {
		user = cmp.Or(tmpl.User, defaultUser)
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return m.Dial(ctx, id, EnvdPort)
		},
		DisableKeepAlives: true,
	}}
	return envdConn{client: processconnect.NewProcessClient(hc, envdURL), http: hc, user: user, token: rec.EnvdAccessToken}, nil
}
