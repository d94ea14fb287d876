// Package pprofserve serves Go's runtime profiles (net/http/pprof) on a
// listener of their own, for `serve --pprof`. The profiles expose the
// process's memory and code paths, so only loopback addresses are taken.
package pprofserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// CheckAddr returns an error naming addr unless it is IP:PORT on loopback.
func CheckAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--pprof %q: want IP:PORT on loopback, e.g. 127.0.0.1:6060: %v", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--pprof %q: want a loopback IP (127.0.0.1 or ::1), not %q: profiles expose the server's memory", addr, host)
	}
	return nil
}

// Start listens on addr (checked by CheckAddr) and serves /debug/pprof/
// until ctx ends.
func Start(ctx context.Context, addr string, log *slog.Logger) error {
	if err := CheckAddr(addr); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for --pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("serving pprof", "addr", addr, "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Info("serving Go profiles", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return nil
}
