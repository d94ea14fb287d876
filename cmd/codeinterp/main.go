// Command codeinterp is the code interpreter server that runs inside
// sandboxes of the code-interpreter-v1 template; see internal/codeinterp.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agent-sandbox/agent-sandbox/internal/codeinterp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := codeinterp.Run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "codeinterp:", err)
		os.Exit(1)
	}
}
