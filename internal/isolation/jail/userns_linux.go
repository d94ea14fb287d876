package jail

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/idmap"
)

// maxUserNamespacesFile is the kernel's limit on user namespaces; 0
// disables them for every caller, root included.
const maxUserNamespacesFile = "/proc/sys/user/max_user_namespaces"

// decideUserns says whether sandboxes get user namespaces under mode, from
// the content of max_user_namespaces (or the error reading it) and the
// kernel release. reason says why not, for the warning; err is set instead
// when mode requires them and the host cannot.
func decideUserns(mode UsernsMode, maxNS string, readErr error, release string) (on bool, reason string, err error) {
	if mode == UsernsOff {
		return false, "", nil
	}
	switch n, perr := strconv.ParseUint(strings.TrimSpace(maxNS), 10, 64); {
	case readErr != nil:
		reason = fmt.Sprintf("the kernel has no user namespaces (%v)", readErr)
	case perr != nil:
		reason = fmt.Sprintf("cannot parse %s %q", maxUserNamespacesFile, maxNS)
	case n == 0:
		reason = "user namespaces are disabled (sysctl user.max_user_namespaces = 0)"
	case !kernelAtLeast(release, 5, 19):
		reason = fmt.Sprintf("kernel %s is older than 5.19, whose overlayfs first takes idmapped layers", release)
	default:
		return true, "", nil
	}
	if mode == UsernsOn {
		return false, "", fmt.Errorf("user namespaces required (userns on), but %s", reason)
	}
	return false, reason, nil
}

// kernelAtLeast reports whether a uname release such as "6.1.0-18-amd64"
// is at least major.minor; one that does not parse is taken as too old.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// hostUsernsSupport reads what decideUserns needs from the running host.
func hostUsernsSupport(mode UsernsMode) (on bool, reason string, err error) {
	b, rerr := os.ReadFile(maxUserNamespacesFile)
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	return decideUserns(mode, string(b), rerr, unix.ByteSliceToString(uts.Release[:]))
}

// warnNoUserns logs, once per reason, that sandboxes run without a user
// namespace.
func (b *Backend) warnNoUserns(reason string) {
	if _, seen := b.usernsWarned.LoadOrStore(reason, true); !seen {
		b.cfg.Log.Warn("sandboxes start without a user namespace: root in a sandbox is root on the host, held down by the other layers only",
			"reason", reason)
	}
}

// usernsRefused marks the kernel or a file system refusing a user
// namespace or an idmapped mount: under UsernsAuto the sandbox then starts
// without a user namespace.
type usernsRefused struct{ error }

func (e usernsRefused) Unwrap() error { return e.error }

// usernsConfig is what init needs to run envd in a user namespace.
type usernsConfig struct {
	// Base is the host id of the sandbox's root; ids 0..idmap.Size-1 map
	// to Base onward.
	Base uint32 `json:"base"`
	// Required fails the start where the kernel or the template's file
	// system refuses; otherwise init goes on without and says why.
	Required bool `json:"required"`
	// UserTasks is RLIMIT_NPROC of envd and all it starts (see userTasks).
	UserTasks int `json:"user_tasks"`
}

// envdStage is the process that becomes envd in a user namespace (see
// forkEnvdStage), as init holds it.
type envdStage struct {
	pid    int
	userns *os.File // its user namespace, the map for idmapped mounts
	cfgW   *os.File // init → stage: its configuration, sent once the root is built
	errR   *os.File // stage → init: an error, or EOF once envd is executed
}

// stageConfig is the part of initConfig that makes InitMain the envd stage.
type stageConfig struct {
	// RootDev and RootIno identify the sandbox's root: the stage refuses
	// to run envd anywhere else.
	RootDev uint64 `json:"root_dev"`
	RootIno uint64 `json:"root_ino"`
	// UserTasks is RLIMIT_NPROC for envd and its children; 0: unset.
	UserTasks int `json:"user_tasks,omitempty"`
}

// forkEnvdStage starts the process that will become envd, in a new user
// namespace that maps 0..idmap.Size-1 to base onward, as root there. It
// re-executes this binary (self, with args) because what must happen
// between entering the namespace and envd (shrinking the bounding set,
// which the new namespace resets to full, and loading seccomp, whose
// filter would forbid the clone) cannot be done by a Go fork: the stage
// waits for its configuration, does that, and executes envd.
//
// It runs before the root is built, because the namespace is also the map
// of the idmapped template mount; /proc must be the sandbox's by then, so
// that the maps written are the child's. The stage is in init's mount
// namespace, so pivot_root moves its root and working directory along with
// init's.
func forkEnvdStage(base uint32, args []string, logw *os.File) (_ *envdStage, err error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer cfgR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		cfgW.Close()
		return nil, err
	}
	defer errW.Close()
	defer func() {
		if err != nil {
			cfgW.Close()
			errR.Close()
		}
	}()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devNull.Close()
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: idmap.Size}}
	argv := append([]string{"agent-sandbox-envd"}, args...)
	pid, err := syscall.ForkExec("/proc/self/exe", argv, &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{},
		Files: []uintptr{devNull.Fd(), logw.Fd(), logw.Fd(), cfgR.Fd(), errW.Fd()}, // fds 3 and 4 as for init
		Sys: &syscall.SysProcAttr{
			Setsid:      true,
			Cloneflags:  unix.CLONE_NEWUSER,
			UidMappings: m,
			GidMappings: m,
			// envd and sudo set supplementary groups.
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		},
	})
	if err != nil {
		return nil, usernsRefused{fmt.Errorf("creating the user namespace: %w", err)}
	}
	st := &envdStage{pid: pid, cfgW: cfgW, errR: errR}
	if st.userns, err = os.Open(fmt.Sprintf("/proc/%d/ns/user", pid)); err != nil {
		st.abort()
		return nil, fmt.Errorf("opening the user namespace: %w", err)
	}
	return st, nil
}

