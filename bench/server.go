package bench

import (
	"cmp"
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

	"github.com/agent-sandbox/agent-sandbox/internal/hostlock"
)

// serverSpec is one of the run's own servers: its data dir (one server at
// a time uses it) and the flags it differs by.
type serverSpec struct {
	dataDir string
	log     string   // the log's name in dataDir; default bench-server.log
	pool    string   // --warm-pool
	args    []string // further serve flags, before Options.ServeArgs
}

// server is an agent-sandbox serve process the run started.
type server struct {
	cmd     *exec.Cmd
	url     string
	apiKey  string
	logPath string
	exited  chan struct{}
	err     error // set before exited closes
}

// errHostHeld is returned (wrapped) when a server could not start because
// another process holds the host's sandbox networking (hostlock).
var errHostHeld = errors.New("the host's sandbox networking is in use")

// startServer starts binary serve as spec says on a free loopback port,
// and waits until it is ready (which includes building the template on a
// first run). With Options.WaitHost, a server that another process's hold
// on the host's sandbox networking kept from starting is started again
// once that is free, until StartTimeout.
func startServer(ctx context.Context, opts *Options, spec serverSpec) (*server, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	for {
		s, err := startServerOnce(ctx, opts, spec)
		if !opts.WaitHost || !errors.Is(err, errHostHeld) {
			return s, err
		}
		opts.progress("%v; waiting for it", err)
		if err := waitHostFree(ctx); err != nil {
			return nil, err
		}
	}
}

// waitHostFree polls the host lock until it is free (taking it for an
// instant, as a starting server would).
func waitHostFree(ctx context.Context) error {
	for {
		release, err := hostlock.Acquire(hostlock.Path, "agent-sandbox bench, seeing whether the host is free", false)
		if err == nil {
			release()
			return nil
		}
		if !errors.Is(err, hostlock.ErrHeld) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the host's sandbox networking: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func startServerOnce(ctx context.Context, opts *Options, spec serverSpec) (*server, error) {
	listen := opts.Listen
	if listen == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listen = ln.Addr().String()
		ln.Close()
	}
	if err := os.MkdirAll(spec.dataDir, 0o700); err != nil {
		return nil, err
	}
	var key [20]byte
	rand.Read(key[:])
	s := &server{
		url:     "http://" + listen,
		apiKey:  "e2b_" + hex.EncodeToString(key[:]),
		logPath: filepath.Join(spec.dataDir, cmp.Or(spec.log, "bench-server.log")),
		exited:  make(chan struct{}),
	}
	logf, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// No sandbox cap: the density figure counts how many idle sandboxes
	// fit, past the cap derived from their memory limits.
	args := []string{"serve", "--data-dir", spec.dataDir, "--listen", listen, "--api-key", s.apiKey, "--warm-pool", spec.pool, "--max-sandboxes", "0"}
	args = append(append(args, spec.args...), opts.ServeArgs...)
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
	if err := s.waitReady(ctx); err != nil {
		s.stop()
		last := lastLine(s.logPath)
		if strings.Contains(last, hostlock.ErrHeld.Error()) {
			err = fmt.Errorf("%w (%w)", errHostHeld, err)
		}
		return nil, fmt.Errorf("%w; the server log %s ends: %s", err, s.logPath, last)
	}
	return s, nil
}

// waitReady polls GET /health until it answers 204.
func (s *server) waitReady(ctx context.Context) error {
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

// logSize is where the server's log ends now: what it logs next is read
// from there (logSince).
func (s *server) logSize() int64 {
	fi, err := os.Stat(s.logPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns what the server has logged from offset on.
func (s *server) logSince(offset int64) (logged, error) { return readLog(s.logPath, offset) }

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
