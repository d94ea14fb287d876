package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/server"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/template/dockerfile"
)

const templateDetail = `
The template commands work on the server's template cache directly, so they
run on the server host, as a user that can write the data directory (usually
root). A template built here is what Sandbox.create('NAME') starts from on a
server with the same --data-dir; it works whether or not the server runs.`

// addTemplateDataDirFlag defines --data-dir, with serve's default.
func addTemplateDataDirFlag(fs *flag.FlagSet) *string {
	return fs.String("data-dir", server.DefaultConfig().DataDir, "the server's data `DIR` (as given to serve); templates are in DIR/templates")
}

var templateBuildCommand = &command{
	name:    "template build",
	args:    "NAME [CONTEXT_DIR]",
	summary: "build a template from a Dockerfile; needs root",
	detail: `Build the template NAME from a Dockerfile. Each RUN runs in a sandbox of its
own, behind the build egress policy (see serve's --build-* flags), so this
sets up sandbox networking as serve does and cannot run beside a running
server: build through the server's template API then. COPY and ADD take their files
from CONTEXT_DIR (default: the Dockerfile's directory). Progress goes to
standard error: a bar on a terminal, one line per step otherwise. On success
the template's ID, build time and size are printed.

Each step is cached under everything before it, so a rebuild reruns only the
first changed step and those after it; a rebuild with no change is instant.
A failed step prints its number, its line, its exit code and its last output,
and leaves the previous version of the template in place.

Supported Dockerfile subset:
  FROM <template> | debian:<suite>   one stage; a built-in template (base,
                                     code-interpreter-v1) or a Debian system
                                     is built first when missing
  FROM <image>                       an OCI image, pulled anonymously: with a
                                     tag or registry (ubuntu:24.04), or
                                     docker-archive:/abs/path.tar,
                                     oci-archive:/abs/path.tar
  RUN                                shell and exec form, as USER in WORKDIR
  COPY, ADD                          local files of the context; --chown only;
                                     ADD fetches no URLs, unpacks no archives
  ENV, WORKDIR, USER, ARG            ARG values can be set with --build-arg
  CMD, ENTRYPOINT                    the command every sandbox starts with
Anything else (EXPOSE, HEALTHCHECK, a second FROM, ...) is an error naming
its line.

Example:
  agent-sandbox template build -f ./Dockerfile --build-arg VERSION=2 myimage .
` + templateDetail,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		dataDir := addTemplateDataDirFlag(fs)
		var file string
		fs.StringVar(&file, "file", "", "the Dockerfile `PATH` (default: CONTEXT_DIR/Dockerfile)")
		fs.StringVar(&file, "f", "", "the Dockerfile `PATH`, like --file")
		buildArgs := pairs{}
		fs.Var(buildArgs, "build-arg", "set the ARG `NAME=VALUE`; repeatable")
		noCache := fs.Bool("no-cache", false, "rerun every step; the template it starts from is still reused")
		cfg := server.DefaultConfig()
		fs.StringVar(&cfg.Mirror, "mirror", "", "Debian mirror `URL` for FROM debian:<suite> and built-in templates; default "+template.DefaultMirror)
		fs.StringVar(&cfg.EnvdPath, "envd", "", "envd `BINARY` mounted into the build's sandboxes; default: envd next to this executable")
		fs.StringVar(&cfg.DNSUpstream, "dns-upstream", "", "`IP:PORT` of the resolver for the names build steps may use; default: first nameserver in /etc/resolv.conf")
		fs.StringVar(&cfg.Userns, "userns", "auto", "run the build's sandboxes in user namespaces: `MODE` auto, on or off, as for serve")
		addBuildFlags(fs, &cfg)
		verbose := fs.Bool("verbose", false, "also print the build log, with each step's output, on standard error")
		var res template.Spec // only what the template's sandboxes get: resources, recording
		fs.IntVar(&res.CPUCount, "cpu-count", 0, "`CPUS` of each sandbox of the template (default: serve --cpu-count)")
		fs.IntVar(&res.MemoryMB, "memory-mb", 0, "memory in `MIB` of each sandbox of the template (default: serve --memory-mb)")
		fs.Func("disk-io", "disk I/O `CAPS` of each sandbox of the template, as serve --disk-io takes them (default: serve's)", func(s string) error {
			d, err := sandbox.ParseDiskIO(s)
			res.DiskIO = template.DiskIO{ReadMiBps: int(d.ReadBytesPerSec >> 20), WriteMiBps: int(d.WriteBytesPerSec >> 20),
				ReadIOPS: int(d.ReadIOPS), WriteIOPS: int(d.WriteIOPS)}
			return err
		})
		fs.StringVar(&res.Recording, "recording", "", "record the display of every sandbox of the template from its start, in `FORMAT` mp4 or webm (see docs/BROWSER.md)")
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) == 0 || len(args) > 2 {
				return errors.New("want NAME and optionally CONTEXT_DIR")
			}
			req := buildRequest{name: args[0], file: file, buildArgs: buildArgs, noCache: *noCache, resources: res}
			if len(args) == 2 {
				req.contextDir = args[1]
			}
			// Mistakes in the input are told before the sandboxes are set up.
			cfg.DataDir = *dataDir
			build, err := prepareBuild(&template.Builder{DataDir: cfg.DataDir}, req)
			if err != nil {
				return err
			}
			if os.Geteuid() != 0 {
				return errors.New("needs root: build steps run in sandboxes, which use namespaces, cgroups and mounts (run it with sudo)")
			}
			log := slog.New(slog.DiscardHandler)
			if *verbose {
				log = slog.New(slog.NewTextHandler(std.stderr, nil))
			}
			// The steps run in sandboxes with the server's networking,
			// which one process per host holds.
			srv, err := server.New(ctx, cfg, log, std.stderr)
			if err != nil {
				return fmt.Errorf("setting up build sandboxes: %w (while a server runs, build through its template API: the E2B SDK's Template.build)", err)
			}
			defer srv.Close()
			return build.run(ctx, srv.Builder(), std)
		}
	},
}

