package guest

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Start forks and executes envd in a new session, with stdin and output
// as its descriptors 0 to 2 and, with a token, the token pipe as
// EnvdTokenFd; nothing else is inherited. It returns envd's pid.
func (e Envd) Start(stdin, output *os.File) (int, error) {
	files := []uintptr{stdin.Fd(), output.Fd(), output.Fd()}
	if e.Token != "" {
		tok, err := tokenPipe(e.Token)
		if err != nil {
			return 0, err
		}
		defer unix.Close(tok)
		files = append(files, uintptr(tok)) // EnvdTokenFd
	}
	pid, err := syscall.ForkExec(EnvdPath, e.Argv(), &syscall.ProcAttr{
		Dir:   "/",
		Env:   e.Env(),
		Files: files,
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return 0, fmt.Errorf("starting envd: %w", err)
	}
	return pid, nil
}

// Exec replaces the calling process with envd, after putting the token
// pipe at EnvdTokenFd. The caller has set up descriptors 0 to 2 and closes
// everything else on exec. It returns only on error.
func (e Envd) Exec() error {
	if e.Token != "" {
		tok, err := tokenPipe(e.Token)
		if err != nil {
			return err
		}
		if err := passTokenFd(tok); err != nil {
			return fmt.Errorf("handing envd its token: %w", err)
		}
	}
	if err := unix.Exec(EnvdPath, e.Argv(), e.Env()); err != nil {
		return fmt.Errorf("executing envd: %w", err)
	}
	return nil
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

// passTokenFd makes fd, a tokenPipe, EnvdTokenFd and inheritable by the
// next exec.
func passTokenFd(fd int) error {
	if fd == EnvdTokenFd {
		_, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0)
		return err
	}
	return unix.Dup3(fd, EnvdTokenFd, 0)
}
