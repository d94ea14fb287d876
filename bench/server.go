package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// server is an agent-sandbox serve process the run started.
type server struct {
	cmd     *exec.Cmd
	url     string
	apiKey  string
	logPath string
	exited  chan struct{}
	err     error // set before exited closes
}

// startServer starts binary serve on a free loopback port with its own
// data dir and the given --warm-pool, and waits until it is ready (which
// includes building the template on a first run).
func startServer(ctx context.Context, opts *Options, pool string) (*server, error) {
	listen := opts.Listen
	if listen == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listen = ln.Addr().String()
		ln.Close()
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, err
	}
	var key [20]byte
	rand.Read(key[:])
	s := &server{
		url:     "http://" + listen,
		apiKey:  "e2b_" + hex.EncodeToString(key[:]),
		logPath: filepath.Join(opts.DataDir, "bench-server.log"),
		exited:  make(chan struct{}),
	}
	logf, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// No sandbox cap: the density figure counts how many idle sandboxes
	// fit, past the cap derived from their memory limits.
	args := []string{"serve", "--data-dir", opts.DataDir, "--listen", listen, "--api-key", s.apiKey, "--warm-pool", pool, "--max-sandboxes", "0"}
	args = append(args, opts.ServeArgs...)
	s.cmd = exec.Command(opts.Binary, args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.Env = append(os.Environ(), "AGENT_SANDBOX_API_KEY=")
	opts.progress("starting %s %s (log: %s)", opts.Binary, strings.Join(args, " "), s.logPath)
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the server: %w", err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(ctx, opts.StartTimeout); err != nil {
		s.stop()
		return nil, fmt.Errorf("%w; the server log %s ends: %s", err, s.logPath, lastLine(s.logPath))
	}
	return s, nil
}

// waitReady polls GET /health until it answers 204.
func (s *server) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/health", nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("server exited before it was ready: %v", s.err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for the server to be ready: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop ends the server with SIGTERM (it discards its warm pool on the way
// out), or kills it after 30 s.
func (s *server) stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return errors.New("server did not stop within 30 s of SIGTERM; killed")
	}
	var exit *exec.ExitError
	if s.err != nil && !errors.As(s.err, &exit) {
		return s.err
	}
	return nil
}

// lastLine returns the last non-empty line of the file at path (at most
// 1 KiB of it), which is where a server that exited says why.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(unreadable: %v)", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := lines[len(lines)-1]
	if len(last) > 1<<10 {
		last = last[len(last)-1<<10:]
	}
	return last
}
