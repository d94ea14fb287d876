package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strconv"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// buildBody is TemplateBuildStartV2, what Template.build() sends once the
// files are uploaded.
type buildBody struct {
	FromImage         *string         `json:"fromImage"`
	FromTemplate      *string         `json:"fromTemplate"`
	FromImageRegistry json.RawMessage `json:"fromImageRegistry"`
	Force             bool            `json:"force"`
	Steps             []stepBody      `json:"steps"`
	StartCmd          *string         `json:"startCmd"`
	ReadyCmd          *string         `json:"readyCmd"`
}

// stepBody is TemplateStep. The SDK also sends forceUpload,
// resolveSymlinks and gzip on COPY steps; they only matter to the upload.
type stepBody struct {
	Type      string   `json:"type"`
	Args      []string `json:"args"`
	FilesHash string   `json:"filesHash"`
	Force     bool     `json:"force"`
}

// Limits of a build request.
const (
	maxSteps   = 256
	maxArgSize = 64 << 10
)

// baseImages are the Docker image names the SDK uses for E2B's base image
// (Template() with no from, fromBaseImage()): they mean the built-in base
// template, the only "image" this server has.
var baseImages = map[string]bool{"e2bdev/base": true, "e2bdev/base:latest": true}

// waitForPortRE matches the ready command the SDK's waitForPort(port)
// produces, the one ready check this server implements.
var waitForPortRE = regexp.MustCompile(`^\[ -n "\$\(ss -Htuln sport = :([0-9]{1,5})\)" \]$`)

// specError is a build request the server cannot build; its message is
// for the client.
type specError struct{ msg string }

func (e *specError) Error() string { return e.msg }

func specErrorf(format string, args ...any) error { return &specError{fmt.Sprintf(format, args...)} }

// buildSpec turns the SDK's build request for template name into a spec.
// Each SDK step becomes one instruction, so instruction numbers are the
// SDK's step numbers.
func (t *TemplateBuilds) buildSpec(ctx context.Context, name string, body buildBody) (template.Spec, error) {
	if len(body.FromImageRegistry) > 0 && string(body.FromImageRegistry) != "null" {
		return template.Spec{}, specErrorf("fromImageRegistry: registries are not supported; build from a template")
	}
	var from string
	switch {
	case body.FromTemplate != nil && body.FromImage != nil:
		return template.Spec{}, specErrorf("give fromTemplate or fromImage, not both")
	case body.FromTemplate != nil:
		from = *body.FromTemplate
	case body.FromImage != nil && baseImages[*body.FromImage]:
		from = template.BaseName
	case body.FromImage != nil:
		return template.Spec{}, specErrorf("fromImage %q: Docker images are not supported; use fromTemplate (for example %q) or the base image e2bdev/base", *body.FromImage, template.BaseName)
	default:
		return template.Spec{}, specErrorf("fromTemplate is required")
	}
	// A name:tag, or a name the API built, means the build its tag points
	// at; anything else (a built-in or CLI-built template) the builder
	// resolves.
	if v, err := t.records.TemplateVersion(ctx, from); err == nil {
		from = v
	} else if !errors.Is(err, store.ErrNotFound) {
		return template.Spec{}, err
	}
	if len(body.Steps) > maxSteps {
		return template.Spec{}, specErrorf("steps: at most %d, got %d", maxSteps, len(body.Steps))
	}
	spec := template.Spec{Name: name, From: from}
	for i, s := range body.Steps {
		in, err := t.instruction(s)
		if err != nil {
			return template.Spec{}, specErrorf("step %d (%s): %v", i+1, s.Type, err)
		}
		spec.Instructions = append(spec.Instructions, in)
	}
	if body.Force && len(spec.Instructions) > 0 {
		spec.Instructions[0].Force = true // forces every step after it too
	}
	if body.StartCmd != nil {
		spec.StartCmd = *body.StartCmd
	}
	if body.ReadyCmd != nil && *body.ReadyCmd != "" {
		m := waitForPortRE.FindStringSubmatch(*body.ReadyCmd)
		if m == nil {
			return template.Spec{}, specErrorf("readyCmd %q: only waitForPort(port) is supported", *body.ReadyCmd)
		}
		spec.ReadyPort, _ = strconv.Atoi(m[1])
	}
	if err := spec.Validate(); err != nil {
		return template.Spec{}, &specError{err.Error()}
	}
	return spec, nil
}

// instruction converts one SDK step.
func (t *TemplateBuilds) instruction(s stepBody) (template.Instruction, error) {
	for _, a := range s.Args {
		if len(a) > maxArgSize {
			return template.Instruction{}, fmt.Errorf("argument of %d bytes is larger than %d", len(a), maxArgSize)
		}
	}
	in := template.Instruction{Op: s.Type, Args: s.Args, Force: s.Force}
	switch s.Type {
	case template.OpRun:
		// [command] or [command, user]
		if len(s.Args) == 2 {
			in.Args, in.User = s.Args[:1], s.Args[1]
		}
	case template.OpCopy:
		// [src, dest, user, mode]; user and mode may be empty
		if len(s.Args) < 2 || len(s.Args) > 4 {
			return template.Instruction{}, fmt.Errorf("want args [src, dest, user?, mode?], got %d", len(s.Args))
		}
		in.Args, in.FilesHash = s.Args[:2], s.FilesHash
		if len(s.Args) > 2 {
			in.Chown = s.Args[2]
		}
		if len(s.Args) > 3 && s.Args[3] != "" {
			return template.Instruction{}, fmt.Errorf("mode %s: setting the mode of copied files is not supported; add a runCmd with chmod", s.Args[3])
		}
		if !template.ValidFilesHash(s.FilesHash) {
			return template.Instruction{}, fmt.Errorf("filesHash %q: want 64 lower-case hex digits", s.FilesHash)
		}
	case template.OpEnv, template.OpWorkdir, template.OpUser:
	default:
		return template.Instruction{}, fmt.Errorf("unknown step type %q: want RUN, COPY, ENV, WORKDIR or USER", s.Type)
	}
	if err := in.Validate(); err != nil {
		return template.Instruction{}, err
	}
	if in.Op == template.OpCopy {
		if _, err := os.Stat(t.builder.ContextArchive(in.FilesHash)); errors.Is(err, fs.ErrNotExist) {
			return template.Instruction{}, fmt.Errorf("the files of hash %s were not uploaded (GET /templates/{templateID}/files/{hash} gives the upload link)", in.FilesHash)
		} else if err != nil {
			return template.Instruction{}, err
		}
	}
	return in, nil
}
