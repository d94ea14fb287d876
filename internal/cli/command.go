package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// command is one "group verb" subcommand, e.g. "sandbox list".
type command struct {
	name    string // "sandbox list"
	args    string // synopsis after the name and "[flags]", e.g. "ID..."
	summary string // one line for the command list
	detail  string // paragraphs for --help
	env     bool   // reads the E2B_* environment variables
	// setup defines the flags on fs and returns the function that runs the
	// command with the positional arguments.
	setup func(fs *flag.FlagSet) func(ctx context.Context, args []string, std streams) error
	// interspersed lets flags follow positional arguments. Off for
	// commands whose trailing arguments are a command line.
	interspersed bool
}

// commands is every grouped subcommand, in the order help lists them.
var commands = []*command{
	sandboxListCommand, sandboxKillCommand, sandboxExecCommand, sandboxShellCommand, sandboxAuditCommand, sandboxNetworkCommand,
	keysCreateCommand, keysListCommand, keysRevokeCommand,
	templateBuildCommand, templateListCommand, templateRmCommand, templateExt4Command,
}

const envHelp = `  E2B_API_URL      control-plane URL, e.g. http://localhost:3000
                   (default https://api.$E2B_DOMAIN)
  E2B_SANDBOX_URL  URL for sandbox traffic, routed by the E2b-Sandbox-Id
                   header (default: per-sandbox hosts under E2B_DOMAIN, or,
                   when E2B_DOMAIN is unset, the control-plane URL)
  E2B_DOMAIN       base domain of the API and sandbox hosts
  E2B_API_KEY      API key (create one on the server with
                   "agent-sandbox keys create --name NAME")
`

// runGroup runs "<group> <verb> ...".
func runGroup(ctx context.Context, group string, args []string, std streams) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		w := std.stdout
		if len(args) == 0 {
			w = std.stderr
		}
		fmt.Fprint(w, groupUsage(group))
		if len(args) == 0 {
			return fmt.Errorf("%s: no subcommand given", group)
		}
		return nil
	}
	name := group + " " + args[0]
	for _, c := range commands {
		if c.name == name {
			return c.run(ctx, args[1:], std)
		}
	}
	return fmt.Errorf("unknown command %q (see agent-sandbox %s --help)", name, group)
}

func groupUsage(group string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: agent-sandbox %s <command> [flags]\n\nCommands:\n", group)
	for _, c := range commands {
		if strings.HasPrefix(c.name, group+" ") {
			fmt.Fprintf(&b, "  %-16s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintf(&b, "\nRun \"agent-sandbox %s <command> --help\" for a command's flags.\n", group)
	return b.String()
}

// run parses args and runs the command. --help prints the usage to stdout
// and succeeds.
func (c *command) run(ctx context.Context, args []string, std streams) error {
	fs := c.flagSet()
	runFn := c.setup(fs)
	pos, err := c.parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(std.stdout, c.usage(fs))
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w (see agent-sandbox %s --help)", c.name, err, c.name)
	}
	if err := runFn(ctx, pos, std); err != nil {
		var exit *ExitError
		if errors.As(err, &exit) {
			return err
		}
		return fmt.Errorf("%s: %w", c.name, err)
	}
	return nil
}

func (c *command) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, usage printed by run
	fs.Usage = func() {}
	return fs
}

// parse returns the positional arguments. Flags may come before, between
// and after them, up to a "--". Without interspersed, everything from the
// second positional argument on (the first is an ID) is returned verbatim:
// it is a command line with flags of its own.
func (c *command) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		switch {
		case len(rest) == 0:
			return pos, nil
		case len(rest) < len(args) && args[len(args)-len(rest)-1] == "--":
			// Parsing stopped at "--": the rest is verbatim.
			return append(pos, rest...), nil
		case !c.interspersed && len(pos) == 1:
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usage is the --help text: synopsis, description, every flag and, for
// commands that talk to the server, the environment.
func (c *command) usage(fs *flag.FlagSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: agent-sandbox %s [flags]", c.name)
	if c.args != "" {
		fmt.Fprintf(&b, " %s", c.args)
	}
	fmt.Fprintf(&b, "\n\n%s\n", strings.TrimSpace(c.detail))
	b.WriteString("\nFlags:\n")
	fs.VisitAll(func(f *flag.Flag) {
		name, help := flag.UnquoteUsage(f)
		left := flagSpelling(f.Name)
		if name != "" {
			left += " " + name
		}
		fmt.Fprintf(&b, "  %-22s %s", left, help)
		// A help that names its own default (one that depends on other
		// flags, say) keeps it: the flag's zero value would contradict it.
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" && !strings.Contains(help, "(default ") {
			fmt.Fprintf(&b, " (default %s)", f.DefValue)
		}
		b.WriteString("\n")
	})
	fmt.Fprintf(&b, "  %-22s %s\n", "-h, --help", "show this help")
	if c.env {
		b.WriteString("\nEnvironment (flags win):\n")
		b.WriteString(envHelp)
	}
	return b.String()
}

// pairs is a repeatable K=V flag.
type pairs map[string]string

// String implements flag.Value.
func (p pairs) String() string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(p)) {
		s = append(s, k+"="+p[k])
	}
	return strings.Join(s, ",")
}

// Set implements flag.Value.
func (p pairs) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	p[k] = val
	return nil
}

// list is a repeatable flag whose values may also be comma-separated.
type list []string

// String implements flag.Value.
func (l *list) String() string { return strings.Join(*l, ",") }

// Set implements flag.Value.
func (l *list) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// flagSpelling is how help spells a flag: one dash for a one-letter name
// (-f), two otherwise (--file). The flag package takes either.
func flagSpelling(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// funcValue is a flag.Value of a parser and a printer, so that --help
// shows a typed setting's default as the flag takes it.
type funcValue struct {
	set func(string) error
	get func() string
}

// String implements flag.Value.
func (v funcValue) String() string {
	if v.get == nil {
		return ""
	}
	return v.get()
}

// Set implements flag.Value.
func (v funcValue) Set(s string) error { return v.set(s) }
