package envd

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
)

// ExecAsCommand is the envd subcommand that runs a command with exact
// credentials: `envd exec-as -uid N -gid N [-groups N,N] [-dir DIR]
// [-env K=V]... [-merge-output] -- ARGV...`. The server's template build steps start it
// through the process API as root, because a Dockerfile USER may name a
// uid, or a group other than the user's, that the sandbox's account
// database does not know, and the process API takes user names only. It
// makes DIR (and missing parents) owned by uid:gid if missing, changes
// into it, drops to the credentials, and executes ARGV[0], an absolute
// path, with exactly the -env variables; -merge-output makes its stderr
// its stdout, so that a build log keeps the order of what it printed.
const ExecAsCommand = "exec-as"

// execAsSpec is a parsed exec-as command line.
type execAsSpec struct {
	uid, gid uint32
	groups   []uint32
	dir      string
	env      []string
	merge    bool
	argv     []string
}

// parseExecAs parses the arguments after "exec-as".
func parseExecAs(args []string) (execAsSpec, error) {
	fs := flag.NewFlagSet(ExecAsCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	uid := fs.Uint("uid", 0, "user id")
	gid := fs.Uint("gid", 0, "group id")
	groups := fs.String("groups", "", "supplementary group ids, comma-separated")
	dir := fs.String("dir", "/", "working directory")
	var env listFlag
	fs.Var(&env, "env", "an environment variable K=V; repeatable")
	merge := fs.Bool("merge-output", false, "send stderr to stdout")
	if err := fs.Parse(args); err != nil {
		return execAsSpec{}, fmt.Errorf("%s: %w", ExecAsCommand, err)
	}
	s := execAsSpec{uid: uint32(*uid), gid: uint32(*gid), dir: *dir, env: env, merge: *merge, argv: fs.Args()}
	if *uid > 1<<32-1 || *gid > 1<<32-1 {
		return execAsSpec{}, fmt.Errorf("%s: id out of range", ExecAsCommand)
	}
	if len(s.argv) == 0 || !filepath.IsAbs(s.argv[0]) || !filepath.IsAbs(s.dir) {
		return execAsSpec{}, fmt.Errorf("%s: want an absolute command path and working directory, got %q in %q", ExecAsCommand, s.argv, s.dir)
	}
	for _, kv := range s.env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return execAsSpec{}, fmt.Errorf("%s: -env %q: want K=V", ExecAsCommand, kv)
		}
	}
	if *groups != "" {
		for _, g := range strings.Split(*groups, ",") {
			n, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				return execAsSpec{}, fmt.Errorf("%s: -groups %q: %w", ExecAsCommand, *groups, err)
			}
			s.groups = append(s.groups, uint32(n))
		}
	}
	return s, nil
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
