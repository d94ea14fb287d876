package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/template/oci"
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
	// Recording is this server's own: the format ("mp4" or "webm") of
	// the recording of its display every sandbox of the template starts
	// with (template.Spec.Recording); absent or empty, none.
	Recording string `json:"recording"`
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
// template rather than E2B's image.
var baseImages = map[string]bool{"e2bdev/base": true, "e2bdev/base:latest": true}

// waitForPortRE matches the ready command the SDK's waitForPort(port)
// produces.
var waitForPortRE = regexp.MustCompile(`^\[ -n "\$\(ss -Htuln sport = :([0-9]{1,5})\)" \]$`)

// specError is a build request the server cannot build; its message is
// for the client.
type specError struct{ msg string }

func (e *specError) Error() string { return e.msg }

func specErrorf(format string, args ...any) error { return &specError{fmt.Sprintf(format, args...)} }

// buildSpec turns the SDK's build request for template name, whose build
// was requested with res, into a spec. Each SDK step becomes one
// instruction, so instruction numbers are the SDK's step numbers.
func (t *TemplateBuilds) buildSpec(ctx context.Context, name string, body buildBody, res store.BuildResources) (template.Spec, error) {
	auth, err := registryAuth(body.FromImageRegistry)
	if err != nil {
		return template.Spec{}, err
	}
	var from, image string
	switch {
	case body.FromTemplate != nil && body.FromImage != nil:
		return template.Spec{}, specErrorf("give fromTemplate or fromImage, not both")
	case body.FromTemplate != nil:
		from = *body.FromTemplate
	case body.FromImage != nil && baseImages[*body.FromImage]:
		from = template.BaseName
	case body.FromImage != nil:
		// The server pulls the image itself; a tarball path would have it
		// read its own files for the client.
		if _, ok := oci.ArchivePath(*body.FromImage); ok {
			return template.Spec{}, specErrorf("fromImage %q: only registry images can be built from here", *body.FromImage)
		}
		image = *body.FromImage
	default:
		return template.Spec{}, specErrorf("fromTemplate or fromImage is required")
	}
	if auth != nil && image == "" {
		return template.Spec{}, specErrorf("fromImageRegistry is for pulling fromImage, which is not given")
	}
	// A name:tag, or a name the API built, means the build its tag points
	// at; anything else (a built-in or CLI-built template) the builder
	// resolves.
	if from != "" {
		if v, err := t.records.TemplateVersion(ctx, from); err == nil {
			from = v
		} else if !errors.Is(err, store.ErrNotFound) {
			return template.Spec{}, err
		}
	}
	if len(body.Steps) > maxSteps {
		return template.Spec{}, specErrorf("steps: at most %d, got %d", maxSteps, len(body.Steps))
	}
	spec := template.Spec{Name: name, From: from, FromImage: image, RegistryAuth: auth,
		CPUCount: res.CPUCount, MemoryMB: res.MemoryMB, Recording: body.Recording}
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
		if len(*body.ReadyCmd) > maxArgSize || len(spec.StartCmd) > maxArgSize {
			return template.Spec{}, specErrorf("startCmd or readyCmd: longer than %d bytes", maxArgSize)
		}
		// waitForPort(p) with a start command becomes a ready port: the
		// server dials it, which needs no ss(8) in the image. Any other
		// ready command runs as it is, polled at build and at create.
		if m := waitForPortRE.FindStringSubmatch(*body.ReadyCmd); m != nil && spec.StartCmd != "" {
			spec.ReadyPort, _ = strconv.Atoi(m[1])
		} else {
			spec.ReadyCmd = *body.ReadyCmd
		}
	}
	if err := spec.Validate(); err != nil {
		return template.Spec{}, &specError{err.Error()}
	}
	return spec, nil
}

// registryBody is FromImageRegistry, the credentials of fromImage's
// registry: Template().fromImage(image, {username, password}) sends type
// "registry", fromGCPRegistry "gcp", fromAWSRegistry "aws".
type registryBody struct {
	Type               string `json:"type"`
	Username           string `json:"username"`
	Password           string `json:"password"`
	ServiceAccountJSON string `json:"serviceAccountJson"`
}

// registryAuth returns the credentials of a build request, nil for none.
func registryAuth(raw json.RawMessage) (*oci.Auth, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var r registryBody
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, specErrorf("fromImageRegistry: %v", err)
	}
	switch r.Type {
	case "registry":
		if r.Username == "" || r.Password == "" {
			return nil, specErrorf("fromImageRegistry: username and password are required")
		}
		return &oci.Auth{Username: r.Username, Password: r.Password}, nil
	case "gcp":
		// Google's registries take a service account key as the password
		// of the user _json_key.
		if r.ServiceAccountJSON == "" {
			return nil, specErrorf("fromImageRegistry: serviceAccountJson is required")
		}
		return &oci.Auth{Username: "_json_key", Password: r.ServiceAccountJSON}, nil
	case "aws":
		return nil, specErrorf("fromImageRegistry: AWS credentials are not supported; pass an ECR token as " +
			"fromImage(image, {username: 'AWS', password: <aws ecr get-login-password>})")
	}
	return nil, specErrorf("fromImageRegistry: type %q: want registry, gcp or aws", r.Type)
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
		if err := t.contexts.use(in.FilesHash); errors.Is(err, fs.ErrNotExist) {
			return template.Instruction{}, fmt.Errorf("the files of hash %s were not uploaded (GET /templates/{templateID}/files/{hash} gives the upload link)", in.FilesHash)
		} else if err != nil {
			return template.Instruction{}, err
		}
	}
	return in, nil
}
