package codeinterp

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
	"os/exec"
	"time"
)

// Run is the codeinterp command: it parses args, starts the runtimes that
// are installed (Python's ipykernel, Node.js, bash, R's IRkernel, Java's
// JShell) and serves until ctx ends.
func Run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("codeinterp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "0.0.0.0:49999", "`ADDR` to listen on")
	cwd := fs.String("cwd", defaultCwd, "working `DIR` of contexts created without one")
	python := fs.String("python", "/usr/bin/python3", "`PYTHON` with ipykernel")
	node := fs.String("node", "node", "`NODE` binary for JavaScript and TypeScript")
	rBinary := fs.String("r", "R", "`R` binary with IRkernel (used if installed)")
	java := fs.String("java", "java", "`JAVA` binary, 11 or later, for Java (used if installed)")
	envdURL := fs.String("envd", defaultEnvdURL, "`URL` of envd, for the sandbox's environment")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	dir, err := os.MkdirTemp("", "codeinterp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	runtimes := map[string]Factory{
		"javascript": JavaScriptFactory(*node),
		"bash":       BashFactory(""),
	}
	if runtimes["python"], err = PythonFactory(*python, dir, log); err != nil {
		return err
	}
	if _, err := exec.LookPath(*rBinary); err == nil {
		runtimes["r"] = RFactory(*rBinary, log)
	}
	if _, err := exec.LookPath(*java); err == nil {
		if runtimes["java"], err = JavaFactory(*java, dir); err != nil {
			return err
		}
	}
	srv, err := New(Config{Runtimes: runtimes, DefaultCwd: *cwd, EnvdURL: *envdURL, Log: log})
	if err != nil {
		return err
	}
	defer srv.Close()
	// The default contexts exist before the port opens: the port opening
	// is what tells the sandbox's creator that the interpreter is ready.
	if err := srv.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *addr, err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 640 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("code interpreter ready", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
