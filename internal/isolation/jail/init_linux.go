package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
)

// Descriptors the host passes to init.
const (
	initConfigFd = 3
	initStatusFd = 4
)

// ExitIfInit runs the sandbox init and exits when the process's arguments
// ask for it (IsInit), and returns otherwise. Test binaries, which the jail
// re-executes as init the way it does the agent-sandbox binary, call it
// first in TestMain.
func ExitIfInit() {
	if !IsInit(os.Args[1:]) {
		return
	}
	if err := InitMain(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

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

	if cfg.Export != nil {
		// This process is the exporter Stop started (exportChanges).
		if err := exportMain(cfg.Export); err != nil {
			report(initStatus{Error: err.Error()})
			return err
		}
		report(initStatus{Finished: true})
		return nil
	}
	if cfg.EnvdStage != nil {
		// This process is the envd stage (forkEnvdStage): it returns only
		// if it could not execute envd.
		err := fmt.Errorf("envd stage: %w", execEnvd(&cfg))
		report(initStatus{Error: err.Error()})
		return err
	}
	// Before anything is started: nothing of the host's but fds 0 to
	// initStatusFd may cross into the sandbox. (The envd stage is started
	// by init with those only, so it has nothing more; and by then init is
	// pivoting away the /proc this reads.)
	if err := closeInheritedFds(initStatusFd); err != nil {
		err = fmt.Errorf("init: %w", err)
		report(initStatus{Error: err.Error()})
		return err
	}

	guest.DropSignals()

	res, err := setupSandbox(&cfg, args)
	if err != nil {
		err = fmt.Errorf("init: %w", err)
		report(initStatus{Error: err.Error()})
		return err
	}
	go func() {
		_, _ = io.Copy(os.Stderr, io.LimitReader(res.logr, guest.EnvdLogLimit))
		_, _ = io.Copy(io.Discard, res.logr)
	}()
	// The OOM killer should pick what uses memory, not PID 1 (which would
	// end the sandbox). Set after forking envd, which keeps the default.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	if res.userns {
		if err := dropToHostID(int(cfg.Userns.Base)); err != nil {
			err = fmt.Errorf("init: %w", err)
			report(initStatus{Error: err.Error()})
			return err
		}
	}
	report(initStatus{EnvdPid: res.envdPid, Userns: res.userns, UsernsFallback: res.fallback, DiskDev: res.diskDev, Finished: true})
	return reap(res.envdPid)
}

// setupResult is what setupSandbox started.
type setupResult struct {
	envdPid  int
	logr     *os.File // the read end of envd's output
	userns   bool     // envd runs in a user namespace
	fallback string   // why not, when one was asked for and the host refused
	diskDev  uint64   // the loop device of the sandbox's disk
}

// setupSandbox does everything between the clone and envd running. args
// are init's own, for the envd stage.
func setupSandbox(cfg *initConfig, args []string) (res setupResult, err error) {
	if cfg.UnshareCgroup {
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return res, fmt.Errorf("unsharing the cgroup namespace: %w", err)
		}
	}
	// Nothing mounted here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return res, fmt.Errorf("making mounts private: %w", err)
	}
	logr, logw, err := os.Pipe()
	if err != nil {
		return res, err
	}
	defer logw.Close()
	defer func() {
		if err != nil {
			logr.Close()
		}
	}()
	lowers, base := append(slices.Clone(cfg.Layers), cfg.RootFS), 0
	var stage *envdStage
	if cfg.Userns != nil {
		if stage, res.fallback, err = prepareUserns(cfg, args, logw); err != nil {
			return res, err
		}
		if stage != nil {
			defer func() {
				if err != nil {
					stage.abort()
				}
			}()
			lowers, base = append(slices.Clone(cfg.LayerDirs), cfg.LowerDir), int(cfg.Userns.Base)
		}
	}
	var userns *os.File
	if stage != nil {
		userns = stage.userns
	}
	volumes, err := cloneVolumes(cfg.Volumes, userns)
	if err != nil {
		return res, err
	}
	defer closeFds(volumes)
	if res.diskDev, err = disk.Mount(cfg.Disk, cfg.DiskDir, unix.MS_NODEV); err != nil {
		return res, err
	}
	if err := buildRoot(cfg, lowers, base, volumes); err != nil {
		return res, err
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return res, fmt.Errorf("setting hostname: %w", err)
	}
	if cfg.Nameserver != "" {
		if err := guest.WriteResolvConf(cfg.Nameserver, base); err != nil {
			return res, err
		}
	}
	// Non-dumpable: nothing in the sandbox may open /proc/1/{exe,fd,root,mem}
	// (that takes CAP_SYS_PTRACE, which the bounding set does not keep).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return res, fmt.Errorf("making init non-dumpable: %w", err)
	}
	if err := guest.Confine(cfg.NoNewPrivs); err != nil {
		return res, err
	}
	res.logr = logr
	if stage != nil {
		if err := stage.run(cfg); err != nil {
			return res, err
		}
		res.envdPid, res.userns = stage.pid, true
		return res, nil
	}

	devNull, err := os.Open("/dev/null")
	if err != nil {
		return res, err
	}
	defer devNull.Close()
	res.envdPid, err = envdOf(cfg).Start(devNull, logw)
	return res, err
}

// prepareUserns starts the envd stage in a user namespace and mounts the
// template idmapped through it at cfg.LowerDir, and each layer at its
// cfg.LayerDirs entry. When the kernel or the
// template's file system refuses and the user namespace is not required,
// it returns no stage and the reason instead, and the sandbox starts
// without one.
func prepareUserns(cfg *initConfig, args []string, logw *os.File) (*envdStage, string, error) {
	// Go's ForkExec writes the child's maps through /proc; it must be this
	// pid namespace's (this one is detached with the old root).
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, "", fmt.Errorf("mounting the sandbox's /proc: %w", err)
	}
	stage, err := forkEnvdStage(cfg.Userns.Base, args, logw)
	if err == nil {
		err = idmapTree(cfg.RootFS, cfg.LowerDir, stage.userns)
		for i := 0; err == nil && i < len(cfg.Layers); i++ {
			err = idmapTree(cfg.Layers[i], cfg.LayerDirs[i], stage.userns)
		}
		if err != nil {
			stage.abort()
		}
	}
	var refused usernsRefused
	switch {
	case err == nil:
		return stage, "", nil
	case errors.As(err, &refused) && !cfg.Userns.Required:
		return nil, err.Error(), nil
	}
	return nil, "", err
}

// envdOf is how init starts the sandbox's envd.
func envdOf(cfg *initConfig) guest.Envd {
	return guest.Envd{Args: cfg.EnvdArgs, Token: cfg.EnvdToken}
}

// reap waits for every child (orphans are re-parented to init) until envd
// exits, and returns how it exited.
func reap(envdPid int) error {
	ws, err := guest.ReapUntil(envdPid)
	if err != nil {
		return fmt.Errorf("init: %w", err)
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
