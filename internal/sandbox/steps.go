package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/gen/process/processconnect"
	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Template build steps (RunStep) run in sandboxes of the backend like any
// other, started from the image built so far (Spec.Layers) with their
// changes exported when they stop (Spec.Export). They are not customers'
// sandboxes: they are never recorded in the store, listed or counted
// against MaxSandboxes, and reach the network only through BuildNetwork.
// Each is named stepPrefix plus a random ID, lives as long as RunStep, and
// is stopped on every way out of it; one a crash left behind is a backend
// leftover that the next reconcile removes.

// stepPrefix starts the IDs of build step sandboxes, which the store's
// IDs ("i…") never do.
const stepPrefix = "build-"

// Defaults of a build step sandbox's resources (Config.StepResources).
const (
	DefaultStepCPU      = 2
	DefaultStepMemoryMB = 2048
	DefaultStepDiskMB   = 8192
)

// stepHostname is a build step's host name.
const stepHostname = "build"

var _ template.StepRunner = (*Manager)(nil)

// RunStep implements template.StepRunner: it starts a sandbox over
// s.Layers, attaches it to BuildNetwork, runs s.Args through envd with
// s's credentials, and stops the sandbox, which exports its changes to
// s.Upper.
func (m *Manager) RunStep(ctx context.Context, s template.StepSpec) (code int, err error) {
	if len(s.Layers) == 0 || len(s.Args) == 0 || !filepath.IsAbs(s.Upper) {
		return 0, fmt.Errorf("running build step: want layers, a command and an absolute upper directory")
	}
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, s.Timeout, fmt.Errorf("%w after %s", template.ErrStepTimeout, s.Timeout))
		defer cancel()
	}
	id := stepPrefix + NewID()
	log := m.log.With("sandbox_id", id)
	m.mu.Lock()
	m.steps[id] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.steps, id)
		m.mu.Unlock()
	}()
	defer func() {
		switch {
		case err == nil:
		case ctx.Err() != nil && !errors.Is(err, context.Cause(ctx)):
			// Stopped: say why first (a timeout), then what was cut.
			err = fmt.Errorf("build step sandbox %s: %w (%w)", id, context.Cause(ctx), err)
		default:
			err = fmt.Errorf("build step sandbox %s: %w", id, err)
		}
	}()

	backend, err := m.stepBackend()
	if err != nil {
		return 0, err
	}
	top := len(s.Layers) - 1
	token := newToken()
	inst, err := backend.Start(ctx, isolation.Spec{
		ID:              id,
		RootFS:          s.Layers[top],
		Layers:          s.Layers[:top],
		Export:          s.Upper,
		EnvdPath:        m.cfg.EnvdPath,
		Hostname:        stepHostname,
		EnvdAccessToken: token,
		Resources:       m.cfg.StepResources,
	})
	if err != nil {
		return 0, fmt.Errorf("starting: %w", err)
	}
	log.Debug("build step sandbox started", "backend", backend.Name())
	defer func() {
		if m.cfg.BuildNetwork != nil {
			m.cfg.BuildNetwork.Detach(id)
		}
		// Stop exports the changes; they are only wanted from a step that
		// ran, but an export of a failed one is discarded by the caller.
		if serr := inst.Stop(context.WithoutCancel(ctx)); serr != nil {
			err = errors.Join(err, fmt.Errorf("stopping: %w", serr))
		}
	}()
	if err := waitEnvd(ctx, inst); err != nil {
		return 0, err
	}
	if link := inst.Link(); m.cfg.BuildNetwork != nil && link.Gateway.IsValid() {
		if err := m.cfg.BuildNetwork.Attach(ctx, id, link, egress.Rules{}, m.cfg.MaxBandwidth); err != nil {
			return 0, fmt.Errorf("attaching the build network: %w", err)
		}
	}
	if err := initEnvd(ctx, inst, token, initBody{
		EnvVars: map[string]string{}, AccessToken: token,
		DefaultUser: "root", DefaultWorkdir: "/", Timestamp: m.cfg.Now(),
	}); err != nil {
		return 0, fmt.Errorf("initialising envd: %w", err)
	}
	return runStepCommand(ctx, inst, token, s)
}

