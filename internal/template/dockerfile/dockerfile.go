// Package dockerfile turns a Dockerfile into a template spec: the front end
// of `agent-sandbox template build`. It parses with BuildKit's own
// Dockerfile parser and shell-word expander, so quoting, line continuations
// and $VAR expansion are Docker's, and translates the subset the template
// builder runs:
//
//	FROM <template> | debian:<suite>     (one stage)
//	FROM <image>                         (an OCI image: a registry reference
//	                                      with a tag, digest or registry host, or
//	                                      docker-archive:/abs/path.tar or
//	                                      oci-archive:/abs/path.tar; pulled
//	                                      anonymously)
//	RUN  (shell and exec form)
//	COPY, ADD                            (local files; --chown only; ADD does
//	                                      not fetch URLs or unpack archives)
//	ENV, WORKDIR, USER, ARG
//	CMD, ENTRYPOINT                      (the template's start command)
//
// Anything else is an error naming the line.
package dockerfile

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/template/oci"
)

// Supported lists the instructions Translate accepts, for error messages.
const Supported = "FROM, RUN, COPY, ADD, ENV, WORKDIR, USER, ARG, CMD, ENTRYPOINT"

// Options are what a translation needs besides the Dockerfile.
type Options struct {
	// Name is the template's name.
	Name string
	// BuildArgs override ARG defaults (--build-arg).
	BuildArgs map[string]string
	// Pack stores the build-context files that a COPY names (context
	// paths, possibly globs) as a context archive and returns its hash
	// (see [Pack] and template.Builder.ContextArchive).
	Pack func(srcs []string) (string, error)
}

// Result is a translated Dockerfile.
type Result struct {
	// Spec is the template to build.
	Spec template.Spec
	// Base, when not nil, is the template Spec.From names and that must
	// be built first: the Debian system of a FROM debian:<suite>.
	Base *template.Spec
	// Lines holds the Dockerfile line of each of Spec.Instructions, so
	// that a failed build step can be traced to its line.
	Lines []int
}

// Error is a problem with one line of the Dockerfile.
type Error struct {
	Line int
	Msg  string
}

// Error implements error.
func (e *Error) Error() string { return fmt.Sprintf("Dockerfile line %d: %s", e.Line, e.Msg) }

var (
	debianRE   = regexp.MustCompile(`^debian:([a-z]+)(-slim)?$`)
	templateRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
)

// DebianBase is the spec of the plain Debian template that FROM
// debian:<suite> builds on: debootstrap's minbase, run as root in /root,
// like Docker's debian image.
func DebianBase(suite string) template.Spec {
	return template.Spec{
		Name: "debian-" + suite, Suite: suite, Variant: "minbase",
		User: "root", Workdir: "/root", Env: map[string]string{"LANG": "C.UTF-8"},
	}
}

// translator holds the state of one translation.
type translator struct {
	opts Options
	lex  *shell.Lex
	args map[string]string // ARGs in scope, with their values
	// meta are the ARGs declared before FROM: only FROM sees them, and an
	// ARG without a value after FROM takes its value from them, as in
	// Docker.
	meta  map[string]string
	env   map[string]string // ENV so far, for expansion
	res   Result
	line  int      // the line of the instruction being translated
	seen  bool     // FROM seen
	entry []string // ENTRYPOINT, quoted for the shell
	cmd   []string // CMD, likewise
}

// Translate reads a Dockerfile and returns the template it describes.
func Translate(r io.Reader, opts Options) (*Result, error) {
	ast, err := parser.Parse(r)
	if err != nil {
		var le *parser.LocationError
		if errors.As(err, &le) && len(le.Locations) > 0 && len(le.Locations[0]) > 0 {
			return nil, &Error{Line: le.Locations[0][0].Start.Line, Msg: le.Error()}
		}
		return nil, fmt.Errorf("parsing Dockerfile: %w", err)
	}
	t := &translator{
		opts: opts, lex: shell.NewLex(ast.EscapeToken),
		args: map[string]string{}, env: map[string]string{},
	}
	t.res.Spec.Name = opts.Name
	for _, n := range ast.AST.Children {
		t.line = n.StartLine
		if err := t.node(n); err != nil {
			var e *Error
			if errors.As(err, &e) {
				return nil, err
			}
			return nil, &Error{Line: n.StartLine, Msg: err.Error()}
		}
	}
	if !t.seen {
		return nil, errors.New("the Dockerfile has no FROM")
	}
	if len(t.entry) > 0 || len(t.cmd) > 0 {
		t.res.Spec.StartCmd = strings.Join(append(slices.Clone(t.entry), t.cmd...), " ")
	}
	if err := t.res.Spec.Validate(); err != nil {
		return nil, err
	}
	return &t.res, nil
}

