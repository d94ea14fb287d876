package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// NewServer returns an MCP server whose tools act through c. version is
// reported to clients as the server's version.
func NewServer(c *client.Client, version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "agent-sandbox", Title: "agent-sandbox", Version: version}, &mcp.ServerOptions{
		Instructions: "Disposable, isolated Linux sandboxes. Create one with create_sandbox (template code-interpreter-v1 for run_code), " +
			"act in it with the other tools by its sandbox_id, and kill it with kill_sandbox when done; it is killed anyway when its timeout passes.",
	})
	t := &tools{c: c}
	add(s, c, "create_sandbox", "Create a new sandbox: a fresh Linux machine with its own file system and network, started from a template. "+
		"Returns its sandbox_id. It is killed when its timeout passes.", t.create)
	add(s, c, "run_code", "Run code in a sandbox's code interpreter, like a Jupyter cell, and return its stdout, stderr, results (the last expression's value, "+
		"charts as images) and error. State persists between runs in the same context. The sandbox must come from the code-interpreter-v1 template.",
		t.runCode, enum("language", codeLanguages))
	add(s, c, "run_command", "Run a shell command in a sandbox and return its exit code, stdout and stderr (up to 256 KiB each), "+
		"or start it in the background and return its PID.", t.runCommand)
	add(s, c, "read_file", "Read a file from a sandbox (up to 4 MiB). Text comes back as is, other data as base64.", t.readFile)
	add(s, c, "write_file", "Write a file in a sandbox, creating missing directories and replacing an existing file.",
		t.writeFile, enum("encoding", encodings))
	add(s, c, "list_files", "List a directory in a sandbox: name, path, type (file, dir, symlink), size, permissions, owner and modification time of each entry.",
		t.listFiles)
	add(s, c, "get_sandbox_url", "Get the public URL of a port of a sandbox, where a server the sandbox runs on that port (started with run_command in the background) "+
		"can be reached from outside, e.g. by a browser.", t.url, func(s *jsonschema.Schema) {
		s.Properties["port"].Minimum, s.Properties["port"].Maximum = ptr(1.0), ptr(65535.0)
	})
	add(s, c, "kill_sandbox", "Kill a sandbox and everything in it. Its files are gone for good.", t.kill)

	const inBrowser = " in the Chromium of a sandbox made from the browser template (create_sandbox with template browser). "
	add(s, c, "browser_navigate", "Open a URL"+inBrowser+"Waits for the page to load and returns its URL and title.", browse(t, navigateAction))
	add(s, c, "browser_click", "Click an element (by CSS selector or by ref from browser_extract's accessibility tree) or a point"+inBrowser, browse(t, clickAction))
	add(s, c, "browser_fill", "Type text into an input field or text area (by selector or ref), replacing what it held,"+inBrowser, browse(t, valueAction("fill")))
	add(s, c, "browser_select", "Choose an option of a select element (by selector or ref)"+inBrowser, browse(t, valueAction("select")),
		func(s *jsonschema.Schema) { s.Properties["value"].Description = selectValue })
	add(s, c, "browser_press", "Press a key (Enter submits a form, Tab moves the focus) on the focused element of the page"+inBrowser, browse(t, pressAction))
	add(s, c, "browser_scroll", "Scroll the page by a distance, or until an element (by selector or ref) is in view,"+inBrowser, browse(t, scrollAction))
	add(s, c, "browser_wait", "Wait for an element to appear, a navigation to end or the network to go idle"+inBrowser, browse(t, waitAction),
		enum("for", waitConditions))
	add(s, c, "browser_extract", "Read the page"+inBrowser+"Returns its text, HTML, links, or its accessibility tree, "+
		"whose refs name elements for browser_click, browser_fill and browser_select: the way to find what to act on.", browse(t, extractAction),
		enum("format", extractFormats))
	add(s, c, "browser_screenshot", "Take a screenshot of the page"+inBrowser+"Returns a PNG image of the viewport.", browse(t, screenshotAction))
	add(s, c, "desktop_screenshot", "Take a screenshot of the X display of a sandbox made from the desktop template, scaled to the size asked for. "+
		"Returns a PNG image. The display must be running: @e2b/desktop's Sandbox.create starts it, or start Xvfb :0 with run_command in the background.",
		t.desktopScreenshot)
	return s
}