// buildRequest is what template build was asked to build.
type buildRequest struct {
	name       string
	file       string // the Dockerfile; empty means contextDir/Dockerfile
	contextDir string // empty means the Dockerfile's directory
	buildArgs  map[string]string
	noCache    bool
	resources  template.Spec // CPUCount, MemoryMB, DiskIO and Recording for the spec
}

// resolve fills in the defaults of the Dockerfile and context paths.
func (r *buildRequest) resolve() error {
	switch {
	case r.file == "" && r.contextDir == "":
		r.file, r.contextDir = "Dockerfile", "."
	case r.file == "":
		r.file = filepath.Join(r.contextDir, "Dockerfile")
	case r.contextDir == "":
		r.contextDir = filepath.Dir(r.file)
	}
	fi, err := os.Stat(r.contextDir)
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("build context %s is not a directory", r.contextDir)
	}
	return nil
}

// preparedBuild is a translated Dockerfile whose template can be built.
type preparedBuild struct {
	file  string // the Dockerfile, for errors naming a line
	res   *dockerfile.Result
	start time.Time
}

// prepareBuild checks what a build was asked for without running anything:
// the paths, the Dockerfile, the template name and what it starts from.
// The context's files are packed into b's data directory.
func prepareBuild(b *template.Builder, req buildRequest) (*preparedBuild, error) {
	if err := req.resolve(); err != nil {
		return nil, err
	}
	f, err := os.Open(req.file)
	if err != nil {
		return nil, fmt.Errorf("reading Dockerfile: %w", err)
	}
	defer f.Close()
	start := time.Now()
	res, err := dockerfile.Translate(f, dockerfile.Options{
		Name: req.name, BuildArgs: req.buildArgs, Pack: dockerfile.Packer(req.contextDir, b),
	})
	var de *dockerfile.Error
	if errors.As(err, &de) {
		return nil, fmt.Errorf("%s line %d: %s", req.file, de.Line, de.Msg)
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", req.file, err)
	}
	res.Spec.CPUCount, res.Spec.MemoryMB, res.Spec.DiskIO = req.resources.CPUCount, req.resources.MemoryMB, req.resources.DiskIO
	res.Spec.Recording = req.resources.Recording
	if req.noCache && len(res.Spec.Instructions) > 0 {
		// A forced step reruns, and so does every step after it.
		res.Spec.Instructions[0].Force = true
	}
	if err := res.Spec.Validate(); err != nil {
		return nil, err
	}
	if res.Base == nil {
		if err := b.CheckFrom(res.Spec); err != nil {
			return nil, err
		}
	}
	return &preparedBuild{file: req.file, res: res, start: start}, nil
}

