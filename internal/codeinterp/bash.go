package codeinterp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BashFactory returns a Factory of bash runtimes. shell is the bash binary;
// "" means bash on PATH.
func BashFactory(shell string) Factory {
	return func(ctx context.Context, cwd string) (Runtime, error) {
		return StartBash(ctx, shell, cwd)
	}
}

// BashRuntime is a persistent bash process: variables, functions and the
// working directory carry over from one execution to the next.
//
// bash reads cells from fd 3 (NUL-separated id and code) and evals each one
// in the shell itself, with stdin on /dev/null, then prints a marker line
// with the cell's id and exit status on both stdout and stderr; an
// execution ends when both markers have been read, so all its output has
// arrived. A non-zero status becomes an Error output "exit status N".
//
// Interrupting cannot signal bash itself (a non-interactive bash dies of
// SIGINT), so it signals the foreground processes bash started: every
// descendant not ignoring SIGINT (background jobs ignore it) gets SIGINT,
// and SIGKILL if it is still there a round later; the rest of the cell then
// runs on. A cell that still has not ended after bashInterruptTimeout (a
// loop in bash itself, say) gets its shell killed: the runtime reports
// itself dead and the server starts a fresh one, losing the shell's state.
type BashRuntime struct {
	*interpreter

	mu    sync.Mutex // serializes executions; guards count and seq
	count int
	seq   int
}

var _ Runtime = (*BashRuntime)(nil)

const (
	bashInterruptRound   = 300 * time.Millisecond
	bashInterruptTimeout = 5 * time.Second
)

// bashLoop is the script bash runs: read a cell, eval it, print markers.
// %[1]s is the marker token.
const bashLoop = `while IFS= read -r -d '' __e2b_id <&3 && IFS= read -r -d '' __e2b_cell <&3; do
eval "$__e2b_cell" 3<&-
__e2b_status=$?
printf '\036%[1]s:%%s:%%d\n' "$__e2b_id" "$__e2b_status"
printf '\036%[1]s:%%s:%%d\n' "$__e2b_id" "$__e2b_status" >&2
done`

// StartBash starts a bash runtime in cwd.
func StartBash(ctx context.Context, shell, cwd string) (*BashRuntime, error) {
	if shell == "" {
		shell = "bash"
	}
	prefix := newMarkPrefix()
	token := strings.TrimSuffix(prefix[1:], ":")
	cmd := exec.Command(shell, "--noprofile", "--norc", "-c", fmt.Sprintf(bashLoop, token))
	cmd.Dir = cwd
	cmd.Env = os.Environ()
	i, err := startInterpreter("bash", cmd, prefix, false)
	if err != nil {
		return nil, err
	}
	b := &BashRuntime{interpreter: i}
	// Prove the shell works before handing it out.
	if _, err := b.run(ctx, ":", nil); err != nil {
		b.Close()
		return nil, fmt.Errorf("starting bash in %s: %w", cwd, err)
	}
	return b, nil
}

// Execute implements Runtime.
func (b *BashRuntime) Execute(ctx context.Context, code string, emit func(Output)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count++
	emit(Output{Kind: Count, Count: b.count})
	status, err := b.run(ctx, code, emit)
	if err != nil {
		return err
	}
	if status != 0 {
		emit(Output{Kind: Error, Name: "Error", Value: fmt.Sprintf("exit status %d", status)})
	}
	return nil
}

// envName matches the names bash can export.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// SetEnv implements Runtime. The previous values are kept in shell
// variables of bash's own, so restoring needs no round trip. Names bash
// cannot export are skipped.
func (b *BashRuntime) SetEnv(ctx context.Context, vars map[string]string) (func(context.Context) error, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	n := b.seq
	var set, restore strings.Builder
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if !envName.MatchString(k) {
			continue
		}
		had, old := fmt.Sprintf("__e2b_had_%d_%s", n, k), fmt.Sprintf("__e2b_old_%d_%s", n, k)
		fmt.Fprintf(&set, "if [[ -v %s ]]; then %s=1; %s=$%s; fi; export %s=%s\n", k, had, old, k, k, shellQuote(vars[k]))
		fmt.Fprintf(&restore, "if [[ -n ${%s-} ]]; then export %s=\"$%s\"; else unset %s; fi; unset %s %s\n", had, k, old, k, had, old)
	}
	if _, err := b.run(ctx, set.String(), nil); err != nil {
		return nil, fmt.Errorf("setting env in bash: %w", err)
	}
	return func(ctx context.Context) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, err := b.run(ctx, restore.String(), nil); err != nil {
			return fmt.Errorf("restoring env in bash: %w", err)
		}
		return nil
	}, nil
}

