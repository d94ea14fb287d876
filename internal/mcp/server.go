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
	mcp.AddTool(s, &mcp.Tool{
		Name: "create_sandbox",
		Description: "Create a new sandbox: a fresh Linux machine with its own file system and network, started from a template. " +
			"Returns its sandbox_id. It is killed when its timeout passes.",
	}, explain(c, t.create))
	mcp.AddTool(s, &mcp.Tool{
		Name: "run_code",
		Description: "Run code in a sandbox's code interpreter, like a Jupyter cell, and return its stdout, stderr, results (the last expression's value, " +
			"charts as images) and error. State persists between runs in the same context. The sandbox must come from the code-interpreter-v1 template.",
		InputSchema: schema[runCodeIn](func(s *jsonschema.Schema) { s.Properties["language"].Enum = codeLanguages }),
	}, explain(c, t.runCode))
	mcp.AddTool(s, &mcp.Tool{
		Name: "run_command",
		Description: "Run a shell command in a sandbox and return its exit code, stdout and stderr (up to 256 KiB each), " +
			"or start it in the background and return its PID.",
	}, explain(c, t.runCommand))
	mcp.AddTool(s, &mcp.Tool{
		Name:        "read_file",
		Description: "Read a file from a sandbox (up to 4 MiB). Text comes back as is, other data as base64.",
	}, explain(c, t.readFile))
	mcp.AddTool(s, &mcp.Tool{
		Name:        "write_file",
		Description: "Write a file in a sandbox, creating missing directories and replacing an existing file.",
		InputSchema: schema[writeFileIn](func(s *jsonschema.Schema) { s.Properties["encoding"].Enum = encodings }),
	}, explain(c, t.writeFile))
	mcp.AddTool(s, &mcp.Tool{
		Name:        "list_files",
		Description: "List a directory in a sandbox: name, path, type (file, dir, symlink), size, permissions, owner and modification time of each entry.",
	}, explain(c, t.listFiles))
	mcp.AddTool(s, &mcp.Tool{
		Name: "get_sandbox_url",
		Description: "Get the public URL of a port of a sandbox, where a server the sandbox runs on that port (started with run_command in the background) " +
			"can be reached from outside, e.g. by a browser.",
		InputSchema: schema[urlIn](func(s *jsonschema.Schema) {
			s.Properties["port"].Minimum, s.Properties["port"].Maximum = ptr(1.0), ptr(65535.0)
		}),
	}, explain(c, t.url))
	mcp.AddTool(s, &mcp.Tool{
		Name:        "kill_sandbox",
		Description: "Kill a sandbox and everything in it. Its files are gone for good.",
	}, explain(c, t.kill))
	return s
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

// schema is the input schema inferred from In, then adjusted with what
// struct tags cannot say (enums, bounds).
func schema[In any](adjust func(*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		panic("mcp: inferring a tool's input schema: " + err.Error()) // a programming error
	}
	adjust(s)
	return s
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
