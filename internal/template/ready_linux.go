package template

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FinalizeStep is the step name of the ready check in a build's log and
// failure, E2B's name for the phase after the steps.
const FinalizeStep = "finalize"

// readyMarker starts the lines readyScript reports its end on.
const readyMarker = "agent-sandbox-ready:"

// readyScript is the ready check, run by bash with the start command as
// $1, the ready command as $2 and the time limit in seconds as $3, as E2B's
// builder runs them: the start command in the background, the ready
// command polled until it exits 0, both with bash -l -c. It also ends when
// the start command exits non-zero (a start command that exits 0 may have
// left a daemon behind). The last line says how it ended. Job control puts
// the start command in a process group of its own, killed on the way out,
// so nothing it started holds the step's output open.
const readyScript = `start=$1 ready=$2 limit=$3 m='` + readyMarker + `'
set -m
if [ -n "$start" ]; then
	/bin/bash -l -c "$start" </dev/null &
	spid=$! sgid=$!
	trap 'kill -KILL -- "-$sgid" 2>/dev/null' EXIT
fi
end=$((SECONDS + limit))
n=0
while :; do
	n=$((n + 1))
	out=$(/bin/bash -l -c "$ready" </dev/null 2>&1)
	rc=$?
	if [ "$rc" -eq 0 ]; then
		echo "$m ready $n"
		exit 0
	fi
	if [ -n "$spid" ] && ! kill -0 "$spid" 2>/dev/null; then
		wait "$spid"
		src=$?
		spid=
		if [ "$src" -ne 0 ]; then
			echo "$m start-exit $src"
			exit 1
		fi
	fi
	if [ "$SECONDS" -ge "$end" ]; then
		[ "${#out}" -gt 2000 ] && out=${out: -2000}
		[ -n "$out" ] && printf '%s\n' "$out"
		echo "$m timeout $rc"
		exit 1
	fi
	sleep 0.5
done
`

// checkReady runs spec's start and ready commands in a build step sandbox
// of the image st has made, as root in spec's workdir with its env, and
// fails with a *ReadyError unless the ready command succeeds within
// b.ReadyTimeout. What the commands write is thrown away with upper, an
// empty directory: each sandbox runs them again when it starts, so a file
// the start command makes must not already be in the template.
func (b *Builder) checkReady(ctx context.Context, log *slog.Logger, rep *reporter, st *imageState, spec Spec, upper string) error {
	if b.Steps == nil {
		return ErrNoStepRunner
	}
	rep.startStage("ready check")
	limit := b.readyTimeout()
	log.Info("running the start command and polling the ready command", "step", FinalizeStep,
		"start_cmd", spec.StartCmd, "ready_cmd", spec.ReadyCmd, "timeout", limit)
	fail := &ReadyError{StartCmd: spec.StartCmd, ReadyCmd: spec.ReadyCmd}
	own, err := resolveOwner(st.readFile, "root")
	if err != nil {
		fail.Err = err
		return fail
	}
	if err := os.Mkdir(upper, 0o755); err != nil {
		fail.Err = err
		return fail
	}
	out := &tail{n: 20}
	var status []string
	line := func(s string) {
		if rest, ok := strings.CutPrefix(s, readyMarker); ok {
			status = strings.Fields(rest)
			return
		}
		out.add(s)
		log.Info(s, "step", FinalizeStep)
		rep.update(Event{Phase: "running", Percent: -1, Item: s})
	}
	t0 := time.Now()
	secs := strconv.Itoa(int(math.Ceil(limit.Seconds())))
	code, err := b.Steps.RunStep(ctx, StepSpec{
		Layers: st.lower(), Upper: upper,
		Args: []string{"/bin/bash", "-c", readyScript, "agent-sandbox-ready", spec.StartCmd, spec.ReadyCmd, secs},
		Env:  st.runEnv(own.Home), Dir: spec.Workdir,
		UID: uint32(own.UID), GID: uint32(own.GID), Groups: own.Groups,
		Output: line,
		// The script ends itself at the limit; the step's own bound only
		// catches a ready command that hangs.
		Timeout: limit + time.Minute,
	})
	fail.LogTail = slices.Clone(out.lines)
	switch {
	case err != nil:
		fail.Err = err
	case code == 0 && len(status) == 2 && status[0] == "ready":
		log.Info("template is ready", "step", FinalizeStep, "checks", status[1], "took", time.Since(t0).Round(time.Millisecond))
		rep.update(Event{Phase: "done", Percent: 100})
		return nil
	case len(status) == 2 && status[0] == "start-exit":
		fail.StartExit, _ = strconv.Atoi(status[1])
	case len(status) == 2 && status[0] == "timeout":
		fail.Timeout = limit
		fail.ReadyExit, _ = strconv.Atoi(status[1])
	default:
		// /bin/bash missing, or the script killed.
		fail.Err = fmt.Errorf("the check exited with code %d without saying how it ended (the image needs /bin/bash)", code)
	}
	log.Error("ready check failed", "step", FinalizeStep, "err", fail)
	return fail
}