// stepBackend is the backend build steps run on: Config.Backend when it
// can export a step's changes, else the first of OtherBackends that can.
func (m *Manager) stepBackend() (isolation.Backend, error) {
	for _, b := range append([]isolation.Backend{m.cfg.Backend}, m.cfg.OtherBackends...) {
		if b.Capabilities().Export {
			return b, nil
		}
	}
	return nil, fmt.Errorf("no backend of this server can run build steps: %s", cannot(m.cfg.Backend, "export a step's changes"))
}

// runStepCommand runs s's command through envd's process API, as root
// running envd's exec-as with s's credentials, and returns its exit code.
func runStepCommand(ctx context.Context, inst isolation.Instance, token string, s template.StepSpec) (int, error) {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return inst.Dial(ctx, EnvdPort)
		},
	}}
	defer hc.CloseIdleConnections()
	args := []string{execAsCommand,
		"-uid", strconv.FormatUint(uint64(s.UID), 10), "-gid", strconv.FormatUint(uint64(s.GID), 10),
		"-dir", cmp.Or(s.Dir, "/")}
	if len(s.Groups) > 0 {
		gs := make([]string, len(s.Groups))
		for i, g := range s.Groups {
			gs[i] = strconv.FormatUint(uint64(g), 10)
		}
		args = append(args, "-groups", strings.Join(gs, ","))
	}
	for _, kv := range s.Env {
		args = append(args, "-env", kv)
	}
	// One stream, as a build log is read: stderr in order with stdout.
	args = append(append(args, "-merge-output", "--"), s.Args...)
	req := connect.NewRequest(&process.StartRequest{Process: &process.ProcessConfig{Cmd: guest.EnvdPath, Args: args, Cwd: ptr("/")}})
	req.Header().Set("Authorization", "Basic cm9vdDo=") // root
	req.Header().Set("X-Access-Token", token)
	stream, err := processconnect.NewProcessClient(hc, "http://envd", connect.WithProtoJSON()).Start(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("starting the command: %w", err)
	}
	defer stream.Close()
	// exec-as's own errors, before the command runs, are on stderr.
	var stdout, stderr lines
	stdout.emit, stderr.emit = s.Output, s.Output
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			stdout.write(d.GetStdout())
			stderr.write(d.GetStderr())
		}
		if end := ev.GetEnd(); end != nil {
			stdout.flush()
			stderr.flush()
			return exitCode(end), nil
		}
	}
	if err := stream.Err(); err != nil {
		if ctx.Err() != nil {
			return 0, context.Cause(ctx)
		}
		select {
		case <-inst.Done():
			return 0, fmt.Errorf("the sandbox ended: %s", inst.Exit().Reason)
		default:
		}
		return 0, fmt.Errorf("running the command: %w", err)
	}
	return 0, errors.New("running the command: envd sent no end event")
}

// execAsCommand is envd's subcommand that runs a command with given
// credentials (envd.ExecAsCommand; the host links no guest-agent package).
const execAsCommand = "exec-as"

func ptr[T any](v T) *T { return &v }

// exitCode is how a command ended: its exit status, or 128 plus the
// signal that killed it, as a shell reports it.
func exitCode(end *process.ProcessEvent_EndEvent) int {
	if end.GetExited() {
		return int(end.GetExitCode())
	}
	if name, ok := strings.CutPrefix(end.GetStatus(), "signal: "); ok {
		for n := syscall.Signal(1); n < 65; n++ {
			if n.String() == name {
				return 128 + int(n)
			}
		}
	}
	return 128 + int(syscall.SIGKILL)
}

// lines splits a stream of output into lines for emit.
type lines struct {
	buf  []byte
	emit func(string)
}

// maxLine bounds a line kept in memory; a longer one is emitted in parts.
const maxLine = 64 << 10

func (l *lines) write(p []byte) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			if len(l.buf) > maxLine {
				l.send(l.buf)
				l.buf = l.buf[:0]
			}
			return
		}
		l.send(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
}

func (l *lines) flush() {
	if len(l.buf) > 0 {
		l.send(l.buf)
		l.buf = nil
	}
}

func (l *lines) send(b []byte) {
	if l.emit != nil {
		l.emit(strings.TrimSuffix(string(b), "\r"))
	}
}
