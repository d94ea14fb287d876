// Package client is a Go SDK for servers that speak the E2B protocol: the
// control-plane REST API that creates, lists and kills sandboxes, and envd,
// the daemon inside every sandbox that runs processes and serves files.
// It works against agent-sandbox and against any other E2B-compatible
// server; there is no official E2B SDK for Go.
//
// A [Client] talks to the control plane. [Client.CreateSandbox] and
// [Client.Connect] return a [Sandbox], which carries the envd access token
// and talks to envd: [Sandbox.Run] runs a command to completion,
// [Sandbox.PTY] starts an interactive shell, and [Sandbox.ReadFile] and
// [Sandbox.WriteFile] move files.
//
// The server location comes from the same environment variables the
// official SDKs read (see [FromEnv]): E2B_API_KEY, E2B_DOMAIN, E2B_API_URL
// and E2B_SANDBOX_URL.
//
// Example:
//
//	c, err := client.New(client.FromEnv())
//	if err != nil {
//		return err
//	}
//	sb, err := c.CreateSandbox(ctx, client.CreateOptions{Template: "base"})
//	if err != nil {
//		return err
//	}
//	defer sb.Kill(context.WithoutCancel(ctx))
//	code, err := sb.Run(ctx, "uname -a", client.RunOptions{Stdout: os.Stdout, Stderr: os.Stderr})
//	if err != nil {
//		return err
//	}
//	fmt.Println("exit code", code)
//
// Control-plane failures are [*APIError] values; a missing sandbox or file
// also matches [ErrNotFound] with errors.Is.
package client
