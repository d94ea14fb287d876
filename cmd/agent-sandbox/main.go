// Command agent-sandbox is the server and CLI; see internal/cli.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		// A command run in a sandbox failed: exit with its code, quietly.
		var exit *cli.ExitError
		if errors.As(err, &exit) {
			stop()
			os.Exit(exit.Code)
		}
		fmt.Fprintln(os.Stderr, "agent-sandbox:", err)
		os.Exit(1)
	}
}
