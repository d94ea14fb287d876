package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// maxOutput bounds each of a command's stdout and stderr kept for the
// result: an LLM's context is small and a runaway command's output is not.
const maxOutput = 256 << 10

// maxFile bounds the files read_file returns, for the same reason.
const maxFile = 4 << 20

// touchTimeout is the timeout the tools connect to an existing sandbox
// with. Connect extends a sandbox's life to at least now plus its timeout
// (it never shortens it); a second leaves the timeout the sandbox was
// created with in force. Connect also resumes a paused sandbox, which the
// tool's work needs anyway.
const touchTimeout = time.Second

// tools implements the tool handlers on one SDK client.
type tools struct {
	c *client.Client
}

// sandboxRef is the argument of every tool that acts on a sandbox.
type sandboxRef struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the ID of the sandbox, as create_sandbox returned it"`
}

func (r sandboxRef) sandboxID() string { return r.SandboxID }

// sandbox returns a handle for the sandbox id.
func (t *tools) sandbox(ctx context.Context, id string) (*client.Sandbox, error) {
	if id == "" {
		return nil, errors.New("sandbox_id is empty")
	}
	sb, err := t.c.Connect(ctx, id, client.ConnectOptions{Timeout: touchTimeout})
	if errors.Is(err, client.ErrNotFound) {
		return nil, fmt.Errorf("sandbox %s does not exist (it was killed or timed out); create another with create_sandbox", id)
	}
	return sb, err
}

type createIn struct {
	Template       string            `json:"template,omitempty" jsonschema:"template name or ID to start from; default base (Debian with Python and Node). Use code-interpreter-v1 for run_code"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"seconds the sandbox lives before it is killed; default 300"`
	Metadata       map[string]string `json:"metadata,omitempty" jsonschema:"string pairs kept with the sandbox, for your own bookkeeping"`
	EnvVars        map[string]string `json:"env_vars,omitempty" jsonschema:"environment variables for every process in the sandbox"`
	AllowOut       []string          `json:"allow_out,omitempty" jsonschema:"egress allow list: domains (example.com, *.example.com), IPs or CIDRs the sandbox may reach beyond what the server's egress policy allows (if the operator lets sandboxes widen it)"`
	DenyOut        []string          `json:"deny_out,omitempty" jsonschema:"egress deny list: domains, IPs or CIDRs the sandbox may not reach; wins over allow_out"`
}

type createOut struct {
	SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox's ID, which every other tool takes"`
	TemplateID string `json:"template_id"`
}

func (t *tools) create(ctx context.Context, _ *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, createOut, error) {
	if in.TimeoutSeconds < 0 {
		return nil, createOut{}, fmt.Errorf("timeout_seconds is %d; give a positive number of seconds, or leave it out for 300", in.TimeoutSeconds)
	}
	sb, err := t.c.CreateSandbox(ctx, client.CreateOptions{
		Template: in.Template,
		Timeout:  time.Duration(in.TimeoutSeconds) * time.Second,
		Metadata: in.Metadata,
		EnvVars:  in.EnvVars,
		AllowOut: in.AllowOut,
		DenyOut:  in.DenyOut,
	})
	if err != nil {
		return nil, createOut{}, err
	}
	return nil, createOut{SandboxID: sb.ID, TemplateID: sb.TemplateID}, nil
}

// codeLanguages are the languages of the code interpreter's contexts.
var codeLanguages = []any{"python", "r", "javascript", "typescript", "java", "bash"}

type runCodeIn struct {
	sandboxRef
	Code           string            `json:"code" jsonschema:"the code to run, like a notebook cell: the value of its last expression is returned as a result"`
	Language       string            `json:"language,omitempty" jsonschema:"language of the code; default python. Leave it out when context_id is given"`
	ContextID      string            `json:"context_id,omitempty" jsonschema:"run in this code interpreter context (its variables and imports persist between runs); without it the language's default context is used, which persists too"`
	EnvVars        map[string]string `json:"env_vars,omitempty" jsonschema:"environment variables for this run only"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"interrupt the code after this many seconds; default no limit"`
}

