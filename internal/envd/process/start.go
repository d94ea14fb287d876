package process

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"connectrpc.com/connect"

	pb "github.com/agent-sandbox/agent-sandbox/gen/process"
	"github.com/agent-sandbox/agent-sandbox/internal/envd/identity"
)

// defaultPath is the PATH commands get when envd itself has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Start implements processconnect.ProcessHandler.
func (s *Service) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	u, err := s.requestUser(req.Header())
	if err != nil {
		return err
	}
	timeout, err := processTimeout(req.Header())
	if err != nil {
		return err
	}
	sp, err := s.buildSpec(u, req.Msg)
	if err != nil {
		return err
	}
	sp.timeout = timeout

	p, err := startProc(sp, s.log)
	if err != nil {
		// As in the reference: a command that cannot be started is the
		// caller's mistake (no such file, cwd not accessible, …).
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	sub := p.subscribe() // before any output is read, so none is missed
	defer sub.close()
	s.register(p)
	p.begin(timeout, s.forgetLater)
	p.log.Info("process started", "cmd", commandLine(sp.config), "user", u.Name, "dir", sp.cmd.Dir, "pty", sp.pty != nil, "timeout", timeout)

	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.StartResponse{Event: ev}) }
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: p.pid}}}); err != nil {
		return fmt.Errorf("sending start event: %w", err)
	}
	return streamEvents(ctx, p, sub, streamOptions{
		keepalive: keepaliveInterval(req.Header()),
		awaitEnd:  timeout > 0,
	}, send)
}

// buildSpec resolves what the command runs as, where and with which
// environment. Errors are Connect errors for the client.
func (s *Service) buildSpec(u *identity.User, req *pb.StartRequest) (spec, error) {
	cfg := req.GetProcess()
	if cfg.GetCmd() == "" {
		return spec{}, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	dir, err := identity.ResolvePath(cfg.GetCwd(), u, s.state.DefaultWorkdir())
	if err != nil {
		return spec{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("resolving cwd: %w", err))
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return spec{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' does not exist", dir))
	case err != nil:
		return spec{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("checking cwd '%s': %w", dir, err))
	case !fi.IsDir():
		return spec{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' is not a directory", dir))
	}

	env := buildEnv(os.Getenv("PATH"), u, s.state.EnvVars(), cfg.GetEnvs())
	path, err := lookPath(cfg.GetCmd(), envValue(env, "PATH"))
	if err != nil {
		return spec{}, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("starting process '%s': %w", commandLine(cfg), err))
	}
	cmd := &exec.Cmd{
		Path: path,
		Args: append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
		Env:  env,
		Dir:  dir,
	}
	return spec{
		cmd:    cmd,
		user:   u,
		config: cfg,
		tag:    req.Tag,
		pty:    req.GetPty(),
		// Absent means true: clients older than the stdin switch expect a pipe.
		stdin: req.Stdin == nil || req.GetStdin(),
	}, nil
}

// buildEnv composes a command's environment, later entries winning: envd's
// PATH, the user's HOME, USER and LOGNAME, the sandbox-wide variables from
// /init, then the request's. Nothing else of envd's environment leaks in.
func buildEnv(path string, u *identity.User, sandbox, request map[string]string) []string {
	if path == "" {
		path = defaultPath
	}
	var keys []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			keys = append(keys, k)
		}
		vals[k] = v
	}
	set("PATH", path)
	set("HOME", u.Home)
	set("USER", u.Name)
	set("LOGNAME", u.Name)
	for _, k := range slices.Sorted(maps.Keys(sandbox)) {
		set(k, sandbox[k])
	}
	for _, k := range slices.Sorted(maps.Keys(request)) {
		set(k, request[k])
	}
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		env = append(env, k+"="+vals[k])
	}
	return env
}

// envValue returns the value of key in env.
func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// lookPath finds file in the command's own PATH (which the request may
// have set), not envd's. Names with a slash are used as they are; relative
// ones resolve against the command's working directory.
func lookPath(file, pathList string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	for _, dir := range filepath.SplitList(pathList) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // relative PATH entries would depend on envd's cwd
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %q not found in PATH", exec.ErrNotFound, file)
}

// commandLine is the command as a person would type it, for messages.
func commandLine(cfg *pb.ProcessConfig) string {
	return strings.Join(append([]string{cfg.GetCmd()}, cfg.GetArgs()...), " ")
}
