package template

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Instruction is one build step run inside a sandbox of the image built so
// far: what a Dockerfile line or an E2B Template SDK step becomes. Both the
// Dockerfile front end and the E2B template build API produce these; the
// build engine executes them with a cache keyed by everything before them.
type Instruction struct {
	// Op is one of the Op* constants.
	Op string `json:"op"`
	// Args depend on Op:
	//   RUN:     [command] — run by /bin/sh -c as the current USER in the current WORKDIR
	//   COPY:    [src..., dest] — src paths are relative to the build context
	//            named by FilesHash; dest is absolute or relative to WORKDIR
	//   ENV:     [key, value, key, value, ...]
	//   WORKDIR: [dir]
	//   USER:    [name]
	Args []string `json:"args"`
	// FilesHash names the build context archive of a COPY (see
	// [Builder.ContextArchive]); empty for other ops.
	FilesHash string `json:"filesHash,omitempty"`
	// Chown, for COPY, gives the copied files and the directories COPY
	// creates this owner ("user", "user:group", "uid:gid"), looked up in
	// the image, like Docker's COPY --chown. Empty means root, Docker's
	// default: the current USER does not matter.
	Chown string `json:"chown,omitempty"`
	// User, for RUN, runs the command as this user ("user", "user:group",
	// "uid:gid") instead of the current USER, without changing it: the E2B
	// SDK's runCmd(cmd, {user}), which aptInstall uses to run as root.
	User string `json:"user,omitempty"`
	// Force reruns this step, and every one after it, even when cached.
	Force bool `json:"force,omitempty"`
}

// The instruction ops.
const (
	OpRun     = "RUN"
	OpCopy    = "COPY"
	OpEnv     = "ENV"
	OpWorkdir = "WORKDIR"
	OpUser    = "USER"
)

var filesHashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidFilesHash reports whether h can name a build context archive: a
// lower-case hex SHA-256, as the E2B SDK computes it.
func ValidFilesHash(h string) bool { return filesHashRE.MatchString(h) }

// ContextArchive is where the build context (a tar, optionally gzipped)
// with content hash h is stored: what the E2B SDK uploads for a COPY step
// and what the Dockerfile front end packs from its context directory. h
// must satisfy [ValidFilesHash].
func (b *Builder) ContextArchive(h string) string {
	return filepath.Join(b.DataDir, "template-files", h+".tar")
}

// String renders in as a Dockerfile line, for logs and errors.
func (in Instruction) String() string {
	switch in.Op {
	case OpEnv:
		var kv []string
		for i := 0; i+1 < len(in.Args); i += 2 {
			kv = append(kv, in.Args[i]+"="+in.Args[i+1])
		}
		return "ENV " + strings.Join(kv, " ")
	case OpCopy:
		if in.Chown != "" {
			return "COPY --chown=" + in.Chown + " " + strings.Join(in.Args, " ")
		}
	case OpRun:
		if in.User != "" {
			return "RUN (as " + in.User + ") " + strings.Join(in.Args, " ")
		}
	}
	return strings.TrimSpace(in.Op + " " + strings.Join(in.Args, " "))
}

// ownerRE matches a USER or --chown value: a user name or uid, and
// optionally a group name or gid.
var ownerRE = regexp.MustCompile(`^([a-z_][a-z0-9_-]{0,31}|[0-9]{1,10})(:([a-z_][a-z0-9_-]{0,31}|[0-9]{1,10}))?$`)

// Validate reports the first problem with in, as [Spec.Validate] would:
// front ends call it to name the line an instruction came from.
func (in Instruction) Validate() error {
	for _, a := range in.Args {
		if strings.ContainsRune(a, 0) {
			return errors.New("argument contains a NUL byte")
		}
	}
	if in.Op != OpCopy && (in.FilesHash != "" || in.Chown != "") {
		return fmt.Errorf("%s takes no files hash or owner", in.Op)
	}
	if in.User != "" && (in.Op != OpRun || !ownerRE.MatchString(in.User)) {
		return fmt.Errorf("%s as user %q: only RUN takes a user, user[:group] or uid[:gid]", in.Op, in.User)
	}
	switch in.Op {
	case OpRun:
		if len(in.Args) != 1 || strings.TrimSpace(in.Args[0]) == "" {
			return errors.New("RUN wants one non-empty command")
		}
	case OpCopy:
		if len(in.Args) < 2 {
			return errors.New("COPY wants at least one source and a destination")
		}
		if !ValidFilesHash(in.FilesHash) {
			return fmt.Errorf("COPY files hash %q is not a hex SHA-256", in.FilesHash)
		}
		for _, src := range in.Args[:len(in.Args)-1] {
			if _, err := contextPath(src); err != nil {
				return fmt.Errorf("COPY source: %w", err)
			}
		}
		if in.Args[len(in.Args)-1] == "" {
			return errors.New("COPY destination is empty")
		}
		if in.Chown != "" && !ownerRE.MatchString(in.Chown) {
			return fmt.Errorf("COPY --chown=%q: want user[:group] or uid[:gid]", in.Chown)
		}
	case OpEnv:
		if len(in.Args) == 0 || len(in.Args)%2 != 0 {
			return errors.New("ENV wants key, value pairs")
		}
		for i := 0; i < len(in.Args); i += 2 {
			if !envKeyRE.MatchString(in.Args[i]) {
				return fmt.Errorf("ENV name %q is not valid", in.Args[i])
			}
		}
	case OpWorkdir:
		if len(in.Args) != 1 || in.Args[0] == "" {
			return errors.New("WORKDIR wants one directory")
		}
	case OpUser:
		if len(in.Args) != 1 || !ownerRE.MatchString(in.Args[0]) {
			return fmt.Errorf("USER %q: want user[:group] or uid[:gid]", strings.Join(in.Args, " "))
		}
	default:
		return fmt.Errorf("unknown instruction %q (want RUN, COPY, ENV, WORKDIR or USER)", in.Op)
	}
	return nil
}

// contextPath cleans a COPY source: a path inside the build context,
// relative to it ("." is the whole context). Absolute paths and paths
// that climb out with ".." are refused, as Docker refuses them.
func contextPath(src string) (string, error) {
	if src == "" || strings.HasPrefix(src, "/") {
		return "", fmt.Errorf("%q: want a path relative to the build context", src)
	}
	c := path.Clean(src)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q is outside the build context", src)
	}
	return c, nil
}

// StepError is how a build reports an instruction that failed: which
// one, how its command exited and what it printed last.
type StepError struct {
	// Step is the instruction's 1-based index in Spec.Instructions.
	Step        int
	Instruction Instruction
	// ExitCode is the RUN command's exit code; -1 when the step failed
	// without one (a COPY source missing, say: see Err).
	ExitCode int
	// LogTail holds the last lines the step printed.
	LogTail []string
	// Err is the cause when the step did not fail by exiting non-zero.
	Err error
	// Timeout is set when the step ran past it (Err wraps ErrStepTimeout).
	Timeout time.Duration
}

// Error implements error.
func (e *StepError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d (%s)", e.Step, e.Instruction)
	switch {
	case e.Timeout > 0:
		fmt.Fprintf(&b, " timed out after %s", e.Timeout)
	case e.Err != nil:
		fmt.Fprintf(&b, ": %v", e.Err)
	default:
		fmt.Fprintf(&b, " failed with exit code %d", e.ExitCode)
	}
	if len(e.LogTail) > 0 {
		b.WriteString("; last output:\n  " + strings.Join(e.LogTail, "\n  "))
	}
	return b.String()
}

// Unwrap returns the cause, if any.
func (e *StepError) Unwrap() error { return e.Err }