// run builds what the template starts from if that is a Debian system,
// then the template, and prints the result.
func (p *preparedBuild) run(ctx context.Context, b *template.Builder, std streams) error {
	res := p.res
	if res.Base != nil {
		if _, err := b.Ensure(ctx, *res.Base); err != nil {
			return fmt.Errorf("building %s for FROM: %w", res.Base.Name, err)
		}
	}
	t, err := b.Ensure(ctx, res.Spec)
	var se *template.StepError
	if errors.As(err, &se) && se.Step <= len(res.Lines) {
		return fmt.Errorf("%s line %d: %w", p.file, res.Lines[se.Step-1], err)
	} else if err != nil {
		return err
	}
	start := p.start
	took := time.Since(start).Round(time.Millisecond)
	w := tabwriter.NewWriter(std.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Template:\t%s\n", t.ID)
	if t.BuiltAt.Before(start) {
		fmt.Fprintf(w, "Build time:\t%s (up to date: built %s in %s)\n", took, formatTime(t.BuiltAt), t.BuildDuration)
	} else {
		fmt.Fprintf(w, "Build time:\t%s\n", took)
	}
	fmt.Fprintf(w, "Size:\t%s (unchanged files are shared with %s)\n", formatSize(t.SizeBytes), cmp.Or(t.Spec.From, t.Spec.FromImage))
	return w.Flush()
}

var templateListCommand = &command{
	name:    "template list",
	summary: "list the built templates",
	detail: `List the built templates by name, newest version first: NAME, ID, BUILT
(UTC) and SIZE (the root filesystem's size; versions of a template and the
template they start from share unchanged files, so sizes overlap). A
sandbox created with a NAME gets its newest version; an ID names one version.
` + templateDetail,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		dataDir := addTemplateDataDirFlag(fs)
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q", args[0])
			}
			ts, err := (&template.Builder{DataDir: *dataDir}).List()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(std.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tBUILT\tSIZE")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, t.ID, formatTime(t.BuiltAt), formatSize(t.SizeBytes))
			}
			return tw.Flush()
		}
	},
}

var templateRmCommand = &command{
	name:    "template rm",
	args:    "NAME|ID",
	summary: "remove a template, or one version of it",
	detail: `Remove every version of the template NAME, or the one version ID (see
template list), and print what was removed. Stop the sandboxes that use it
first: their root filesystem is the template's. The steps cached while
building it are kept, so building it again is quick.
` + templateDetail,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		dataDir := addTemplateDataDirFlag(fs)
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) != 1 {
				return errors.New("want one template NAME or ID")
			}
			removed, err := (&template.Builder{DataDir: *dataDir}).Remove(ctx, args[0])
			for _, t := range removed {
				fmt.Fprintf(std.stdout, "removed %s (built %s, %s)\n", t.ID, formatTime(t.BuiltAt), formatSize(t.SizeBytes))
			}
			if errors.Is(err, template.ErrNotFound) {
				return unknownTemplate(args[0], *dataDir)
			}
			return err
		}
	},
}

var templateExt4Command = &command{
	name:    "template ext4",
	args:    "NAME|ID",
	summary: "print the path of a template's root filesystem as an ext4 image",
	detail: `Print the path of the template NAME (its newest version) or ID as an ext4
image, the form a microVM boots from, making it on first use (mkfs.ext4 -d:
owners, modes, hard links and extended attributes kept; a quarter free
space). It is kept beside the template's directory and removed with it.
` + templateDetail,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		dataDir := addTemplateDataDirFlag(fs)
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) != 1 {
				return errors.New("want one template NAME or ID")
			}
			b := &template.Builder{DataDir: *dataDir}
			t, err := b.Lookup(args[0])
			if errors.Is(err, template.ErrNotFound) {
				return unknownTemplate(args[0], *dataDir)
			}
			if err != nil {
				return err
			}
			image, err := b.Ext4(ctx, t)
			if err != nil {
				return err
			}
			fmt.Fprintln(std.stdout, image)
			return nil
		}
	},
}

// unknownTemplate is the error for a NAME|ID argument the cache lacks.
func unknownTemplate(ref, dataDir string) error {
	return fmt.Errorf("no template named %q or with that ID in %s (see agent-sandbox template list)", ref, dataDir)
}

// formatSize renders a byte count for people, in binary units.
func formatSize(n int64) string {
	const units = "KMGT"
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/(1<<10), 0
	for v >= 1<<10 && i < len(units)-1 {
		v /= 1 << 10
		i++
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0") + " " + units[i:i+1] + "iB"
}