func (t *translator) node(n *parser.Node) error {
	op := strings.ToUpper(n.Value)
	if len(n.Heredocs) > 0 {
		return fmt.Errorf("%s with a here-document is not supported", op)
	}
	if op != "FROM" && op != "ARG" && !t.seen {
		return fmt.Errorf("%s before FROM", op)
	}
	words := nodeWords(n)
	switch op {
	case "FROM":
		return t.from(n, words)
	case "ARG":
		return t.arg(n, words)
	case "RUN":
		if err := noFlags(n); err != nil {
			return err
		}
		return t.add(template.Instruction{Op: template.OpRun, Args: []string{t.runCommand(n, words)}})
	case "COPY", "ADD":
		return t.copy(n, op, words)
	case "ENV":
		return t.envNode(words)
	case "WORKDIR", "USER":
		if err := noFlags(n); err != nil {
			return err
		}
		if len(words) != 1 {
			return fmt.Errorf("%s wants one argument", op)
		}
		v, err := t.expand(words[0])
		if err != nil {
			return err
		}
		return t.add(template.Instruction{Op: op, Args: []string{v}})
	case "CMD", "ENTRYPOINT":
		form := []string{strings.Join(words, " ")}
		if n.Attributes["json"] {
			form = quoteAll(words)
		}
		if op == "CMD" {
			t.cmd = form
		} else {
			t.entry = form
		}
		return nil
	}
	return fmt.Errorf("%s is not supported (supported: %s)", op, Supported)
}

// nodeWords returns the arguments of an instruction node.
func nodeWords(n *parser.Node) []string {
	var w []string
	for x := n.Next; x != nil; x = x.Next {
		w = append(w, x.Value)
	}
	return w
}

func noFlags(n *parser.Node) error {
	if len(n.Flags) > 0 {
		return fmt.Errorf("%s %s is not supported", strings.ToUpper(n.Value), strings.Join(n.Flags, " "))
	}
	return nil
}

func (t *translator) from(n *parser.Node, words []string) error {
	if t.seen {
		return fmt.Errorf("a second FROM: multi-stage builds are not supported (one FROM; supported: %s)", Supported)
	}
	if err := noFlags(n); err != nil {
		return err
	}
	if len(words) != 1 && (len(words) != 3 || !strings.EqualFold(words[1], "AS")) {
		return errors.New("FROM wants an image and optionally AS name")
	}
	image, err := t.expand(words[0])
	if err != nil {
		return err
	}
	t.seen = true
	// ARGs before FROM are only for FROM, as in Docker.
	t.meta, t.args = t.args, map[string]string{}
	if m := debianRE.FindStringSubmatch(image); m != nil {
		base := DebianBase(m[1])
		t.res.Base = &base
		t.res.Spec.From = base.Name
		return nil
	}
	if image == "scratch" {
		return errors.New("FROM scratch: a sandbox needs at least /bin/sh; start from a template " +
			"(see agent-sandbox template list), debian:<suite> or an image")
	}
	// A bare name is a template: an image without a tag or registry host
	// is written with one ("ubuntu:24.04", "docker.io/library/ubuntu").
	if templateRE.MatchString(image) {
		t.res.Spec.From = image
		return nil
	}
	if err := oci.CheckRef(image); err != nil {
		return fmt.Errorf("FROM %s: %w", image, err)
	}
	t.res.Spec.FromImage = image
	return nil
}

func (t *translator) arg(n *parser.Node, words []string) error {
	if err := noFlags(n); err != nil {
		return err
	}
	for _, w := range words {
		name, def, hasDef := strings.Cut(w, "=")
		if hasDef {
			v, err := t.expand(def)
			if err != nil {
				return err
			}
			def = v
		}
		if v, ok := t.meta[name]; ok && !hasDef {
			def, hasDef = v, true
		}
		if v, ok := t.opts.BuildArgs[name]; ok {
			def, hasDef = v, true
		}
		if hasDef {
			t.args[name] = def
		} else if _, ok := t.args[name]; !ok {
			t.args[name] = ""
		}
	}
	return nil
}

