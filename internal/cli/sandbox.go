package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// serverFlags are the flags every sandbox command has: where the server is
// and the key. They override the environment.
type serverFlags struct {
	apiURL, apiKey string
}

func addServerFlags(fs *flag.FlagSet) *serverFlags {
	f := &serverFlags{}
	fs.StringVar(&f.apiURL, "api-url", "", "control-plane `URL`, e.g. http://localhost:3000 (overrides E2B_API_URL)")
	fs.StringVar(&f.apiKey, "api-key", "", "API `KEY` (overrides E2B_API_KEY)")
	return f
}

// client returns an SDK client for the environment and flags, or an error
// that says what to set.
func (f *serverFlags) client() (*client.Client, error) {
	cfg := client.FromEnv()
	if f.apiURL != "" {
		cfg.APIURL = f.apiURL
	}
	if f.apiKey != "" {
		cfg.APIKey = f.apiKey
	}
	if cfg.APIURL == "" && cfg.Domain == "" {
		// The SDK default would be E2B's cloud; a self-hosted CLI should
		// not go there by accident.
		return nil, errors.New("no server given: set E2B_API_URL (e.g. http://localhost:3000) or E2B_DOMAIN, or pass --api-url")
	}
	if cfg.APIKey == "" {
		return nil, errors.New(`no API key: set E2B_API_KEY or pass --api-key (on the server, "agent-sandbox keys create --name NAME" makes one)`)
	}
	if cfg.SandboxURL == "" && cfg.Domain == "" {
		// Only a URL: the server routes sandbox traffic by header on the
		// same address.
		cfg.SandboxURL = cfg.APIURL
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("server address: %w", err)
	}
	return c, nil
}

// explain adds what to do to the errors a user can fix.
func explain(c *client.Client, err error) error {
	var apiErr *client.APIError
	var netErr *net.OpError
	switch {
	case errors.As(err, &apiErr) && apiErr.Status == 401:
		return fmt.Errorf("%w (check E2B_API_KEY or --api-key)", err)
	case errors.As(err, &netErr):
		return fmt.Errorf("%w (is the server running at %s? check E2B_API_URL or --api-url)", err, c.APIURL())
	}
	return err
}

var sandboxListCommand = &command{
	name:    "sandbox list",
	summary: "list running and paused sandboxes",
	detail: `List the sandboxes the server knows, running and paused, newest first.
The table shows ID, TEMPLATE, STATE, STARTED, ENDS (when the sandbox times
out), CPU (count) and MEM; --json prints the API's objects instead.`,
	env:          true,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		server := addServerFlags(fs)
		state := fs.String("state", "", "only sandboxes in these `STATES`: running, paused or running,paused")
		metadata := pairs{}
		fs.Var(metadata, "metadata", "only sandboxes with metadata `KEY=VALUE` (repeatable; all must match)")
		asJSON := fs.Bool("json", false, "print JSON instead of a table")
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q", args[0])
			}
			opts := client.ListOptions{Metadata: metadata}
			if *state != "" {
				for s := range strings.SplitSeq(*state, ",") {
					st := client.State(strings.TrimSpace(s))
					if st != client.StateRunning && st != client.StatePaused {
						return fmt.Errorf("--state: %q is not running or paused", s)
					}
					opts.State = append(opts.State, st)
				}
			}
			c, err := server.client()
			if err != nil {
				return err
			}
			all := []client.SandboxInfo{}
			for {
				page, next, err := c.ListSandboxes(ctx, opts)
				if err != nil {
					return explain(c, err)
				}
				all = append(all, page...)
				if next == "" {
					break
				}
				opts.NextToken = next
			}
			if *asJSON {
				enc := json.NewEncoder(std.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(all)
			}
			tw := tabwriter.NewWriter(std.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTEMPLATE\tSTATE\tSTARTED\tENDS\tCPU\tMEM")
			for _, sb := range all {
				tmpl := sb.TemplateID
				if sb.Alias != "" {
					tmpl = sb.Alias
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%dMiB\n", sb.ID, tmpl, sb.State,
					formatTime(sb.StartedAt), formatTime(sb.EndAt), sb.CPUCount, sb.MemoryMB)
			}
			return tw.Flush()
		}
	},
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

var sandboxKillCommand = &command{
	name:         "sandbox kill",
	args:         "ID...",
	summary:      "kill sandboxes",
	detail:       `Kill the sandboxes with the given IDs. Killing an unknown sandbox is an error.`,
	env:          true,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		server := addServerFlags(fs)
		return func(ctx context.Context, ids []string, std streams) error {
			if len(ids) == 0 {
				return errors.New("no sandbox ID given")
			}
			c, err := server.client()
			if err != nil {
				return err
			}
			failed := 0
			for _, id := range ids {
				if err := c.KillSandbox(ctx, id); err != nil {
					if errors.Is(err, client.ErrNotFound) {
						err = fmt.Errorf("sandbox %s not found", id)
					}
					fmt.Fprintf(std.stderr, "agent-sandbox: %v\n", explain(c, err))
					failed++
					continue
				}
				fmt.Fprintln(std.stdout, id)
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d sandboxes not killed", failed, len(ids))
			}
			return nil
		}
	},
}

var sandboxExecCommand = &command{
	name:    "sandbox exec",
	args:    "ID [--] CMD [ARG...]",
	summary: "run a command in a sandbox",
	detail: `Run a command in a sandbox with "bash -l -c", stream its output and exit
with its exit code (255 if a signal killed it).

A single CMD is a shell command line: agent-sandbox sandbox exec ID 'ls | wc -l'.
Several words are one command and its arguments, each quoted for the shell:
agent-sandbox sandbox exec ID -- ls -l '/my dir'. Flags go before the
command; use "--" when the command starts with "-".

Standard input is not forwarded unless --stdin is given.`,
	env: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		server := addServerFlags(fs)
		user := fs.String("user", "", "run as this `USER` (default: the sandbox's default user)")
		cwd := fs.String("cwd", "", "working `DIR` (default: the user's home)")
		envs := pairs{}
		fs.Var(envs, "env", "set environment variable `KEY=VALUE` (repeatable)")
		stdin := fs.Bool("stdin", false, "forward standard input to the command")
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) == 0 {
				return errors.New("no sandbox ID given")
			}
			if len(args) == 1 {
				return errors.New("no command given")
			}
			c, err := server.client()
			if err != nil {
				return err
			}
			sb, err := c.Connect(ctx, args[0], client.ConnectOptions{})
			if err != nil {
				return explain(c, err)
			}
			opts := client.RunOptions{User: *user, Cwd: *cwd, Envs: envs, Stdout: std.stdout, Stderr: std.stderr}
			if *stdin {
				opts.Stdin = std.stdin
			}
			code, err := sb.Run(ctx, commandLine(args[1:]), opts)
			if err != nil {
				return err
			}
			return exitError(code)
		}
	},
}

// commandLine turns exec's arguments into a bash command line: one argument
// is used as is, several are quoted word by word.
func commandLine(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	return strings.Join(quoted, " ")
}

// shellQuote quotes s for a POSIX shell unless it is plainly safe.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
