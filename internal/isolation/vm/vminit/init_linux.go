package vminit

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

// Main runs the guest's PID 1 and does not return: once envd has exited,
// or when a step of the boot fails, it says why on the console in a line
// starting Halt (what the host quotes as the sandbox's exit reason)
// and reboots, which ends the VM (QEMU runs with -no-reboot).
func Main() {
	// Capabilities and no_new_privs are per thread, and the envd stage is
	// forked from this one.
	runtime.LockOSThread()
	if len(os.Args) == 2 && os.Args[1] == stageArg {
		err := stageMain()
		fmt.Fprintf(os.Stderr, "vminit: envd stage: %v\n", err)
		os.Exit(1)
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "vminit: not running as PID 1 (it is the init of a VM)")
		os.Exit(2)
	}
	guest.DropSignals()

	start := time.Now()
	envdPid, logged, err := boot()
	if err != nil {
		halt("%v", err)
	}
	fmt.Fprintf(os.Stderr, "vminit: envd started (pid %d, %v after init)\n", envdPid, time.Since(start).Round(time.Millisecond))
	go serveRequests()
	ws, err := guest.ReapUntil(envdPid)
	if err != nil {
		halt("%v", err)
	}
	// envd's last words first, unless something it started keeps the
	// pipe open.
	select {
	case <-logged:
	case <-time.After(200 * time.Millisecond):
	}
	halt("envd exited: %s", guest.ExitStatus(ws))
}

// halt prints the reason and reboots the VM.
func halt(format string, args ...any) {
	fmt.Fprintf(os.Stderr, Halt+format+"\n", args...)
	unix.Sync()
	err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	// Only a PID 1 without CAP_SYS_BOOT gets here; its exit panics the
	// kernel, which with panic=-1 also reboots.
	fmt.Fprintf(os.Stderr, "vminit: reboot: %v\n", err)
	os.Exit(1)
}

// boot does everything between the kernel starting init and envd
// running, and returns envd's pid and a channel closed once envd's output
// has been copied to the console.
func boot() (int, <-chan struct{}, error) {
	if err := mountEarly(); err != nil {
		return 0, nil, err
	}
	cfg, err := readConfig()
	if err != nil {
		return 0, nil, err
	}
	if err := loadModules(); err != nil {
		return 0, nil, err
	}
	if err := waitFor(RootDisk, ToolsDisk); err != nil {
		return 0, nil, err
	}
	trees, err := mountDisks(cfg)
	if err != nil {
		return 0, nil, err
	}
	volumes, err := mountVolumes(cfg)
	if err != nil {
		return 0, nil, err
	}
	if err := switchRoot(); err != nil {
		return 0, nil, err
	}
	if err := buildRoot(cfg, trees, volumes); err != nil {
		return 0, nil, err
	}
	if err := setupNetwork(cfg.Network); err != nil {
		return 0, nil, err
	}
	// Everything the guest's kernel will run is loaded by now; root in
	// the sandbox may not add to it (the switch cannot be turned back).
	if err := os.WriteFile("/proc/sys/kernel/modules_disabled", []byte("1"), 0); err != nil {
		return 0, nil, fmt.Errorf("disabling module loading: %w", err)
	}
	// Non-dumpable: nothing in the sandbox may open /proc/1/{exe,fd,root,mem}
	// (that takes CAP_SYS_PTRACE, which the bounding set does not keep).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, nil, fmt.Errorf("making init non-dumpable: %w", err)
	}
	cg, err := envdCgroup(cfg.Pids)
	if err != nil {
		return 0, nil, err
	}
	defer unix.Close(cg)

	logr, logw, err := os.Pipe()
	if err != nil {
		return 0, nil, fmt.Errorf("making envd's output pipe: %w", err)
	}
	pid, err := startStage(cfg, cg, logw)
	logw.Close()
	if err != nil {
		logr.Close()
		return 0, nil, err
	}
	// The OOM killer should pick what uses memory, not PID 1 (whose end
	// panics the guest). Set after forking envd, which keeps the default.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		guest.CopyLines(os.Stdout, io.LimitReader(logr, guest.EnvdLogLimit), "envd: ")
		_, _ = io.Copy(io.Discard, logr)
	}()
	return pid, logged, nil
}

// readConfig reads the host's Config and deletes it from the initramfs:
// it holds envd's token.
func readConfig() (*Config, error) {
	b, err := os.ReadFile(ConfigPath)
	if err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	if err := os.Remove(ConfigPath); err != nil {
		return nil, fmt.Errorf("removing the configuration: %w", err)
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	return &cfg, nil
}

// waitFor waits until each device node exists: the kernel probes the
// virtio devices asynchronously after their modules load, and under TCG
// that takes a while.
func waitFor(devs ...string) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, d := range devs {
		for {
			_, err := os.Stat(d)
			if err == nil {
				break
			}
			if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
				return fmt.Errorf("waiting for %s: %w", d, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}
