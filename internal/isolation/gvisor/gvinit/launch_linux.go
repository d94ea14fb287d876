package gvinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/disk"
	"golang.org/x/sys/unix"
)

// launch is the launcher: it makes the sandbox's root file system in the
// mount namespace it was started in, reports, waits for the host's
// go-ahead and executes runsc. It returns only on error, after reporting
// it.
func launch() error {
	status := os.NewFile(LaunchStatusFd, "status")
	unix.CloseOnExec(LaunchStatusFd)
	cfgFile := os.NewFile(LaunchConfigFd, "config")
	unix.CloseOnExec(LaunchConfigFd)
	report := func(st LaunchStatus) error {
		err := json.NewEncoder(status).Encode(st)
		return errors.Join(err, status.Close())
	}
	var cfg LaunchConfig
	err := json.NewDecoder(cfgFile).Decode(&cfg)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		err = fmt.Errorf("launch: reading configuration: %w", err)
		_ = report(LaunchStatus{Error: err.Error()})
		return err
	}
	dev, err := mountRoot(&cfg)
	if err != nil {
		err = fmt.Errorf("launch: %w", err)
		_ = report(LaunchStatus{Error: err.Error()})
		return err
	}
	if err := report(LaunchStatus{DiskDev: dev}); err != nil {
		return fmt.Errorf("launch: reporting: %w", err)
	}
	// The host closes its end once it has capped the disk's I/O.
	if _, err := io.Copy(io.Discard, cfgFile); err != nil {
		return fmt.Errorf("launch: waiting for the go-ahead: %w", err)
	}
	cfgFile.Close()
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := unix.Exec(cfg.Runsc[0], cfg.Runsc, env); err != nil {
		return fmt.Errorf("launch: executing %s: %w", cfg.Runsc[0], err)
	}
	return nil
}

// mountRoot mounts the disk and the overlay of the template under it, and
// makes the mount points, and returns the disk's device number.
func mountRoot(cfg *LaunchConfig) (uint64, error) {
	// Nothing mounted here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return 0, fmt.Errorf("making mounts private: %w", err)
	}
	dev, err := disk.Mount(cfg.Image, cfg.DiskDir, unix.MS_NODEV)
	if err != nil {
		return 0, err
	}
	upper, work, err := disk.MakeUpper(cfg.DiskDir, cfg.RootFS)
	if err != nil {
		return 0, err
	}
	// nodev: the sandbox's root may not make device nodes that work.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", cfg.RootFS, upper, work)
	if err := unix.Mount("overlay", cfg.RootDir, "overlay", unix.MS_NODEV, opts); err != nil {
		return 0, fmt.Errorf("mounting overlay (%s) at %s: %w", opts, cfg.RootDir, err)
	}
	if err := makeMountPoints(cfg.RootDir, cfg.MountPoints); err != nil {
		return 0, err
	}
	if cfg.Preload != "" {
		if err := addPreload(cfg.RootDir, cfg.Preload); err != nil {
			return 0, err
		}
	}
	return dev, nil
}

// addPreload puts so first in /etc/ld.so.preload of the root file system
// at dir, before what the template has there.
func addPreload(dir, so string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	const preload = "etc/ld.so.preload"
	old, err := root.ReadFile(preload)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading /%s: %w", preload, err)
	}
	if err := root.MkdirAll("etc", 0o755); err != nil {
		return err
	}
	if err := root.WriteFile(preload, append([]byte(so+"\n"), old...), 0o644); err != nil {
		return fmt.Errorf("writing /%s: %w", preload, err)
	}
	return nil
}

// makeMountPoints makes each of files, and the directories above it, in
// the root file system at dir, resolving every path inside it: the
// template's symbolic links cannot lead out.
func makeMountPoints(dir string, files []string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, f := range files {
		rel := strings.TrimPrefix(f, "/")
		if err := root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return fmt.Errorf("making mount point %s: %w", f, err)
		}
		fh, err := root.OpenFile(rel, os.O_CREATE|os.O_RDONLY, 0o755)
		if err != nil {
			return fmt.Errorf("making mount point %s: %w", f, err)
		}
		fh.Close()
	}
	return nil
}
