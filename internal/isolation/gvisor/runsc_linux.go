package gvisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/cgroup"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/gvisor/gvinit"
	"github.com/agent-sandbox/agent-sandbox/internal/network"
	"golang.org/x/sys/unix"
)

// Files in a sandbox directory.
const (
	imageFile  = "disk.ext4"
	diskDir    = "disk"   // mount point of the image, in the launcher's mount namespace only
	rootDir    = "root"   // mount point of the overlay, likewise: runsc's root
	bundleDir  = "bundle" // runsc's bundle: config.json
	runscDir   = "runsc"  // runsc's --root: its state of the sandbox
	logFile    = "init.log"
	runscLog   = "runsc.log"
	specFile   = "config.json"
	probeDir   = ".probe" // not a sandbox ID (isolation.ValidID), so never a leftover
	libDir     = ".lib"   // the statx shim, likewise
	probeGroup = "probe"
)

// runscArgs are the global flags of every runsc command about the sandbox
// in dir: its state there, the platform, and host networking (see the
// package doc: runsc's netstack is refused in a namespace of ours).
func (b *Backend) runscArgs(dir string, args ...string) []string {
	return append([]string{
		"--root=" + filepath.Join(dir, runscDir),
		"--platform=" + b.platform,
		"--network=host",
		"--log=" + filepath.Join(dir, runscLog),
	}, args...)
}

// runsc runs a runsc command about the sandbox in dir from inside its
// network namespace ns (runsc's control socket is an abstract one, which
// belongs to a network namespace) and returns its standard output.
func (b *Backend) runsc(ctx context.Context, ns *network.Namespace, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, b.cfg.Runsc, b.runscArgs(dir, args...)...)
	cmd.Env = []string{}
	cmd.Dir = "/"
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := ns.Do(cmd.Start); err != nil {
		return nil, fmt.Errorf("runsc %s: %w", args[0], err)
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("runsc %s: %w: %s", args[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out.Bytes(), nil
}

// containerState is what `runsc state` says of a sandbox.
type containerState struct {
	Status string `json:"status"` // created, running, paused, stopped
	Pid    int    `json:"pid"`    // the sandbox process (the sentry), on the host
}

func (b *Backend) state(ctx context.Context, ns *network.Namespace, id string) (containerState, error) {
	out, err := b.runsc(ctx, ns, b.dir(id), "state", id)
	if err != nil {
		return containerState{}, err
	}
	var st containerState
	if err := json.Unmarshal(out, &st); err != nil {
		return containerState{}, fmt.Errorf("runsc state: %w", err)
	}
	return st, nil
}

// probeTimeout bounds one platform's probe: runsc's kvm platform on a
// /dev/kvm that is not hardware virtualisation hangs rather than fails.
const probeTimeout = 15 * time.Second

// choosePlatform returns the first platform of candidates that runs a
// probe sandbox, what the probe found there, and why each one before it
// was passed over.
func (b *Backend) choosePlatform(ctx context.Context, candidates []string) (string, gvinit.ProbeResult, map[string]string, error) {
	passed := map[string]string{}
	for _, p := range candidates {
		if p == "kvm" {
			if why := hardwareKVM(); why != "" {
				passed[p] = why
				continue
			}
		}
		res, err := b.probe(ctx, p)
		if err == nil {
			b.cfg.Log.Debug("gvisor: platform probe", "platform", p, "kernel", res.Kernel,
				"statx_no_automount_refused", res.StatxNoAutomountRefused)
			return p, res, passed, nil
		}
		passed[p] = err.Error()
	}
	var whys []string
	for _, p := range candidates {
		whys = append(whys, p+": "+passed[p])
	}
	return "", gvinit.ProbeResult{}, passed, fmt.Errorf("no gVisor platform runs here (%s)", strings.Join(whys, "; "))
}

// hardwareKVM says why /dev/kvm is not hardware virtualisation, or "". A
// /dev/kvm without kvm_intel or kvm_amd (kvm_pvm, say) runs only guests
// built for it.
func hardwareKVM() string {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return fmt.Sprintf("/dev/kvm: %v", err)
	}
	for _, m := range []string{"kvm_intel", "kvm_amd"} {
		if _, err := os.Stat(filepath.Join("/sys/module", m)); err == nil {
			return ""
		}
	}
	return "/dev/kvm is there but neither kvm_intel nor kvm_amd is loaded: no hardware virtualisation"
}

// probe runs the helper's probe in a throwaway gVisor sandbox on platform
// (runsc do, the host's file system read-only under a scratch overlay, no
// network) and returns what it found. Its processes run in a cgroup of
// their own, which is killed whatever happens.
func (b *Backend) probe(ctx context.Context, platform string) (_ gvinit.ProbeResult, err error) {
	var res gvinit.ProbeResult
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	dir := filepath.Join(b.cfg.StateDir, probeDir, platform)
	if err := os.RemoveAll(dir); err != nil {
		return res, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	name := b.cfg.CgroupParent + "/" + probeGroup + "-" + platform
	// One a server left when it died probing goes first.
	if err := cgroup.Remove(ctx, name); err != nil {
		return res, err
	}
	cg, err := cgroup.Create(name, cgroup.Limits{})
	if err != nil {
		return res, err
	}
	defer func() {
		if rerr := cgroup.Remove(context.WithoutCancel(ctx), name); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	cmd := exec.Command(b.cfg.Runsc, "--root="+dir, "--platform="+platform, "--network=none",
		"--log="+filepath.Join(dir, runscLog), "do", "-quiet", "-cwd", "/", b.cfg.Init, gvinit.ProbeArg)
	cmd.Env = []string{}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := startIn(cg, cmd); err != nil {
		return res, err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		_ = cg.Kill(context.WithoutCancel(ctx))
		<-waited
		return res, fmt.Errorf("the probe sandbox did not finish in %v", probeTimeout)
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if j, ok := strings.CutPrefix(l, gvinit.ProbePrefix); ok && err == nil {
			if err := json.Unmarshal([]byte(j), &res); err != nil {
				return res, fmt.Errorf("reading the probe's result %q: %w", j, err)
			}
			return res, nil
		}
	}
	return res, fmt.Errorf("the probe sandbox did not run (%v): %s", err, lastLines(out.Bytes(), 3))
}

// startIn starts cmd with its process in cg, from birth on cgroup v2;
// on v1 it is added right after (runsc takes far longer than that to
// start anything).
func startIn(cg *cgroup.Cgroup, cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &unix.SysProcAttr{}
	}
	if cg.Mode() == cgroup.V2 {
		fd, err := cg.OpenDir()
		if err != nil {
			return err
		}
		defer fd.Close()
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(fd.Fd())
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if cg.Mode() != cgroup.V2 {
		if err := cg.Add(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return err
		}
	}
	return nil
}

// lastLines returns up to n last non-empty lines of b, joined by " | ".
func lastLines(b []byte, n int) string {
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// removeRuntimeCgroups removes cgroup name from every hierarchy but the
// ones package cgroup handles: runsc, joining a sandbox's group, makes it
// in every v1 hierarchy it finds (devices, the named systemd one) and
// leaves those behind. The group's processes are gone by now.
func removeRuntimeCgroups(name string) error {
	if mode, err := cgroup.Detect(); err != nil || mode == cgroup.V2 {
		return err
	}
	entries, err := os.ReadDir(cgroup.Root)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		d := filepath.Join(cgroup.Root, e.Name(), name)
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
