// Package cli is the agent-sandbox command line: it parses the subcommand and
// hands off to the package that does the work.
package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/agent-sandbox/agent-sandbox/internal/envd"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
)

const usage = `Usage: agent-sandbox <command> [flags]

agent-sandbox runs disposable, isolated Linux sandboxes for AI agents and
speaks the E2B protocol, so the official E2B SDKs work against it.

Commands:
  version   print the agent-sandbox version and the envd protocol version
  help      show this help

The server (serve), template, sandbox and key commands are not built yet;
see the project's issues for their state.
`

// version is set at build time (-ldflags "-X ...cli.version=...").
var version = "dev"

// Run executes the command in args (without the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// The jail re-executes this binary as PID 1 of every new sandbox.
	if jail.IsInit(args) {
		return jail.InitMain(args)
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("no command given")
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	case "version", "--version":
		fmt.Fprintf(stdout, "agent-sandbox %s (envd protocol %s)\n", version, envd.Version)
		return nil
	default:
		return fmt.Errorf("unknown command %q (see agent-sandbox help)", args[0])
	}
}
