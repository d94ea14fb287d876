package jail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RunSpec is one command run to completion in a jail of its own: what a
// template build does for each RUN step. The jail is a sandbox's, less the
// parts that belong to a long-lived sandbox: the root is an overlay of
// host directories (Lower, read-only; Upper receives every change), the
// command replaces envd, and there is no disk image, cgroup or network
// namespace, so the command shares the host's network as `docker build`
// does by default.
type RunSpec struct {
	// Lower are the overlay's read-only layers, top first.
	Lower []string
	// Upper and Work are the overlay's upper and work directories: empty,
	// on one filesystem. Upper holds the changes afterwards.
	Upper, Work string
	// MountDir is an empty directory where the layers are mounted, in
	// the jail's own mount namespace only.
	MountDir string
	// Args is the command; Args[0] is an absolute path in the image.
	Args []string
	// Env is the command's whole environment.
	Env []string
	// Dir is its working directory, created (owned by UID:GID) if missing.
	Dir string
	// UID, GID and Groups are its credentials.
	UID, GID uint32
	Groups   []uint32
	// Hostname defaults to "build".
	Hostname string
	// Files are host files bind-mounted read-only over existing files in
	// the image for the run (guest path: host path), such as the host's
	// resolv.conf. They do not end up in Upper.
	Files map[string]string
	// Output receives the command's stdout and stderr; nil discards.
	Output io.Writer
	// InitPath and InitArgs re-execute this program as the jail's init,
	// as Config's do; defaults /proc/self/exe and "init".
	InitPath string
	InitArgs []string
}

// runCommand is what init runs in a one-shot jail, and over what.
type runCommand struct {
	Lower      []string `json:"lower"`       // read-only layers, top first
	LowerMount string   `json:"lower_mount"` // where they are stacked, when several
	Args       []string `json:"args"`
	Env        []string `json:"env"`
	Dir        string   `json:"dir"`
	UID        uint32   `json:"uid"`
	GID        uint32   `json:"gid"`
	Groups     []uint32 `json:"groups,omitempty"`
}

// Run runs s.Args in a new jail over s's layers and returns its exit code
// (128+n when killed by signal n). An error means the jail could not be
// set up, or ctx ended; the command's own failure is only its exit code.
// When Run returns, nothing it started is left running or mounted.
func Run(ctx context.Context, s RunSpec) (int, error) {
	if len(s.Args) == 0 || !filepath.IsAbs(s.Args[0]) || !filepath.IsAbs(s.Dir) {
		return 0, fmt.Errorf("jail run: want an absolute command path and working directory, got %q in %q", s.Args, s.Dir)
	}
	paths := append([]string{s.Upper, s.Work, s.MountDir}, s.Lower...)
	var files []toolMount
	for guest, host := range s.Files {
		files = append(files, toolMount{Host: host, Guest: guest})
		paths = append(paths, host, guest)
	}
	for _, p := range paths {
		if !filepath.IsAbs(p) {
			return 0, fmt.Errorf("jail run: %q is not an absolute path", p)
		}
	}
	if len(s.Lower) == 0 {
		return 0, errors.New("jail run: no lower layer")
	}
	cfg := Config{InitPath: s.InitPath, InitArgs: s.InitArgs}
	cfg.setDefaults()
	hostname := s.Hostname
	if hostname == "" {
		hostname = "build"
	}
	icfg := initConfig{
		ID: "build", Upper: s.Upper, Work: s.Work, RootDir: filepath.Join(s.MountDir, "root"),
		Tools: files, Hostname: hostname,
		Run: &runCommand{
			Lower: s.Lower, LowerMount: filepath.Join(s.MountDir, "lower"),
			Args: s.Args, Env: s.Env, Dir: s.Dir, UID: s.UID, GID: s.GID, Groups: s.Groups,
		},
	}
	for _, d := range []string{icfg.RootDir, icfg.Run.LowerMount} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return 0, fmt.Errorf("jail run: %w", err)
		}
	}

	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer cfgR.Close()
	defer cfgW.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer statR.Close()
	defer statW.Close()

	cmd := exec.Command(cfg.InitPath, cfg.InitArgs...)
	cmd.Args[0] = "agent-sandbox-build"
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = s.Output, s.Output
	cmd.ExtraFiles = []*os.File{cfgR, statW} // fds 3 and 4
	cmd.SysProcAttr = &unix.SysProcAttr{
		Setsid:     true,
		Pdeathsig:  unix.SIGKILL,
		Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC,
	}
	// Background processes of the command die with init (PID 1 of their
	// namespace); this only bounds how long a stuck output copy may take.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("jail run: starting init: %w", err)
	}
	cfgR.Close()
	statW.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := json.NewEncoder(cfgW).Encode(&icfg); err != nil {
		_ = cmd.Process.Kill()
		<-done
		return 0, fmt.Errorf("jail run: sending init its configuration: %w", err)
	}
	cfgW.Close()

	stat := make(chan initStatus, 1)
	go func() {
		var st initStatus
		b, _ := io.ReadAll(io.LimitReader(statR, 64<<10))
		if err := json.Unmarshal(b, &st); err != nil {
			st.Error = "init exited without a word"
		}
		stat <- st
	}()
	var waitErr error
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return 0, fmt.Errorf("jail run: %w", context.Cause(ctx))
	}
	st := <-stat
	switch {
	case st.Error != "":
		return 0, fmt.Errorf("jail run: %s", st.Error)
	case !st.Finished:
		return 0, fmt.Errorf("jail run: init ended without reporting: %v", waitErr)
	}
	return st.ExitCode, nil
}