func (t *tools) runCode(ctx context.Context, _ *mcp.CallToolRequest, in runCodeIn) (*mcp.CallToolResult, *client.Execution, error) {
	if in.TimeoutSeconds < 0 {
		return nil, nil, fmt.Errorf("timeout_seconds is %d; give a positive number of seconds", in.TimeoutSeconds)
	}
	sb, err := t.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	if in.TimeoutSeconds > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(in.TimeoutSeconds)*time.Second)
		defer cancel()
	}
	ex, err := sb.RunCode(ctx, in.Code, client.CodeOptions{Language: in.Language, ContextID: in.ContextID, EnvVars: in.EnvVars})
	var apiErr *client.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded) && in.TimeoutSeconds > 0:
		return nil, nil, fmt.Errorf("the code ran longer than timeout_seconds (%d s) and was interrupted", in.TimeoutSeconds)
	case errors.As(err, &apiErr) && apiErr.Status == 502:
		return nil, nil, fmt.Errorf("%w (sandbox %s runs no code interpreter: create it from the code-interpreter-v1 template)", err, sb.ID)
	case err != nil:
		return nil, nil, err
	}
	return executionResult(ex), ex, nil
}

// executionResult is the content of a run_code result: the output as text
// and every image the code displayed as image content. An error the code
// raised makes it an error result.
func executionResult(ex *client.Execution) *mcp.CallToolResult {
	var text strings.Builder
	if s := strings.Join(ex.Stdout, ""); s != "" {
		fmt.Fprintf(&text, "stdout:\n%s\n", s)
	}
	if s := strings.Join(ex.Stderr, ""); s != "" {
		fmt.Fprintf(&text, "stderr:\n%s\n", s)
	}
	var images []mcp.Content
	for _, r := range ex.Results {
		if r.Text != "" {
			fmt.Fprintf(&text, "result:\n%s\n", r.Text)
		}
		for _, img := range []struct{ mime, b64 string }{{"image/png", r.PNG}, {"image/jpeg", r.JPEG}} {
			if img.b64 == "" {
				continue
			}
			data, err := base64.StdEncoding.DecodeString(img.b64)
			if err != nil {
				fmt.Fprintf(&text, "(an %s result was left out: its base64 is invalid: %v)\n", img.mime, err)
				continue
			}
			images = append(images, &mcp.ImageContent{MIMEType: img.mime, Data: data})
		}
	}
	if ex.Error != nil {
		fmt.Fprintf(&text, "error: %s: %s\n%s\n", ex.Error.Name, ex.Error.Value, ex.Error.Traceback)
	}
	if text.Len() == 0 {
		text.WriteString("(no output)")
	}
	return &mcp.CallToolResult{
		Content: append([]mcp.Content{&mcp.TextContent{Text: strings.TrimRight(text.String(), "\n")}}, images...),
		IsError: ex.Error != nil,
	}
}

type runCommandIn struct {
	sandboxRef
	Command        string            `json:"command" jsonschema:"a bash command line, run with bash -l -c"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory; default the user's home"`
	User           string            `json:"user,omitempty" jsonschema:"user to run as; default the sandbox's default user (user)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables for the command"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds; default 60 in the foreground, no limit in the background"`
	Background     bool              `json:"background,omitempty" jsonschema:"start the command and return its PID at once, without its output (for servers and long jobs)"`
}

