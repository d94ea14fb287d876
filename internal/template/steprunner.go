package template

import (
	"context"
	"errors"
	"time"
)

// StepRunner runs a build step's command: RUN, the Template SDK's runCmd,
// a spec's package install and its user steps. The builder never runs a
// step's command itself; the server wires a runner that runs each one in a
// sandbox of the isolation backend (sandbox.Manager.RunStep), which is
// what keeps a build off the host.
type StepRunner interface {
	// RunStep runs s.Args to completion over s.Layers, leaves the changes
	// in s.Upper, and returns the command's exit code (128+n when signal n
	// ended it). An error means the step could not run or was stopped: it
	// wraps ErrStepTimeout when s.Timeout passed, and ctx's error when ctx
	// ended. Nothing the step started outlives RunStep.
	RunStep(ctx context.Context, s StepSpec) (exitCode int, err error)
}

// StepSpec is one build step's command and the image it runs in.
type StepSpec struct {
	// Layers are the image's read-only layers, top first; the last is the
	// root filesystem of the template the build starts from. Files have
	// the image's own ids.
	Layers []string
	// Upper is an empty host directory that receives what the step
	// changed: a plain overlayfs upper directory over Layers (files with
	// the image's own ids, deletions as whiteouts, replaced directories
	// opaque; see flatten).
	Upper string
	// Args is the command, Args[0] an absolute path in the image
	// (/bin/sh -c ...).
	Args []string
	// Env is the command's whole environment.
	Env []string
	// Dir is its working directory, created (owned by UID:GID) if missing.
	Dir string
	// UID, GID and Groups are its credentials; they need no passwd entry.
	UID, GID uint32
	Groups   []uint32
	// Output receives each line the command prints (stdout and stderr).
	Output func(line string)
	// Timeout bounds the step; zero means none.
	Timeout time.Duration
}

// ErrStepTimeout is returned (wrapped) by RunStep when a step ran past its
// timeout.
var ErrStepTimeout = errors.New("step timed out")

// ErrNoStepRunner is returned when a build has a step with a command and
// the Builder has no StepRunner.
var ErrNoStepRunner = errors.New("no step runner: build steps run in sandboxes, which this builder cannot start")
