package mcp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// session connects an in-memory MCP client to the tools on a client of a
// server that is never reached: every case here fails before any call.
func session(t *testing.T) *mcp.ClientSession {
	t.Helper()
	c, err := client.New(client.Config{APIURL: "http://127.0.0.1:1", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := NewServer(c, "test").Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestToolsDescribeEveryArgument(t *testing.T) {
	res, err := session(t).ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 20 {
			t.Errorf("%s: description %q", tool.Name, tool.Description)
		}
		var schema struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
			AdditionalProperties *bool `json:"additionalProperties"`
		}
		b, _ := json.Marshal(tool.InputSchema)
		if err := json.Unmarshal(b, &schema); err != nil {
			t.Fatalf("%s: input schema: %v", tool.Name, err)
		}
		for name, p := range schema.Properties {
			if p.Description == "" {
				t.Errorf("%s: argument %s has no description", tool.Name, name)
			}
		}
		if schema.AdditionalProperties == nil || *schema.AdditionalProperties {
			t.Errorf("%s: unknown arguments are not refused by the schema", tool.Name)
		}
	}
	want := []string{
		"browser_click", "browser_extract", "browser_fill", "browser_navigate", "browser_press", "browser_screenshot", "browser_scroll",
		"browser_select", "browser_wait", "create_sandbox", "desktop_screenshot", "get_sandbox_url", "kill_sandbox", "list_files",
		"read_file", "run_code", "run_command", "write_file",
	}
	if slices.Sort(names); !slices.Equal(names, want) {
		t.Errorf("tools %q, want %q", names, want)
	}
}

// TestBadArgumentsAreToolErrors: what the schema or the handler refuses
// comes back as a tool result with isError and a message naming the
// argument, not as a protocol error.
func TestBadArgumentsAreToolErrors(t *testing.T) {
	cs := session(t)
	tests := []struct {
		tool string
		args map[string]any
		want string
	}{
		{"create_sandbox", map[string]any{"timeout_seconds": -1}, "timeout_seconds"},
		{"create_sandbox", map[string]any{"templat": "base"}, "templat"},
		{"run_code", map[string]any{"sandbox_id": "x"}, "code"},
		{"run_code", map[string]any{"sandbox_id": "x", "code": "1", "language": "cobol"}, "language"},
		{"run_command", map[string]any{"sandbox_id": "x", "command": " "}, "command is empty"},
		{"run_command", map[string]any{"sandbox_id": "x", "command": "true", "timeout_seconds": -5}, "timeout_seconds"},
		{"write_file", map[string]any{"sandbox_id": "x", "path": "f", "content": "x", "encoding": "rot13"}, "encoding"},
		{"write_file", map[string]any{"sandbox_id": "x", "path": "f", "content": "!", "encoding": "base64"}, "base64"},
		{"read_file", map[string]any{"sandbox_id": "x", "path": ""}, "path is empty"},
		{"list_files", map[string]any{"sandbox_id": "x", "path": "/", "depth": -1}, "depth"},
		{"get_sandbox_url", map[string]any{"sandbox_id": "x", "port": 0}, "port"},
		{"kill_sandbox", map[string]any{"sandbox_id": ""}, "sandbox_id is empty"},
		{"browser_navigate", map[string]any{"sandbox_id": "x"}, "url"},
		{"browser_navigate", map[string]any{"sandbox_id": "x", "url": "http://a/", "timeout_seconds": 61}, "timeout_seconds"},
		{"browser_click", map[string]any{"sandbox_id": "x"}, "selector"},
		{"browser_click", map[string]any{"sandbox_id": "x", "selector": "a", "ref": "e1"}, "selector"},
		{"browser_click", map[string]any{"sandbox_id": "x", "x": 5}, "y"},
		{"browser_fill", map[string]any{"sandbox_id": "x", "ref": "e1"}, "value"},
		{"browser_select", map[string]any{"sandbox_id": "x", "value": "red"}, "selector"},
		{"browser_press", map[string]any{"sandbox_id": "x", "key": ""}, "key is empty"},
		{"browser_scroll", map[string]any{"sandbox_id": "x"}, "delta_y"},
		{"browser_scroll", map[string]any{"sandbox_id": "x", "delta_y": 100, "selector": "a"}, "delta_y"},
		{"browser_wait", map[string]any{"sandbox_id": "x", "for": "godot"}, "for"},
		{"browser_wait", map[string]any{"sandbox_id": "x", "for": "navigation", "timeout_seconds": -1}, "timeout_seconds"},
		{"browser_extract", map[string]any{"sandbox_id": "x", "format": "pdf"}, "format"},
		{"browser_screenshot", map[string]any{"sandbox_id": "x", "format": "jpeg"}, "format"},
		{"desktop_screenshot", map[string]any{"sandbox_id": "x", "width": 9000}, "width"},
		{"desktop_screenshot", map[string]any{"sandbox_id": "x", "height": -1}, "height"},
	}
	for _, tt := range tests {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tt.tool, Arguments: tt.args})
		if err != nil {
			t.Errorf("%s %v: protocol error %v, want a tool error", tt.tool, tt.args, err)
			continue
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if !res.IsError || !strings.Contains(text, tt.want) {
			t.Errorf("%s %v: isError %v, %q; want an error naming %q", tt.tool, tt.args, res.IsError, text, tt.want)
		}
	}
}

