package envd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestRunHelpDocumentsEveryFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"--help"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-addr", "0.0.0.0:49983", "-default-user", "-default-workdir", "-access-token-fd", "-version"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestRunVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"--version"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(stdout.String()); got != Version {
		t.Errorf("--version printed %q, want %q", got, Version)
	}
}

func TestRunRejectsStrayArguments(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"serve"}, &stdout, &stderr); err == nil {
		t.Error("Run accepted a stray argument")
	}
}

func TestRunHelpGoesToStdoutOnly(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"-h"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if stderr.Len() != 0 || !strings.HasPrefix(stdout.String(), "Usage: envd") {
		t.Errorf("stdout %q, stderr %q; want the usage on stdout only", stdout.String(), stderr.String())
	}
	err := Run(context.Background(), []string{"--nope"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--help") {
		t.Errorf("unknown flag: error %v, want one pointing at --help", err)
	}
}

// TestRunTakesTheAccessTokenFromItsFd starts envd with a token on a pipe:
// from the first request on, the token is required.
func TestRunTakesTheAccessTokenFromItsFd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	fd := tokenPipe(t, "tok-from-fd\n")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--addr", addr, "--access-token-fd", strconv.Itoa(fd)}, io.Discard, io.Discard)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	get := func(token string) int {
		for deadline := time.Now().Add(5 * time.Second); ; {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/envs", nil)
			if token != "" {
				req.Header.Set("X-Access-Token", token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
				return resp.StatusCode
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET /envs: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if got := get(""); got != http.StatusUnauthorized {
		t.Errorf("GET /envs without the token: %d, want 401", got)
	}
	if got := get("tok-from-fd"); got != http.StatusOK {
		t.Errorf("GET /envs with the token: %d, want 200", got)
	}
}

func TestReadAccessToken(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
		ok                  bool
	}{
		{"token", "abc", "abc", true},
		{"trailing newline", "abc\n", "abc", true},
		{"empty", "", "", false},
		{"blank", " \n", "", false},
		{"too long", strings.Repeat("a", maxAccessToken+1), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd := tokenPipe(t, tc.content)
			got, err := readAccessToken(fd)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("readAccessToken = %q, %v; want %q, ok %v", got, err, tc.want, tc.ok)
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
				t.Errorf("fd %d still open after readAccessToken (%v)", fd, err)
			}
		})
	}
	if _, err := readAccessToken(-2); err == nil {
		t.Error("readAccessToken(-2) succeeded")
	}
}

// tokenPipe returns the read end of a pipe holding content, as a bare fd
// that the caller owns.
func tokenPipe(t *testing.T, content string) int {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.WriteString(content); err != nil {
		t.Fatal(err)
	}
	w.Close()
	fd, err := unix.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return fd
}
