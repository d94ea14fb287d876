package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Descriptors the host passes to init.
const (
	initConfigFd = 3
	initStatusFd = 4
)

// envdLogLimit caps how much of envd's output init copies to the host log,
// since envd's output is partly sandbox-controlled.
const envdLogLimit = 8 << 20

// InitMain runs PID 1 of a sandbox: it is what the hidden `init` command
// calls, in the new namespaces that Start cloned. It reads its
// configuration from fd 3, builds the sandbox's filesystem, confines itself,
// starts envd, reports on fd 4, and reaps processes until envd exits. It
// returns only on error or when envd has exited.
func InitMain(args []string) error {
	if !IsInit(args) {
		return fmt.Errorf("init: unexpected arguments %q", args)
	}
	// Capabilities, no_new_privs and the cgroup namespace are per thread,
	// and envd is forked from this one.
	runtime.LockOSThread()

	status := os.NewFile(initStatusFd, "status")
	unix.CloseOnExec(initStatusFd)
	report := func(st initStatus) {
		_ = json.NewEncoder(status).Encode(st)
		status.Close()
	}
	cfgFile := os.NewFile(initConfigFd, "config")
	unix.CloseOnExec(initConfigFd)
	var cfg initConfig
	err := json.NewDecoder(cfgFile).Decode(&cfg)
	cfgFile.Close()
	if err != nil {
		err = fmt.Errorf("init: reading configuration: %w", err)
		report(initStatus{Error: err.Error()})
		return err
	}

	// Signals that would end a Go program by default are caught (and
	// dropped): only the host ends a sandbox. Caught, not ignored, so that
	// envd does not inherit SIG_IGN.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGHUP, unix.SIGINT, unix.SIGTERM, unix.SIGQUIT,
		unix.SIGUSR1, unix.SIGUSR2, unix.SIGPIPE, unix.SIGALRM, unix.SIGVTALRM, unix.SIGPROF)
	go func() {
		for range sigs {
		}
	}()

	envdPid, logr, err := setupSandbox(&cfg)
	if err != nil {
		err = fmt.Errorf("init: %w", err)
		report(initStatus{Error: err.Error()})
		return err
	}
	go func() {
		_, _ = io.Copy(os.Stderr, io.LimitReader(logr, envdLogLimit))
		_, _ = io.Copy(io.Discard, logr)
	}()
	// The OOM killer should pick what uses memory, not PID 1 (which would
	// end the sandbox). Set after forking envd, which keeps the default.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	report(initStatus{EnvdPid: envdPid, Finished: true})
	return reap(envdPid)
}

// setupSandbox does everything between the clone and envd running, and
// returns envd's pid and the read end of its output.
func setupSandbox(cfg *initConfig) (int, *os.File, error) {
	if cfg.UnshareCgroup {
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return 0, nil, fmt.Errorf("unsharing the cgroup namespace: %w", err)
		}
	}
	if err := buildRoot(cfg); err != nil {
		return 0, nil, err
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return 0, nil, fmt.Errorf("setting hostname: %w", err)
	}
	if cfg.Nameserver != "" {
		if err := writeResolvConf(cfg.Nameserver); err != nil {
			return 0, nil, err
		}
	}
	// Non-dumpable: nothing in the sandbox may open /proc/1/{exe,fd,root,mem}
	// (that takes CAP_SYS_PTRACE, which the bounding set does not keep).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, nil, fmt.Errorf("making init non-dumpable: %w", err)
	}
	if err := dropCapabilities(); err != nil {
		return 0, nil, err
	}
	if cfg.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return 0, nil, fmt.Errorf("setting no_new_privs: %w", err)
		}
	}
	if err := loadSeccomp(); err != nil {
		return 0, nil, err
	}

	devNull, err := os.Open("/dev/null")
	if err != nil {
		return 0, nil, err
	}
	defer devNull.Close()
	logr, logw, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	defer logw.Close()
	argv := append([]string{envdGuestPath}, cfg.EnvdArgs...)
	pid, err := syscall.ForkExec(envdGuestPath, argv, &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"},
		Files: []uintptr{devNull.Fd(), logw.Fd(), logw.Fd()},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		logr.Close()
		return 0, nil, fmt.Errorf("starting envd: %w", err)
	}
	return pid, logr, nil
}

// reap waits for every child (orphans are re-parented to init) until envd
// exits, and returns how it exited.
func reap(envdPid int) error {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("init: waiting for children: %w", err)
		}
		if pid != envdPid {
			continue
		}
		switch {
		case ws.Exited() && ws.ExitStatus() == 0:
			return nil
		case ws.Exited():
			return fmt.Errorf("init: envd exited with status %d", ws.ExitStatus())
		case ws.Signaled():
			return fmt.Errorf("init: envd killed by signal %v", ws.Signal())
		}
		return fmt.Errorf("init: envd ended: %v", ws)
	}
}

// writeResolvConf points the sandbox's resolver at the host's DNS filter on
// its gateway. It replaces whatever the template has there (a symlink into
// /run, say; resolved inside the new root, so it cannot point at the host).
// The file is only a convenience: the host redirects every DNS packet from
// the sandbox to the filter, whatever address it was sent to.
func writeResolvConf(nameserver string) error {
	if err := os.Remove("/etc/resolv.conf"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replacing /etc/resolv.conf: %w", err)
	}
	content := "nameserver " + nameserver + "\noptions edns0 trust-ad\n"
	if err := os.WriteFile("/etc/resolv.conf", []byte(content), 0o644); err != nil {
		return fmt.Errorf("writing /etc/resolv.conf: %w", err)
	}
	return nil
}