type runCommandOut struct {
	ExitCode *int   `json:"exit_code,omitempty" jsonschema:"the command's exit code; -1 if a signal killed it. Absent for a background command"`
	Stdout   string `json:"stdout,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
	PID      uint32 `json:"pid,omitempty" jsonschema:"the background command's process ID"`
}

// defaultCommandTimeout bounds a foreground command given no timeout: a
// tool call that never returns is worse for an agent than a killed one.
const defaultCommandTimeout = 60 * time.Second

func (t *tools) runCommand(ctx context.Context, _ *mcp.CallToolRequest, in runCommandIn) (*mcp.CallToolResult, runCommandOut, error) {
	if in.TimeoutSeconds < 0 {
		return nil, runCommandOut{}, fmt.Errorf("timeout_seconds is %d; give a positive number of seconds", in.TimeoutSeconds)
	}
	if strings.TrimSpace(in.Command) == "" {
		return nil, runCommandOut{}, errors.New("command is empty")
	}
	sb, err := t.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, runCommandOut{}, err
	}
	timeout := time.Duration(in.TimeoutSeconds) * time.Second
	opts := client.RunOptions{User: in.User, Cwd: in.Cwd, Envs: in.Env}
	if in.Background {
		// Start's deadline becomes the command's lifetime, enforced by
		// envd after Start has returned: only timeout_seconds may set it,
		// never the tool call's own context.
		startCtx := context.WithoutCancel(ctx)
		if timeout > 0 {
			var cancel context.CancelFunc
			startCtx, cancel = context.WithTimeout(startCtx, timeout)
			defer cancel()
		}
		pid, err := sb.Start(startCtx, in.Command, opts)
		if err != nil {
			return nil, runCommandOut{}, err
		}
		return nil, runCommandOut{PID: pid}, nil
	}
	if timeout == 0 {
		timeout = defaultCommandTimeout
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stdout, stderr := &capped{max: maxOutput}, &capped{max: maxOutput}
	opts.Stdout, opts.Stderr = stdout, stderr
	code, err := sb.Run(runCtx, in.Command, opts)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return nil, runCommandOut{}, fmt.Errorf("the command ran longer than %v and was killed (raise timeout_seconds, or run it with background: true); its output so far:\nstdout:\n%s\nstderr:\n%s",
			timeout, stdout, stderr)
	}
	if err != nil {
		return nil, runCommandOut{}, err
	}
	return nil, runCommandOut{ExitCode: &code, Stdout: stdout.String(), Stderr: stderr.String()}, nil
}

// capped keeps the first max bytes written to it and notes what it
// dropped.
type capped struct {
	buf     bytes.Buffer
	max     int
	dropped int
}

// Write implements io.Writer; it never fails, so the command's end is
// still observed.
func (c *capped) Write(p []byte) (int, error) {
	n := min(len(p), c.max-c.buf.Len())
	c.buf.Write(p[:n])
	c.dropped += len(p) - n
	return len(p), nil
}

func (c *capped) String() string {
	if c.dropped > 0 {
		return fmt.Sprintf("%s\n[… %d more bytes not shown]", strings.ToValidUTF8(c.buf.String(), "\uFFFD"), c.dropped)
	}
	return strings.ToValidUTF8(c.buf.String(), "\uFFFD")
}

// encodings are how file contents travel in read_file and write_file.
var encodings = []any{"utf-8", "base64"}

type readFileIn struct {
	sandboxRef
	Path string `json:"path" jsonschema:"path of the file; relative paths are under the user's home"`
	User string `json:"user,omitempty" jsonschema:"user to read as; default the sandbox's default user"`
}

type fileOut struct {
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding" jsonschema:"utf-8 for text, base64 for a file that is not valid UTF-8"`
	Size     int    `json:"size" jsonschema:"size of the file in bytes"`
}

func (t *tools) readFile(ctx context.Context, _ *mcp.CallToolRequest, in readFileIn) (*mcp.CallToolResult, fileOut, error) {
	if in.Path == "" {
		return nil, fileOut{}, errors.New("path is empty")
	}
	sb, err := t.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, fileOut{}, err
	}
	data, err := sb.ReadFile(ctx, in.Path, client.FileOptions{User: in.User})
	if err != nil {
		return nil, fileOut{}, err
	}
	if len(data) > maxFile {
		return nil, fileOut{}, fmt.Errorf("%s is %d bytes, more than the %d this tool returns; read part of it with run_command (head, tail, grep)", in.Path, len(data), maxFile)
	}
	out := fileOut{Path: in.Path, Content: string(data), Encoding: "utf-8", Size: len(data)}
	if !utf8.Valid(data) {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out.Content}}}, out, nil
}

type writeFileIn struct {
	sandboxRef
	Path     string `json:"path" jsonschema:"path of the file; missing parent directories are created, an existing file is replaced"`
	Content  string `json:"content" jsonschema:"the file's new contents"`
	Encoding string `json:"encoding,omitempty" jsonschema:"how content is encoded: utf-8 (the default) or base64 for binary data"`
	User     string `json:"user,omitempty" jsonschema:"user to write as, who owns the file; default the sandbox's default user"`
}

type writeFileOut struct {
	Path string `json:"path"`
	Size int    `json:"size" jsonschema:"bytes written"`
}

