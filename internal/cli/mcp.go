package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/agent-sandbox/agent-sandbox/internal/mcp"
)

var mcpCommand = &command{
	name:    "mcp",
	summary: "serve the sandbox tools to an agent host over MCP (stdio)",
	detail: `Serve agent-sandbox's tools over the Model Context Protocol on stdin and
stdout, for an agent host (Claude Desktop, an IDE, an agent framework) that
starts it as an MCP server. The tools act on the server the environment
(or the flags) name, with its API key:

  create_sandbox   create a sandbox: template, timeout, metadata, env vars,
                   egress allow and deny lists
  run_code         run code in a code-interpreter-v1 sandbox (python, r,
                   javascript, typescript, java, bash; a context keeps state);
                   charts come back as images
  run_command      run a shell command with a timeout, or in the background
  read_file, write_file, list_files
                   move files in and out, list directories
  get_sandbox_url  the public URL of a port of a sandbox
  kill_sandbox     kill a sandbox
  browser_navigate, browser_click, browser_fill, browser_select,
  browser_press, browser_scroll, browser_wait, browser_extract
                   drive the Chromium of a browser sandbox; extract reads
                   the text, HTML, links or the accessibility tree, whose
                   refs name the elements to act on
  browser_screenshot, desktop_screenshot
                   a PNG of a browser sandbox's page or of a desktop
                   sandbox's display, as image content

A failing tool answers a tool error (isError) with the reason; the
protocol itself never fails for it. Nothing but MCP messages is written to
stdout; errors go to stderr. It exits when the host closes stdin.

The server serves the same tools itself at /mcp (streamable HTTP), with the
API key as "Authorization: Bearer KEY" or X-API-Key, for hosts that speak
MCP over HTTP.`,
	env: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		server := addServerFlags(fs)
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q", args[0])
			}
			c, err := server.client()
			if err != nil {
				return err
			}
			err = mcp.ServeStdio(ctx, c, version, io.NopCloser(std.stdin), nopWriteCloser{std.stdout})
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil // interrupted: a normal way to stop
			}
			return err
		}
	},
}

// nopWriteCloser leaves closing stdout to the process's end.
type nopWriteCloser struct{ io.Writer }

// Close implements io.Closer.
func (nopWriteCloser) Close() error { return nil }