func TestHTTPUnknownMethodIsJSONRPCError(t *testing.T) {
	h, err := NewHTTPHandler(client.Config{APIURL: "http://127.0.0.1:1"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ body, want string }{
		{`{"jsonrpc":"2.0","id":7,"method":"no/such"}`, `"code":-32601`},
		{`{"jsonrpc":"2.0","id":8,"method":"ping"}`, `"result":{}`},
	} {
		r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(tt.body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		w := httptest.NewRecorder()
		h.ServeMCP(w, r, "k")
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") || !strings.Contains(w.Body.String(), tt.want) {
			t.Errorf("%s: %d %s %s; want 200 application/json with %s", tt.body, w.Code, w.Header().Get("Content-Type"), w.Body, tt.want)
		}
	}
}

func TestUnreachableServerIsExplained(t *testing.T) {
	res, err := session(t).CallTool(t.Context(), &mcp.CallToolParams{Name: "kill_sandbox", Arguments: map[string]any{"sandbox_id": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !res.IsError || !strings.Contains(text, "is the agent-sandbox server running at http://127.0.0.1:1?") {
		t.Errorf("isError %v, %q; want the server's address named", res.IsError, text)
	}
}

// TestPageResult: extract's accessibility tree reads as an outline with
// the refs, a screenshot is image content, and every result keeps its
// fields as structured content.
func TestPageResult(t *testing.T) {
	tree := &client.BrowserNode{Ref: "e1", Role: "RootWebArea", Name: "Form", Children: []*client.BrowserNode{
		{Ref: "e4", Role: "textbox", Value: "hi"}, {Ref: "e9", Role: "button", Name: "Send"},
	}}
	res := pageResult(client.BrowserAction{Action: "extract", Format: "accessibility"}, client.BrowserResult{Tree: tree})
	want := "- RootWebArea \"Form\" [ref=e1]\n  - textbox = \"hi\" [ref=e4]\n  - button \"Send\" [ref=e9]"
	if got := res.Content[0].(*mcp.TextContent).Text; got != want {
		t.Errorf("outline:\n%s\nwant:\n%s", got, want)
	}
	if got := string(res.StructuredContent.(json.RawMessage)); !strings.Contains(got, `"ref":"e9"`) {
		t.Errorf("structured content %s lacks the tree", got)
	}
	if got := string(pageResult(client.BrowserAction{Action: "click"}, client.BrowserResult{}).StructuredContent.(json.RawMessage)); got != "{}" {
		t.Errorf("click's structured content %s, want {}", got)
	}
	shot := pageResult(client.BrowserAction{Action: "screenshot"}, client.BrowserResult{MimeType: "image/png", Data: []byte("\x89PNG")})
	if img, ok := shot.Content[0].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || string(img.Data) != "\x89PNG" {
		t.Errorf("screenshot content %#v, want the PNG as image content", shot.Content[0])
	}
}
