package envd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/envd/state"
)

// Config is envd's whole configuration, from flags.
type Config struct {
	Addr     string
	Defaults state.Defaults
}

const usage = `Usage: envd [flags]

envd is the agent-sandbox guest agent. It serves the E2B envd protocol
(process and filesystem Connect-RPC services, /files, /health, /init, /envs,
/metrics) over HTTP/1.1 and cleartext HTTP/2.

Until the control plane calls POST /init, requests act as --default-user in
--default-workdir, and need the access token read from --access-token-fd if
one was given (none otherwise).

Flags:
`

// Run parses args (without the program name), serves until ctx is done and
// returns nil on a clean shutdown. It writes usage and the version to stdout.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := harden(); err != nil {
		return err
	}
	if len(args) > 0 && args[0] == ExecAsCommand {
		return execAs(args[1:])
	}
	fs := flag.NewFlagSet("envd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; usage is printed below
	var cfg Config
	var showVersion bool
	tokenFd := -1
	fs.StringVar(&cfg.Addr, "addr", "0.0.0.0:49983", "TCP `address` to listen on")
	fs.IntVar(&tokenFd, "access-token-fd", -1, "read the access token from file descriptor `n` (which is then closed) and require it from the first request")
	fs.StringVar(&cfg.Defaults.User, "default-user", "root", "`user` that requests act as until /init sets another")
	fs.StringVar(&cfg.Defaults.Workdir, "default-workdir", "", "working `directory` for commands and relative paths until /init sets one (empty: the user's home)")
	fs.BoolVar(&showVersion, "version", false, "print the envd protocol version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("%w (see envd --help)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see envd --help)", fs.Arg(0))
	}
	if showVersion {
		fmt.Fprintln(stdout, Version)
		return nil
	}
	if tokenFd >= 0 {
		token, err := readAccessToken(tokenFd)
		if err != nil {
			return err
		}
		cfg.Defaults.AccessToken = token
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	go startSpareThreads(spareThreads) // in the background: no start-up delay
	return Serve(ctx, cfg, log)
}

// maxAccessToken bounds what readAccessToken reads.
const maxAccessToken = 4 << 10

// readAccessToken reads the access token from fd to its end and closes fd.
// The launcher hands it over this way (a pipe it filled) so that the token
// is in no command line or environment that processes in the sandbox can
// read.
func readAccessToken(fd int) (string, error) {
	f := os.NewFile(uintptr(fd), "access-token")
	if f == nil {
		return "", fmt.Errorf("reading the access token: fd %d is not valid", fd)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAccessToken+1))
	if err != nil {
		return "", fmt.Errorf("reading the access token from fd %d: %w", fd, err)
	}
	token := strings.TrimSpace(string(b))
	switch {
	case len(b) > maxAccessToken:
		return "", fmt.Errorf("reading the access token from fd %d: longer than %d bytes", fd, maxAccessToken)
	case token == "":
		return "", fmt.Errorf("reading the access token from fd %d: it is empty", fd)
	}
	return token, nil
}

// spareThreads is how many OS threads envd starts with beyond what the Go
// runtime makes on its own.
const spareThreads = 16

// startSpareThreads makes the runtime start n more OS threads, which it
// then keeps idle for reuse (it never ends one). A Go program dies when it
// needs a new thread and the kernel refuses; in a sandbox whose processes
// hold all of its task limit (a fork bomb), envd then lives on the threads
// it already has. Each goroutine blocks in a system call at the same time,
// and the runtime hands the others a new thread.
func startSpareThreads(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			ts := syscall.Timespec{Nsec: int64(20 * time.Millisecond)}
			_ = syscall.Nanosleep(&ts, nil)
		})
	}
	wg.Wait()
}

// Serve runs envd with cfg until ctx is done.
func Serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.Addr, err)
	}
	srv := NewServer(state.New(cfg.Defaults), log)
	defer srv.Close()

	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // the SDKs may speak h2 with prior knowledge through a proxy
	hs := &http.Server{
		Handler:           srv,
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("envd listening", "addr", ln.Addr().String(), "version", Version)

	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	// Streams (commands, watches) never go idle on their own; give them a
	// moment, then cut them.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdownCtx); err != nil {
		hs.Close()
	}
	return nil
}