// add registers the tool name on s: h, its errors explained, taking In,
// whose schema is inferred and then adjusted with what struct tags cannot
// say (enums, bounds).
func add[In, Out any](s *mcp.Server, c *client.Client, name, description string, h mcp.ToolHandlerFor[In, Out], adjust ...func(*jsonschema.Schema)) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		panic("mcp: inferring the input schema of " + name + ": " + err.Error()) // a programming error
	}
	for _, a := range adjust {
		a(in)
	}
	mcp.AddTool(s, &mcp.Tool{Name: name, Description: description, InputSchema: in}, explain(c, h))
}

// enum restricts the argument name to values.
func enum(name string, values []any) func(*jsonschema.Schema) {
	return func(s *jsonschema.Schema) { s.Properties[name].Enum = values }
}

// explain adds what to do to the errors of h that are about reaching the
// server rather than about the call: an agent can say so to its user.
func explain[In, Out any](c *client.Client, h mcp.ToolHandlerFor[In, Out]) mcp.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		res, out, err := h(ctx, req, in)
		var apiErr *client.APIError
		var netErr *net.OpError
		switch {
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusUnauthorized:
			err = fmt.Errorf("%w (the server refused the API key: check E2B_API_KEY)", err)
		case errors.As(err, &netErr):
			err = fmt.Errorf("%w (is the agent-sandbox server running at %s? check E2B_API_URL)", err, c.APIURL())
		}
		return res, out, err
	}
}

func ptr[T any](v T) *T { return &v }

// ServeStdio serves the tools over the stdio transport (newline-delimited
// JSON-RPC on in and out) until the client closes in or ctx is done.
func ServeStdio(ctx context.Context, c *client.Client, version string, in io.ReadCloser, out io.WriteCloser) error {
	return NewServer(c, version).Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
}

// HTTPHandler serves the tools over the streamable HTTP transport, for
// requests whose API key has been checked already. It is stateless: each
// POST is answered on its own, with application/json, so no session
// outlives a request; GET and DELETE get 405.
type HTTPHandler struct {
	streamable *mcp.StreamableHTTPHandler
}

// NewHTTPHandler returns a handler that serves each request with the tools
// acting through a client of cfg with the request's API key.
func NewHTTPHandler(cfg client.Config, version string) (*HTTPHandler, error) {
	if _, err := client.New(cfg); err != nil {
		return nil, fmt.Errorf("mcp: the tools' client: %w", err)
	}
	getServer := func(r *http.Request) *mcp.Server {
		cfg := cfg
		cfg.APIKey, _ = r.Context().Value(apiKeyContext{}).(string)
		c, _ := client.New(cfg) // cfg's URLs were checked above
		return NewServer(c, version)
	}
	return &HTTPHandler{streamable: mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true,
		// The protection is for servers that trust whoever reaches them on
		// localhost. Every request here carries an API key in a header,
		// which a page rebound to this address cannot send, and host
		// routing legitimately puts other names on loopback.
		DisableLocalhostProtection: true,
	})}, nil
}

// apiKeyContext keys the verified API key in a request's context.
type apiKeyContext struct{}

// maxMessage bounds a JSON-RPC message posted to /mcp; write_file's
// content travels in one.
const maxMessage = 32 << 20

// specMethods are the requests the MCP specification lets a client send.
// The SDK answers each (with a JSON-RPC error where this server lacks the
// capability), but fails the HTTP request with a plain 400 for any other
// method, where the spec wants a JSON-RPC answer; ServeMCP gives those
// -32601 itself.
var specMethods = map[string]bool{
	"initialize": true, "ping": true, "tools/list": true, "tools/call": true,
	"resources/list": true, "resources/read": true, "resources/templates/list": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
	"prompts/list": true, "prompts/get": true, "logging/setLevel": true, "completion/complete": true,
}

// ServeMCP serves r, whose API key apiKey has been verified.
func (h *HTTPHandler) ServeMCP(w http.ResponseWriter, r *http.Request, apiKey string) {
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMessage))
		if err != nil {
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		var call struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(body, &call) == nil && call.ID != nil && call.Method != "" && !specMethods[call.Method] {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"jsonrpc": "2.0", "id": call.ID,
				"error": map[string]any{"code": -32601, "message": fmt.Sprintf("method not found: %q", call.Method)},
			})
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	h.streamable.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), apiKeyContext{}, apiKey)))
}
