package gvinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
	"golang.org/x/sys/unix"
)

// Main runs the role os.Args asks for and does not return.
func Main() {
	var err error
	switch {
	case len(os.Args) == 2 && os.Args[1] == LaunchArg:
		err = launch() // returns only on error
	case len(os.Args) == 2 && os.Args[1] == ProbeArg:
		err = probe()
		if err == nil {
			os.Exit(0)
		}
	case len(os.Args) == 1:
		err = initMain()
	default:
		err = fmt.Errorf("unexpected arguments %q", os.Args[1:])
	}
	fmt.Fprintf(os.Stderr, ReasonPrefix+"%v\n", err)
	os.Exit(1)
}

// probe prints what it finds of the kernel it runs on.
func probe() error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	r := ProbeResult{Kernel: unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])}
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, "/", 0, unix.STATX_BASIC_STATS, &st); err != nil {
		return fmt.Errorf("statx: %w", err)
	}
	err := unix.Statx(unix.AT_FDCWD, "/", unix.AT_NO_AUTOMOUNT, unix.STATX_BASIC_STATS, &st)
	r.StatxNoAutomountRefused = errors.Is(err, unix.EINVAL)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Printf("%s%s\n", ProbePrefix, b)
	return nil
}

// initMain is PID 1 of the sandbox. It returns once envd has exited (an
// error saying how) or when a step before failed.
func initMain() error {
	// Capabilities and no_new_privs are per thread, and envd is forked
	// from this one.
	runtime.LockOSThread()
	if os.Getpid() != 1 {
		return errors.New("not running as PID 1 (it is the init of a gVisor sandbox)")
	}
	guest.DropSignals()
	start := time.Now()
	cfg, err := readConfig()
	if err != nil {
		return err
	}
	if cfg.Nameserver != "" {
		if err := guest.WriteResolvConf(cfg.Nameserver, 0); err != nil {
			return err
		}
	}
	// Non-dumpable: nothing in the sandbox may open /proc/1/{exe,fd,mem}.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("making init non-dumpable: %w", err)
	}
	if err := guest.Confine(cfg.NoNewPrivs); err != nil {
		return err
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devNull.Close()
	logr, logw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("making envd's output pipe: %w", err)
	}
	pid, err := guest.Envd{Args: cfg.EnvdArgs, Token: cfg.EnvdToken}.Start(devNull, logw)
	logw.Close()
	if err != nil {
		return err
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		guest.CopyLines(os.Stdout, io.LimitReader(logr, guest.EnvdLogLimit), "envd: ")
		_, _ = io.Copy(io.Discard, logr)
	}()
	fmt.Fprintf(os.Stderr, "gvinit started envd (pid %d, %v after init)\n", pid, time.Since(start).Round(time.Millisecond))
	ws, err := guest.ReapUntil(pid)
	if err != nil {
		return err
	}
	// envd's last words first, unless something it started keeps the
	// pipe open.
	select {
	case <-logged:
	case <-time.After(200 * time.Millisecond):
	}
	return fmt.Errorf("envd exited: %s", guest.ExitStatus(ws))
}

// readConfig reads the Config from stdin, to its end, and puts /dev/null
// there: once read, the token is in no descriptor of the sandbox's.
func readConfig() (*Config, error) {
	b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	null, err := unix.Open(os.DevNull, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Dup3(null, 0, 0); err != nil {
		return nil, fmt.Errorf("closing the configuration: %w", err)
	}
	unix.Close(null)
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	return &cfg, nil
}