// run sends one cell and passes its output to emit (nil: discard) until
// both markers arrive, returning the cell's exit status. b.mu is held.
func (b *BashRuntime) run(ctx context.Context, code string, emit func(Output)) (int, error) {
	b.seq++
	id := strconv.Itoa(b.seq)
	b.in.take() // output from between executions belongs to none
	code = strings.ReplaceAll(code, "\x00", "")
	if _, err := b.input.Write([]byte(id + "\x00" + code + "\n\x00")); err != nil {
		return 0, fmt.Errorf("sending the cell to bash: %w", b.exitErr(err))
	}

	var (
		seenOut, seenErr bool
		status           int
		done             = ctx.Done()
		round            <-chan time.Time
		giveUp           <-chan time.Time
		signalled        = map[int]bool{}
	)
	for !seenOut || !seenErr {
		select {
		case <-b.in.notify:
			for _, e := range b.in.take() {
				if !e.isMark {
					if emit != nil {
						emit(Output{Kind: e.kind, Text: e.text})
					}
					continue
				}
				mid, st, _ := strings.Cut(e.marker, ":")
				if mid != id {
					continue
				}
				status, _ = strconv.Atoi(st)
				if e.kind == Stdout {
					seenOut = true
				} else {
					seenErr = true
				}
			}
		case <-b.exited:
			return 0, b.exitErr(nil)
		case <-done:
			done = nil
			t := time.NewTicker(bashInterruptRound)
			defer t.Stop()
			round = t.C
			giveUp = time.After(bashInterruptTimeout)
			b.interrupt(signalled)
		case <-round:
			b.interrupt(signalled)
		case <-giveUp:
			b.kill()
			return 0, errors.New("bash did not stop after an interrupt and was killed")
		}
	}
	return status, nil
}

// interrupt sends SIGINT to bash's foreground descendants, or SIGKILL to
// those that already had a SIGINT.
func (b *BashRuntime) interrupt(signalled map[int]bool) {
	for _, pid := range foregroundDescendants(b.cmd.Process.Pid) {
		if signalled[pid] {
			signalPID(pid, syscall.SIGKILL)
			continue
		}
		signalled[pid] = true
		signalPID(pid, syscall.SIGINT)
	}
}

// shellQuote quotes s for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// procPipes are the parent's ends of a started process's pipes.
type procPipes struct {
	stdout, stderr *os.File
	// extra are the parent's ends of fds 3, 4, ...: write ends for fds the
	// child reads (even positions), read ends for fds it writes (odd).
	extra []*os.File
}

// startWithPipes starts cmd with stdout and stderr on pipes and n extra
// pipes as fds 3.. (fd 3 for the child to read, fd 4 to write, alternating),
// and returns the parent's ends. The child's ends are closed in the parent.
func startWithPipes(cmd *exec.Cmd, n int) (p procPipes, err error) {
	var parent, child []*os.File
	defer func() {
		for _, f := range child {
			_ = f.Close()
		}
		if err != nil {
			for _, f := range parent {
				_ = f.Close()
			}
		}
	}()
	pipe := func(childReads bool) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		if childReads {
			parent, child = append(parent, w), append(child, r)
			return w, nil
		}
		parent, child = append(parent, r), append(child, w)
		return r, nil
	}
	if p.stdout, err = pipe(false); err != nil {
		return p, err
	}
	cmd.Stdout = child[len(child)-1]
	if p.stderr, err = pipe(false); err != nil {
		return p, err
	}
	cmd.Stderr = child[len(child)-1]
	for i := range n {
		f, err := pipe(i%2 == 0)
		if err != nil {
			return p, err
		}
		p.extra = append(p.extra, f)
		cmd.ExtraFiles = append(cmd.ExtraFiles, child[len(child)-1])
	}
	return p, cmd.Start()
}
