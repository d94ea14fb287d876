// Package cli is the agent-sandbox command line: it parses the subcommand and
// hands off to the package that does the work. The sandbox commands go
// through the public Go SDK (package client), as any other client would.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/envd"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
)

const usageHead = `Usage: agent-sandbox <command> [flags]

agent-sandbox runs disposable, isolated Linux sandboxes for AI agents and
speaks the E2B protocol, so the official E2B SDKs work against it.

Commands:
`

const usageTail = `  version          print the agent-sandbox version and the envd protocol version
  help             show this help

Run "agent-sandbox <command> --help" for a command's flags.

The sandbox commands find the server through the environment variables the
E2B SDKs read:
` + envHelp

// version is set at build time (-ldflags "-X ...cli.version=...").
var version = "dev"

// ExitError carries the exit code of a command that ran in a sandbox and
// failed; the program should exit with Code and print nothing more.
type ExitError struct {
	Code int // 1..255
}

// Error implements error.
func (e *ExitError) Error() string { return fmt.Sprintf("exit code %d", e.Code) }

// exitError returns nil for code 0 and an *ExitError otherwise. A negative
// code (killed by a signal) becomes 255.
func exitError(code int) error {
	switch {
	case code == 0:
		return nil
	case code < 0 || code > 255:
		return &ExitError{Code: 255}
	default:
		return &ExitError{Code: code}
	}
}

// streams are the standard streams a command uses; tests replace them.
type streams struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// Run executes the command in args (without the program name). An
// *ExitError means the command ran and its exit code should be the
// program's.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// The jail re-executes this binary as PID 1 of every new sandbox.
	if jail.IsInit(args) {
		return jail.InitMain(args)
	}
	return run(ctx, args, streams{stdin: os.Stdin, stdout: stdout, stderr: stderr})
}

func run(ctx context.Context, args []string, std streams) error {
	if len(args) == 0 {
		fmt.Fprint(std.stderr, usage())
		return fmt.Errorf("no command given")
	}
	switch args[0] {
	case "serve":
		return serveCommand.run(ctx, args[1:], std)
	case "bench":
		return benchCommand.run(ctx, args[1:], std)
	case "mcp":
		return mcpCommand.run(ctx, args[1:], std)
	case "sandbox", "keys", "template":
		return runGroup(ctx, args[0], args[1:], std)
	case "help", "-h", "--help":
		fmt.Fprint(std.stdout, usage())
		return nil
	case "version", "--version":
		fmt.Fprintf(std.stdout, "agent-sandbox %s (envd protocol %s)\n", version, envd.Version)
		return nil
	default:
		return fmt.Errorf("unknown command %q (see agent-sandbox help)", args[0])
	}
}

// allCommands lists every command in the order the help gives them.
func allCommands() []*command {
	return append([]*command{serveCommand, benchCommand, mcpCommand}, commands...)
}

// usage is the top-level help: every command, then the environment.
func usage() string {
	var b strings.Builder
	b.WriteString(usageHead)
	for _, c := range allCommands() {
		fmt.Fprintf(&b, "  %-16s %s\n", c.name, c.summary)
	}
	b.WriteString(usageTail)
	return b.String()
}
