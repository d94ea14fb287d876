package vminit

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
	"golang.org/x/sys/unix"
)

// cgroupDir is where init mounts cgroup2 in the guest; envd's group is
// envdGroup under it.
const (
	cgroupDir = "/sys/fs/cgroup"
	envdGroup = cgroupDir + "/envd"
)

// envdCgroup makes envd's cgroup, with pids.max pids (0: no cap), and
// returns it open for CLONE_INTO_CGROUP, so that envd runs in it from its
// first instruction. /sys/fs/cgroup is read-only afterwards: the cap is
// the host's, not the sandbox's to raise.
func envdCgroup(pids int) (int, error) {
	if err := os.WriteFile(cgroupDir+"/cgroup.subtree_control", []byte("+pids"), 0); err != nil {
		return -1, fmt.Errorf("enabling the pids controller: %w", err)
	}
	if err := os.Mkdir(envdGroup, 0o755); err != nil {
		return -1, fmt.Errorf("making envd's cgroup: %w", err)
	}
	max := "max"
	if pids > 0 {
		max = strconv.Itoa(pids)
	}
	if err := os.WriteFile(envdGroup+"/pids.max", []byte(max), 0); err != nil {
		return -1, fmt.Errorf("setting envd's pids.max: %w", err)
	}
	fd, err := unix.Open(envdGroup, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening envd's cgroup: %w", err)
	}
	if err := unix.Mount("", cgroupDir, "", unix.MS_REMOUNT|unix.MS_BIND|roFlags, ""); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("making %s read-only: %w", cgroupDir, err)
	}
	return fd, nil
}

// stageArg is the argument init re-executes itself with as the envd
// stage.
const stageArg = "envd-stage"

// stageFd is where the stage reads its stageConfig.
const stageFd = 3

// stageConfig is what init tells the envd stage.
type stageConfig struct {
	EnvdArgs   []string
	EnvdToken  string
	NoNewPrivs bool
}

// startStage starts the envd stage in cgroup cg with output as its stdout
// and stderr, and returns its pid, which becomes envd's. The stage is
// init's own binary, re-executed: init itself stays unconfined (the
// seccomp filter refuses reboot, and clone3, which CLONE_INTO_CGROUP
// needs), so the confinement is set up in a process of its own that then
// becomes envd.
func startStage(cfg *Config, cg int, output *os.File) (int, error) {
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, fmt.Errorf("opening /dev/null: %w", err)
	}
	defer devNull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("making the envd stage's pipe: %w", err)
	}
	defer r.Close()
	// The configuration is small, far below the pipe's capacity.
	err = json.NewEncoder(w).Encode(stageConfig{EnvdArgs: cfg.EnvdArgs, EnvdToken: cfg.EnvdToken, NoNewPrivs: cfg.NoNewPrivs})
	w.Close()
	if err != nil {
		return 0, fmt.Errorf("writing the envd stage's configuration: %w", err)
	}
	// /proc/self/exe still reaches init's binary, in the initramfs now
	// out of sight.
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"/init", stageArg}, &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{},
		Files: []uintptr{devNull.Fd(), output.Fd(), output.Fd(), r.Fd()}, // stageFd
		Sys:   &syscall.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: cg},
	})
	if err != nil {
		return 0, fmt.Errorf("starting the envd stage: %w", err)
	}
	return pid, nil
}

// stageMain is the envd stage: it confines itself and executes envd. It
// returns only on error.
func stageMain() error {
	f := os.NewFile(stageFd, "stage")
	var cfg stageConfig
	err := json.NewDecoder(f).Decode(&cfg)
	f.Close()
	if err != nil {
		return fmt.Errorf("reading the configuration: %w", err)
	}
	// Nothing but stdin, stdout and stderr crosses into envd.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("closing inherited descriptors: %w", err)
	}
	if err := guest.Confine(cfg.NoNewPrivs); err != nil {
		return err
	}
	return guest.Envd{Args: cfg.EnvdArgs, Token: cfg.EnvdToken}.Exec()
}