// runCommand returns the shell command of a RUN. The exec form is quoted
// for /bin/sh; ARGs in scope are exported to it, as Docker puts them in a
// RUN's environment without keeping them in the image's.
func (t *translator) runCommand(n *parser.Node, words []string) string {
	cmd := strings.Join(words, " ")
	if n.Attributes["json"] {
		cmd = strings.Join(quoteAll(words), " ")
	}
	var exports []string
	for _, k := range slices.Sorted(maps.Keys(t.args)) {
		if _, shadowed := t.env[k]; !shadowed {
			exports = append(exports, k+"="+shellQuote(t.args[k]))
		}
	}
	if len(exports) > 0 {
		cmd = "export " + strings.Join(exports, " ") + "; " + cmd
	}
	return cmd
}

func (t *translator) copy(n *parser.Node, op string, words []string) error {
	in := template.Instruction{Op: template.OpCopy}
	for _, f := range n.Flags {
		v, ok := strings.CutPrefix(f, "--chown=")
		if !ok {
			return fmt.Errorf("%s %s is not supported (only --chown)", op, f)
		}
		exp, err := t.expand(v)
		if err != nil {
			return err
		}
		in.Chown = exp
	}
	if len(words) < 2 {
		return fmt.Errorf("%s wants at least one source and a destination", op)
	}
	for _, w := range words {
		v, err := t.expand(w)
		if err != nil {
			return err
		}
		in.Args = append(in.Args, v)
	}
	srcs := in.Args[:len(in.Args)-1]
	for _, s := range srcs {
		if strings.Contains(s, "://") || strings.HasPrefix(s, "git@") {
			return fmt.Errorf("%s %s: only local files of the build context can be copied", op, s)
		}
		// Docker's ADD unpacks a local archive; copying it whole instead
		// would build something else without a word.
		if op == "ADD" && isArchive(s) {
			return fmt.Errorf("ADD %s: unpacking archives is not supported; COPY it and unpack it with RUN tar", s)
		}
	}
	if t.opts.Pack == nil {
		return errors.New("no build context to copy from")
	}
	hash, err := t.opts.Pack(srcs)
	if err != nil {
		return err
	}
	in.FilesHash = hash
	return t.add(in)
}

func (t *translator) envNode(words []string) error {
	if len(words) == 0 || len(words)%3 != 0 {
		return errors.New("ENV wants name=value pairs")
	}
	in := template.Instruction{Op: template.OpEnv}
	for i := 0; i < len(words); i += 3 {
		v, err := t.expand(words[i+1])
		if err != nil {
			return err
		}
		in.Args = append(in.Args, words[i], v)
		t.env[words[i]] = v
	}
	return t.add(in)
}

// add appends in to the spec, checked as the builder will check it, so
// that a bad value is reported with its line.
func (t *translator) add(in template.Instruction) error {
	if err := in.Validate(); err != nil {
		return err
	}
	t.res.Spec.Instructions = append(t.res.Spec.Instructions, in)
	t.res.Lines = append(t.res.Lines, t.line)
	return nil
}

// isArchive reports whether ADD would unpack name: Docker looks at the
// content, this only at the usual suffixes.
func isArchive(name string) bool {
	for _, ext := range []string{".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst"} {
		if strings.HasSuffix(strings.ToLower(name), ext) {
			return true
		}
	}
	return false
}

// expand processes a word as Docker does: quotes removed, $VAR and ${VAR}
// replaced from the ENVs and ARGs so far.
func (t *translator) expand(word string) (string, error) {
	env := make([]string, 0, len(t.args)+len(t.env))
	for k, v := range t.args {
		env = append(env, k+"="+v)
	}
	for k, v := range t.env {
		env = append(env, k+"="+v)
	}
	out, _, err := t.lex.ProcessWord(word, shell.EnvsFromSlice(env))
	if err != nil {
		return "", fmt.Errorf("expanding %q: %w", word, err)
	}
	return out, nil
}

func quoteAll(words []string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = shellQuote(w)
	}
	return out
}

// shellQuote quotes s for /bin/sh, leaving plain words alone.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