// runInit is init's part of Run: set up the jail as setupSandbox does for
// a sandbox (over the stacked layers, without envd), run the command as
// its only child, reap until it exits, report its exit code.
func runInit(cfg *initConfig, report func(initStatus)) error {
	fail := func(err error) error {
		err = fmt.Errorf("init: %w", err)
		report(initStatus{Error: err.Error()})
		return err
	}
	r := cfg.Run
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail(fmt.Errorf("making mounts private: %w", err))
	}
	lower, err := stackLayers(r.Lower, r.LowerMount)
	if err != nil {
		return fail(err)
	}
	if err := buildRoot(cfg, lower, 0); err != nil {
		return fail(err)
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fail(fmt.Errorf("setting hostname: %w", err))
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("making init non-dumpable: %w", err))
	}
	if err := confine(cfg); err != nil {
		return fail(err)
	}
	if err := mkdirOwned(r.Dir, int(r.UID), int(r.GID)); err != nil {
		return fail(fmt.Errorf("working directory %s: %w", r.Dir, err))
	}
	devNull, err := os.Open("/dev/null")
	if err != nil {
		return fail(err)
	}
	defer devNull.Close()
	pid, err := syscall.ForkExec(r.Args[0], r.Args, &syscall.ProcAttr{
		Dir:   r.Dir,
		Env:   r.Env,
		Files: []uintptr{devNull.Fd(), 1, 2},
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Credential: &syscall.Credential{Uid: r.UID, Gid: r.GID, Groups: r.Groups},
		},
	})
	if err != nil {
		return fail(fmt.Errorf("starting %s: %w", r.Args[0], err))
	}
	ws, err := reapUntil(pid)
	if err != nil {
		return fail(err)
	}
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	report(initStatus{Finished: true, ExitCode: code})
	return nil
}

// stackLayers returns the one directory that shows layers (top first):
// the layer itself when there is one, else a read-only overlay of them
// mounted at dir. Redirects and metacopy are off in the jail's overlay
// over it, so that the upper it leaves is a plain directory of changes.
func stackLayers(layers []string, dir string) (string, error) {
	if len(layers) == 1 {
		return layers[0], nil
	}
	for _, p := range layers {
		if strings.ContainsAny(p, ",:\\") {
			return "", fmt.Errorf("path %q cannot be an overlay option", p)
		}
	}
	opts := "lowerdir=" + strings.Join(layers, ":")
	if err := unix.Mount("overlay", dir, "overlay", unix.MS_RDONLY|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("stacking %d layers: %w", len(layers), err)
	}
	return dir, nil
}

// mkdirOwned makes dir and its missing parents, each owned by uid:gid, as
// Docker does for a WORKDIR that does not exist. An existing dir is left
// alone.
func mkdirOwned(dir string, uid, gid int) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return errors.New("not a directory")
		}
		return nil
	}
	if err := mkdirOwned(filepath.Dir(dir), uid, gid); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Lchown(dir, uid, gid)
}
