package template

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// command is an external program a build runs on the host: debootstrap.
type command struct {
	name string // names the step in errors and logs
	path string
	args []string
	env  []string
	// cancel is sent to the command's whole process group when ctx is done
	// (default SIGTERM); after a grace period everything left is killed.
	cancel syscall.Signal
	output func(line string) // every stdout and stderr line, if set
}

// cancelGrace is how long a cancelled command may take to clean up (and
// debootstrap to unmount what it mounted) before it is killed.
const cancelGrace = 15 * time.Second

// run runs c to completion. A failure includes the last lines of output.
func (c command) run(ctx context.Context, log *slog.Logger) error {
	out := &tail{n: 12}
	lw := &lineWriter{fn: func(s string) {
		out.add(s)
		log.Debug(c.name, "line", s)
		if c.output != nil {
			c.output(s)
		}
	}}
	cmd := exec.CommandContext(ctx, c.path, c.args...)
	cmd.Env = c.env
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = lw, lw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sig := c.cancel
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, sig) }
	cmd.WaitDelay = cancelGrace
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running %s: %w", c.name, err)
	}
	err := cmd.Wait()
	lw.flush()
	if err != nil {
		// Whatever is left of the process group (dpkg, maintainer scripts)
		// must not outlive the build or keep its mounts busy.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if ctx.Err() != nil {
			return fmt.Errorf("running %s: %w", c.name, context.Cause(ctx))
		}
		if s := out.String(); s != "" {
			return fmt.Errorf("running %s: %w:\n  %s", c.name, err, strings.ReplaceAll(s, "\n", "\n  "))
		}
		return fmt.Errorf("running %s: %w", c.name, err)
	}
	return nil
}

const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// hostEnv is the environment for commands run on the host (debootstrap):
// a fixed PATH and locale, plus the proxy settings of the caller.
func hostEnv() []string {
	env := []string{pathEnv, "LC_ALL=C.UTF-8", "HOME=/root"}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
