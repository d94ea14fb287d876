package pprofserve

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestCheckAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:6060": true,
		"[::1]:0":        true,
		"0.0.0.0:6060":   false,
		"10.1.2.3:6060":  false,
		"localhost:6060": false, // a name could resolve anywhere
		"127.0.0.1":      false,
	} {
		err := CheckAddr(addr)
		if (err == nil) != ok {
			t.Errorf("CheckAddr(%q) = %v, want ok=%v", addr, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), addr) {
			t.Errorf("CheckAddr(%q) = %v: does not name the address", addr, err)
		}
	}
}

func TestStartServesProfiles(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Start(ctx, addr, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), "goroutine profile:") {
		t.Fatalf("GET goroutine profile: %s: %.200s", res.Status, b)
	}
	if err := Start(ctx, "0.0.0.0:0", slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("Start on 0.0.0.0: no error")
	}
}