// run sends the stage its configuration and waits until it has executed
// envd (its error pipe closes on exec) or has failed. Either way init no
// longer holds the stage's files.
func (st *envdStage) run(cfg *initConfig) error {
	var root unix.Stat_t
	err := unix.Stat("/", &root)
	if err == nil {
		msg := initConfig{
			EnvdArgs: cfg.EnvdArgs, EnvdToken: cfg.EnvdToken, NoNewPrivs: cfg.NoNewPrivs,
			EnvdStage: &stageConfig{RootDev: root.Dev, RootIno: root.Ino, UserTasks: cfg.Userns.UserTasks},
		}
		err = json.NewEncoder(st.cfgW).Encode(&msg)
	}
	// Its report, if it failed before reading (the write then broke): why.
	st.cfgW.Close()
	b, rerr := io.ReadAll(io.LimitReader(st.errR, 64<<10))
	if err == nil {
		err = rerr
	}
	if len(b) > 0 {
		var s initStatus
		if jerr := json.Unmarshal(b, &s); jerr != nil {
			err = errors.Join(err, fmt.Errorf("reading the stage's report %q: %w", b, jerr))
		} else {
			err = errors.Join(err, errors.New(s.Error))
		}
	}
	if err != nil {
		st.abort()
		return fmt.Errorf("starting envd in the user namespace: %w", err)
	}
	st.close()
	return nil
}

// abort kills the stage, reaps it and closes its files.
func (st *envdStage) abort() {
	_ = unix.Kill(st.pid, unix.SIGKILL)
	_, _ = unix.Wait4(st.pid, nil, 0, nil)
	st.close()
}

func (st *envdStage) close() {
	for _, f := range []*os.File{st.userns, st.cfgW, st.errR} {
		if f != nil {
			f.Close()
		}
	}
}

// execEnvd is the envd stage after its configuration arrived: in the
// sandbox's root, as root of its user namespace, it confines itself as
// init confined envd, and executes envd.
func execEnvd(cfg *initConfig) error {
	if uid, gid := unix.Getuid(), unix.Getgid(); uid != 0 || gid != 0 {
		return fmt.Errorf("envd stage runs as %d:%d in its user namespace, want 0:0", uid, gid)
	}
	var root unix.Stat_t
	if err := unix.Stat("/", &root); err != nil {
		return err
	}
	if root.Dev != cfg.EnvdStage.RootDev || root.Ino != cfg.EnvdStage.RootIno {
		return errors.New("envd stage: its root is not the sandbox's")
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	// Its stdin was the host's /dev/null, opened before the pivot.
	devNull, err := unix.Open(os.DevNull, unix.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening /dev/null: %w", err)
	}
	if err := unix.Dup3(devNull, 0, 0); err != nil {
		return err
	}
	unix.Close(devNull)
	// Soft and hard: only CAP_SYS_RESOURCE on the host could raise it.
	if n := uint64(cfg.EnvdStage.UserTasks); n > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			return fmt.Errorf("limiting tasks per user: %w", err)
		}
	}
	if err := guest.Confine(cfg.NoNewPrivs); err != nil {
		return err
	}
	return envdOf(cfg).Exec()
}

// dropToHostID makes init, once it needs no privilege (it only reaps from
// now on), the host user id: the sandbox's root's, so that no process in
// the sandbox's pid namespace is host root. Changing every id from 0 clears
// init's capabilities; it stays non-dumpable, so nothing in the sandbox can
// ptrace it or open its /proc files, and as the pid namespace's init it
// receives no signal from inside it that it does not handle.
func dropToHostID(id int) error {
	if err := unix.Setgroups(nil); err != nil {
		return fmt.Errorf("dropping supplementary groups: %w", err)
	}
	if err := unix.Setresgid(id, id, id); err != nil {
		return fmt.Errorf("becoming host group %d: %w", id, err)
	}
	if err := unix.Setresuid(id, id, id); err != nil {
		return fmt.Errorf("becoming host user %d: %w", id, err)
	}
	return nil
}

// idmapTree mounts a detached copy of the tree at src, read-only and
// idmapped through userns, at dst (in the calling mount namespace only):
// files the host owns as 0..idmap.Size-1 appear owned by the matching ids
// of that namespace's range.
func idmapTree(src, dst string, userns *os.File) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("cloning a mount of %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY, Userns_fd: uint64(userns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return usernsRefused{fmt.Errorf("idmapping a mount of %s (does its file system support idmapped mounts?): %w", src, err)}
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting the idmapped %s at %s: %w", src, dst, err)
	}
	return nil
}

// userNetSysctls let a sandbox's user-namespaced processes bind ports
// below 1024 and ping, in its own network namespace only. That namespace
// belongs to the host's user namespace, so root in the sandbox holds no
// capability there: not CAP_NET_BIND_SERVICE, and (deliberately) neither
// CAP_NET_RAW nor CAP_NET_ADMIN.
var userNetSysctls = [][2]string{
	{"/proc/sys/net/ipv4/ip_unprivileged_port_start", "0"},
	{"/proc/sys/net/ipv4/ping_group_range", "0 2147483647"},
}

func setUserNetSysctls() error {
	for _, s := range userNetSysctls {
		if err := os.WriteFile(s[0], []byte(s[1]), 0); err != nil {
			return fmt.Errorf("setting %s: %w", s[0], err)
		}
	}
	return nil
}
