package cli

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func findCommand(t *testing.T, name string) *command {
	t.Helper()
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no command %q", name)
	return nil
}

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		command   string
		args      []string
		wantPos   []string
		wantFlags map[string]string
		wantErr   string
	}{
		{name: "exec with --", command: "sandbox exec", args: []string{"sb1", "--user", "u", "--", "ls", "-l"},
			wantPos: []string{"sb1", "ls", "-l"}, wantFlags: map[string]string{"user": "u"}},
		{name: "exec flags first", command: "sandbox exec", args: []string{"--cwd=/tmp", "--env", "A=1", "--env", "B=2", "sb1", "echo hi"},
			wantPos: []string{"sb1", "echo hi"}, wantFlags: map[string]string{"cwd": "/tmp", "env": "A=1,B=2"}},
		{name: "exec command flags are the command's", command: "sandbox exec", args: []string{"sb1", "--stdin", "ls", "-l", "--user", "x"},
			wantPos: []string{"sb1", "ls", "-l", "--user", "x"}, wantFlags: map[string]string{"stdin": "true", "user": ""}},
		{name: "exec -- inside the command is kept", command: "sandbox exec", args: []string{"sb1", "git", "log", "--", "f"},
			wantPos: []string{"sb1", "git", "log", "--", "f"}},
		{name: "exec bad env", command: "sandbox exec", args: []string{"--env", "novalue", "sb1", "true"}, wantErr: `"novalue" is not KEY=VALUE`},
		{name: "kill interspersed", command: "sandbox kill", args: []string{"a", "--api-url", "http://x", "b"},
			wantPos: []string{"a", "b"}, wantFlags: map[string]string{"api-url": "http://x"}},
		{name: "kill after --", command: "sandbox kill", args: []string{"a", "--", "--b"}, wantPos: []string{"a", "--b"}},
		{name: "list filters", command: "sandbox list", args: []string{"--state", "running,paused", "--metadata", "a=b", "--metadata=c=d=e", "--json"},
			wantFlags: map[string]string{"state": "running,paused", "metadata": "a=b,c=d=e", "json": "true"}},
		{name: "unknown flag", command: "sandbox list", args: []string{"--nope"}, wantErr: "flag provided but not defined: -nope"},
		{name: "shell user after ID", command: "sandbox shell", args: []string{"sb1", "--user", "root"},
			wantPos: []string{"sb1"}, wantFlags: map[string]string{"user": "root"}},
		{name: "keys create", command: "keys create", args: []string{"--name", "ci", "--data-dir", "/d"},
			wantFlags: map[string]string{"name": "ci", "data-dir": "/d"}},
		{name: "keys default data dir", command: "keys list", wantFlags: map[string]string{"data-dir": "/var/lib/agent-sandbox"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := findCommand(t, tt.command)
			fs := c.flagSet()
			c.setup(fs)
			pos, err := c.parse(fs, tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parse error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.wantPos, pos); diff != "" {
				t.Errorf("positional arguments (-want +got):\n%s", diff)
			}
			for name, want := range tt.wantFlags {
				if got := fs.Lookup(name).Value.String(); got != want {
					t.Errorf("--%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

// TestHelpIsComplete checks that every command's --help names every flag it
// has and, for commands that talk to the server, every variable it reads.
func TestHelpIsComplete(t *testing.T) {
	top := runCLI(t, "", "help")
	if top.err != nil {
		t.Fatal(top.err)
	}
	for _, c := range allCommands() {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(top.stdout, "  "+c.name+" ") {
				t.Errorf("agent-sandbox help does not list %q", c.name)
			}
			group := strings.Fields(c.name)[0]
			if g := runCLI(t, "", group, "--help"); !strings.Contains(g.stdout, c.name) {
				t.Errorf("agent-sandbox %s --help does not list %q", group, c.name)
			}
			for _, h := range []string{"--help", "-h"} {
				res := runCLI(t, "", append(strings.Fields(c.name), h)...)
				if res.err != nil {
					t.Fatalf("%s: %v", h, res.err)
				}
				if !strings.HasPrefix(res.stdout, "Usage: agent-sandbox "+c.name) {
					t.Errorf("%s output starts %q", h, firstLine(res.stdout))
				}
			}
			help := runCLI(t, "", append(strings.Fields(c.name), "--help")...).stdout
			fs := c.flagSet()
			c.setup(fs)
			fs.VisitAll(func(f *flag.Flag) {
				if !strings.Contains(help, "  "+flagSpelling(f.Name)+" ") {
					t.Errorf("help lacks %s:\n%s", flagSpelling(f.Name), help)
				}
			})
			for line := range strings.Lines(help) {
				if strings.Count(line, "(default ") > 1 {
					t.Errorf("two defaults in one line: %s", line)
				}
				// A flag's value is named by its help (`NAME`), not by
				// its Go type.
				if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[0], "--") &&
					slices.Contains([]string{"int", "int64", "uint", "float64", "string", "duration", "value"}, f[1]) {
					t.Errorf("value named by its type: %s", line)
				}
			}
			if c.env {
				for _, v := range []string{"E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN", "E2B_API_KEY"} {
					if !strings.Contains(help, v) {
						t.Errorf("help lacks %s", v)
					}
				}
			}
		})
	}
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func TestCommandErrors(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "no command", args: nil, wantErr: "no command given"},
		{name: "unknown command", args: []string{"nope"}, wantErr: `unknown command "nope"`},
		{name: "no subcommand", args: []string{"sandbox"}, wantErr: "sandbox: no subcommand given"},
		{name: "unknown subcommand", args: []string{"keys", "nope"}, wantErr: `unknown command "keys nope"`},
		{name: "bad flag names the help", args: []string{"sandbox", "list", "--nope"}, wantErr: "see agent-sandbox sandbox list --help"},
		{name: "no server", args: []string{"sandbox", "list"}, wantErr: "no server given: set E2B_API_URL"},
		{name: "no key", args: []string{"sandbox", "list", "--api-url", "http://localhost:1"}, wantErr: "no API key: set E2B_API_KEY or pass --api-key"},
		{name: "bad url", args: []string{"sandbox", "list", "--api-url", "localhost:3000", "--api-key", "k"}, wantErr: "scheme must be http or https"},
		{name: "bad state", args: []string{"sandbox", "list", "--state", "dead"}, wantErr: `"dead" is not running or paused`},
		{name: "kill nothing", args: []string{"sandbox", "kill"}, wantErr: "no sandbox ID given"},
		{name: "exec no command", args: []string{"sandbox", "exec", "sb1"}, wantErr: "no command given"},
		{name: "shell two IDs", args: []string{"sandbox", "shell", "a", "b"}, wantErr: "want exactly one sandbox ID"},
		{name: "shell without a terminal", args: []string{"sandbox", "shell", "a"}, wantErr: "standard input is not a terminal"},
		{name: "keys create without name", args: []string{"keys", "create", "--data-dir", "/nonexistent"}, wantErr: "--name is required"},
		{name: "keys list without a database", args: []string{"keys", "list", "--data-dir", "/nonexistent"}, wantErr: "no database at /nonexistent/agent-sandbox.db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runCLI(t, "", tt.args...)
			if res.err == nil || !strings.Contains(res.err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want it to contain %q", res.err, tt.wantErr)
			}
		})
	}
}

func TestUnreachableServer(t *testing.T) {
	clearEnv(t)
	res := runCLI(t, "", "sandbox", "list", "--api-url", "http://127.0.0.1:1", "--api-key", testKey)
	if res.err == nil || !strings.Contains(res.err.Error(), "is the server running at http://127.0.0.1:1?") {
		t.Errorf("error = %v", res.err)
	}
}

func TestExitError(t *testing.T) {
	for code, want := range map[int]error{0: nil, 3: &ExitError{3}, -1: &ExitError{255}, 300: &ExitError{255}} {
		if diff := cmp.Diff(want, exitError(code)); diff != "" {
			t.Errorf("exitError(%d) (-want +got):\n%s", code, diff)
		}
	}
	var exit *ExitError
	if !errors.As(exitError(2), &exit) || exit.Error() != "exit code 2" {
		t.Errorf("exitError(2) = %v", exitError(2))
	}
}

func TestCommandLine(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"echo $HOME | wc"}, "echo $HOME | wc"},
		{[]string{"ls", "-l", "/my dir"}, "ls -l '/my dir'"},
		{[]string{"echo", "it's", "", "$x", "a=b"}, `echo 'it'\''s' '' '$x' a=b`},
	}
	for _, tt := range tests {
		if got := commandLine(tt.args); got != tt.want {
			t.Errorf("commandLine(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}