func (t *tools) writeFile(ctx context.Context, _ *mcp.CallToolRequest, in writeFileIn) (*mcp.CallToolResult, writeFileOut, error) {
	if in.Path == "" {
		return nil, writeFileOut{}, errors.New("path is empty")
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, writeFileOut{}, fmt.Errorf("content is not valid base64: %w", err)
		}
	default:
		return nil, writeFileOut{}, fmt.Errorf("encoding %q is neither utf-8 nor base64", in.Encoding)
	}
	sb, err := t.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, writeFileOut{}, err
	}
	if err := sb.WriteFile(ctx, in.Path, data, client.FileOptions{User: in.User}); err != nil {
		return nil, writeFileOut{}, err
	}
	return nil, writeFileOut{Path: in.Path, Size: len(data)}, nil
}

type listFilesIn struct {
	sandboxRef
	Path  string `json:"path" jsonschema:"directory to list; relative paths are under the user's home"`
	Depth int    `json:"depth,omitempty" jsonschema:"how many levels to descend; default 1 (the directory's own entries)"`
	User  string `json:"user,omitempty" jsonschema:"user to list as; default the sandbox's default user"`
}

type listFilesOut struct {
	Entries []client.Entry `json:"entries"`
}

func (t *tools) listFiles(ctx context.Context, _ *mcp.CallToolRequest, in listFilesIn) (*mcp.CallToolResult, listFilesOut, error) {
	if in.Path == "" {
		return nil, listFilesOut{}, errors.New("path is empty")
	}
	if in.Depth < 0 {
		return nil, listFilesOut{}, fmt.Errorf("depth is %d; give 1 or more", in.Depth)
	}
	sb, err := t.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, listFilesOut{}, err
	}
	entries, err := sb.ListDir(ctx, in.Path, in.Depth, client.FileOptions{User: in.User})
	if err != nil {
		return nil, listFilesOut{}, err
	}
	return nil, listFilesOut{Entries: entries}, nil
}

type urlIn struct {
	sandboxRef
	Port int `json:"port" jsonschema:"the port a server in the sandbox listens on (on 0.0.0.0 or 127.0.0.1)"`
}

type urlOut struct {
	URL  string `json:"url" jsonschema:"the port's public URL"`
	Host string `json:"host" jsonschema:"the port's host name, <port>-<sandbox id>.<domain>"`
	// The header-routing form, for clients that cannot resolve the host.
	SandboxURL    string            `json:"sandbox_url,omitempty" jsonschema:"where the server also takes the port's traffic when sent with the headers below"`
	Headers       map[string]string `json:"headers,omitempty" jsonschema:"headers that route a request sent to sandbox_url to the port"`
	TrafficHeader map[string]string `json:"traffic_token_header,omitempty" jsonschema:"a header every request must carry because the sandbox does not allow public traffic"`
}

func (t *tools) url(ctx context.Context, _ *mcp.CallToolRequest, in urlIn) (*mcp.CallToolResult, urlOut, error) {
	if in.Port < 1 || in.Port > 65535 {
		return nil, urlOut{}, fmt.Errorf("port %d is not between 1 and 65535", in.Port)
	}
	sb, err := t.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, urlOut{}, err
	}
	scheme := "https"
	if u, err := url.Parse(t.c.APIURL()); err == nil && u.Scheme == "http" {
		scheme = "http"
	}
	host := sb.Host(in.Port)
	out := urlOut{URL: scheme + "://" + host, Host: host}
	if base := t.c.SandboxURL(); base != "" {
		out.SandboxURL = base
		out.Headers = map[string]string{"E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": strconv.Itoa(in.Port)}
	}
	if sb.TrafficAccessToken != "" {
		out.TrafficHeader = map[string]string{"e2b-traffic-access-token": sb.TrafficAccessToken}
	}
	return nil, out, nil
}

type killOut struct {
	Killed string `json:"killed" jsonschema:"the ID of the sandbox killed"`
}

func (t *tools) kill(ctx context.Context, _ *mcp.CallToolRequest, in sandboxRef) (*mcp.CallToolResult, killOut, error) {
	if in.SandboxID == "" {
		return nil, killOut{}, errors.New("sandbox_id is empty")
	}
	err := t.c.KillSandbox(ctx, in.SandboxID)
	if errors.Is(err, client.ErrNotFound) {
		return nil, killOut{}, fmt.Errorf("sandbox %s does not exist (already killed or timed out)", in.SandboxID)
	}
	if err != nil {
		return nil, killOut{}, err
	}
	return nil, killOut{Killed: in.SandboxID}, nil
}
