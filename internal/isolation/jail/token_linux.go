package jail

import (
	"fmt"
	"strconv"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"golang.org/x/sys/unix"
)

// envdTokenFd is the descriptor envd reads its access token from
// (envd --access-token-fd): the read end of a pipe init fills, so that the
// token is in no command line or environment that a process in the
// sandbox can read, and envd requires it from its first request.
const envdTokenFd = 3

// envdArgv is envd's command line: its configured arguments and, when it
// has an access token, where to read it.
func envdArgv(cfg *initConfig) []string {
	argv := append([]string{isolation.EnvdGuestPath}, cfg.EnvdArgs...)
	if cfg.EnvdToken != "" {
		argv = append(argv, "--access-token-fd", strconv.Itoa(envdTokenFd))
	}
	return argv
}

// tokenPipe returns the read end (close-on-exec) of a pipe that holds
// token and nothing more. The token is far below the pipe's capacity, so
// the write does not block.
func tokenPipe(token string) (int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, fmt.Errorf("making envd's token pipe: %w", err)
	}
	defer unix.Close(p[1])
	if _, err := unix.Write(p[1], []byte(token)); err != nil {
		unix.Close(p[0])
		return -1, fmt.Errorf("writing envd's token: %w", err)
	}
	return p[0], nil
}

// passTokenFd makes fd, a tokenPipe, envdTokenFd and inheritable by the
// next exec.
func passTokenFd(fd int) error {
	if fd == envdTokenFd {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0)
		return err
	}
	return unix.Dup3(fd, envdTokenFd, 0)
}
