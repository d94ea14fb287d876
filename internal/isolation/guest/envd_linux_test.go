package guest

import (
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

func TestEnvdArgv(t *testing.T) {
	for _, tc := range []struct {
		name string
		envd Envd
		want []string
	}{
		{"no token", Envd{Args: []string{"--port", "49983"}}, []string{EnvdPath, "--port", "49983"}},
		{"token", Envd{Args: []string{"--port", "49983"}, Token: "secret"}, []string{EnvdPath, "--port", "49983", "--access-token-fd", "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.envd.Argv()
			if !slices.Equal(got, tc.want) {
				t.Errorf("Argv() = %q, want %q", got, tc.want)
			}
			if slices.Contains(got, tc.envd.Token) && tc.envd.Token != "" {
				t.Errorf("the token is on the command line: %q", got)
			}
		})
	}
}

// TestTokenPipe reads the token back from EnvdTokenFd, as envd does, after
// passTokenFd put the pipe there; the pipe holds the token and nothing
// more (EOF after it).
func TestTokenPipe(t *testing.T) {
	// Whatever is at EnvdTokenFd now (the test binary's own) is saved and
	// put back, so the test leaves the process as it found it.
	saved, err := unix.FcntlInt(EnvdTokenFd, unix.F_DUPFD_CLOEXEC, 10)
	if err == nil {
		t.Cleanup(func() { _ = unix.Dup3(saved, EnvdTokenFd, unix.O_CLOEXEC); unix.Close(saved) })
	} else {
		t.Cleanup(func() { unix.Close(EnvdTokenFd) })
	}
	fd, err := tokenPipe("tok-secret")
	if err != nil {
		t.Fatal(err)
	}
	if err := passTokenFd(fd); err != nil {
		t.Fatal(err)
	}
	if fd != EnvdTokenFd {
		unix.Close(fd)
	}
	flags, err := unix.FcntlInt(EnvdTokenFd, unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC != 0 {
		t.Errorf("fd %d flags %#x (%v): want inheritable", EnvdTokenFd, flags, err)
	}
	dup, err := unix.Dup(EnvdTokenFd)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), "token")
	defer f.Close()
	b := make([]byte, 64)
	n, _ := f.Read(b)
	if got := string(b[:n]); got != "tok-secret" {
		t.Errorf("read %q from the token pipe", got)
	}
	if n, err := f.Read(b); n != 0 || err == nil {
		t.Errorf("after the token: %d bytes, %v; want EOF", n, err)
	}
}
