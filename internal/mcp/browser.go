package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// The browser tools: one per action of the browser action API
// (docs/BROWSER.md) on the Chromium of a browser sandbox, so that each
// tool's schema says exactly what its action takes, and the screenshots
// of a browser's page and of a desktop's display as image content.
//
// The arguments are named as the API's fields are, but for the timeouts
// (timeout_seconds, as the other tools have) and scroll's distances
// (delta_x, delta_y). Those are checked here, so that an error names the
// argument the caller gave, and so is the element an action names; the
// rest the API checks, naming the field, which is the argument's name.

// maxBrowserTimeout is the longest navigate and wait may wait, the API's
// bound.
const maxBrowserTimeout = 60

// element names the element an action acts on.
type element struct {
	Selector string `json:"selector,omitempty" jsonschema:"a CSS selector of the element, e.g. input[name=q] or #submit. Give selector or ref, not both"`
	Ref      string `json:"ref,omitempty" jsonschema:"the element's ref (e.g. e12) from browser_extract with format accessibility; refs hold until the page changes, so extract again after it does"`
}

// check checks that e names the element one way; coordinates count as
// a way when click gives them.
func (e element) check(orCoordinates bool) error {
	n := 0
	for _, set := range []bool{e.Selector != "", e.Ref != "", orCoordinates} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errors.New("selector: give exactly one of selector or ref (or, for browser_click, x and y)")
	}
	return nil
}

type navigateIn struct {
	sandboxRef
	URL            string `json:"url" jsonschema:"the http or https URL to open; a server the sandbox runs itself is at http://127.0.0.1:<port>"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"how long to wait for the page to load; default 10, at most 60"`
}

func navigateAction(in navigateIn) (client.BrowserAction, error) {
	ms, err := browserTimeout(in.TimeoutSeconds)
	return client.BrowserAction{Action: "navigate", URL: in.URL, TimeoutMs: ms}, err
}

// browserTimeout is timeout_seconds in the API's milliseconds; 0 leaves
// the API's default.
func browserTimeout(seconds int) (int64, error) {
	if seconds < 0 || seconds > maxBrowserTimeout {
		return 0, fmt.Errorf("timeout_seconds: %d is not between 1 and %d", seconds, maxBrowserTimeout)
	}
	return int64(seconds) * 1000, nil
}

type clickIn struct {
	sandboxRef
	element
	X *float64 `json:"x,omitempty" jsonschema:"with y: click this point of the page's viewport, in CSS pixels, instead of an element"`
	Y *float64 `json:"y,omitempty" jsonschema:"with x: the point's distance from the top of the viewport, in CSS pixels"`
}

func clickAction(in clickIn) (client.BrowserAction, error) {
	if (in.X == nil) != (in.Y == nil) {
		return client.BrowserAction{}, errors.New("y: a point needs both x and y")
	}
	return client.BrowserAction{Action: "click", Selector: in.Selector, Ref: in.Ref, X: in.X, Y: in.Y}, in.check(in.X != nil)
}

// valueIn is the arguments of browser_fill and browser_select: an
// element and the value to give it.
type valueIn struct {
	sandboxRef
	element
	Value string `json:"value" jsonschema:"the text to put in the field, replacing what it holds; empty clears it"`
}

// selectValue is what value means to browser_select.
const selectValue = "the option to choose in the select element: its value or its label"

// valueAction returns the maker of fill's or select's action.
func valueAction(action string) func(valueIn) (client.BrowserAction, error) {
	return func(in valueIn) (client.BrowserAction, error) {
		return client.BrowserAction{Action: action, Selector: in.Selector, Ref: in.Ref, Value: &in.Value}, in.check(false)
	}
}

type pressIn struct {
	sandboxRef
	Key string `json:"key" jsonschema:"the key to press on the focused element: one character (a, 7) or a key name (Enter, Tab, Escape, Backspace, ArrowDown)"`
}

func pressAction(in pressIn) (client.BrowserAction, error) {
	if in.Key == "" {
		return client.BrowserAction{}, errors.New("key is empty")
	}
	return client.BrowserAction{Action: "press", Key: in.Key}, nil
}

type scrollIn struct {
	sandboxRef
	element
	DeltaX float64 `json:"delta_x,omitempty" jsonschema:"CSS pixels to scroll right (negative: left)"`
	DeltaY float64 `json:"delta_y,omitempty" jsonschema:"CSS pixels to scroll down (negative: up)"`
}

func scrollAction(in scrollIn) (client.BrowserAction, error) {
	a := client.BrowserAction{Action: "scroll", Selector: in.Selector, Ref: in.Ref, DeltaX: in.DeltaX, DeltaY: in.DeltaY}
	distances := in.DeltaX != 0 || in.DeltaY != 0
	switch {
	case !distances && in.Selector == "" && in.Ref == "":
		return a, errors.New("delta_y: give delta_x or delta_y, or an element (selector or ref) to scroll into view")
	case distances && (in.Selector != "" || in.Ref != ""):
		return a, errors.New("delta_y: give distances or an element, not both")
	case !distances:
		return a, in.check(false)
	}
	return a, nil
}

// waitConditions are what browser_wait waits for.
var waitConditions = []any{"selector", "navigation", "networkIdle"}

type waitIn struct {
	sandboxRef
	For            string `json:"for" jsonschema:"what to wait for: selector (an element matching selector appears), navigation (the page loads a new document) or networkIdle (no request in flight for half a second)"`
	Selector       string `json:"selector,omitempty" jsonschema:"the CSS selector for for=selector"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"how long to wait before failing; default 10, at most 60"`
}

func waitAction(in waitIn) (client.BrowserAction, error) {
	ms, err := browserTimeout(in.TimeoutSeconds)
	return client.BrowserAction{Action: "wait", For: in.For, Selector: in.Selector, TimeoutMs: ms}, err
}

// extractFormats are what browser_extract returns.
var extractFormats = []any{"text", "html", "links", "accessibility"}

type extractIn struct {
	sandboxRef
	Format   string `json:"format,omitempty" jsonschema:"what to read: text (the visible text; the default), html, links (text and href of each), or accessibility (the page's accessibility tree: role, name and value of each element, and the ref that browser_click, browser_fill and browser_select take)"`
	Selector string `json:"selector,omitempty" jsonschema:"read only the first element matching this CSS selector (text and html only); default the whole page"`
}

func extractAction(in extractIn) (client.BrowserAction, error) {
	if in.Format == "" {
		in.Format = "text"
	}
	return client.BrowserAction{Action: "extract", Format: in.Format, Selector: in.Selector}, nil
}

func screenshotAction(sandboxRef) (client.BrowserAction, error) {
	return client.BrowserAction{Action: "screenshot"}, nil
}

// browse returns the handler of a browser tool: the action that action
// makes of the arguments (or the error naming the argument it refuses),
// performed on the sandbox's page, and the result as content.
func browse[In interface{ sandboxID() string }](t *tools, action func(In) (client.BrowserAction, error)) mcp.ToolHandlerFor[In, any] {
	return func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		a, err := action(in)
		if err != nil {
			return nil, nil, err
		}
		sb, err := t.sandbox(ctx, in.sandboxID())
		if err != nil {
			return nil, nil, err
		}
		res, err := t.c.Browser(ctx, sb.ID, a)
		if err != nil {
			return nil, nil, err
		}
		return pageResult(a, res), nil, nil
	}
}

// pageResult is the content of a browser action's result: a screenshot as
// image content, what extract read as text an LLM reads easily (the
// accessibility tree as an indented outline), and the result's fields as
// structured content.
func pageResult(a client.BrowserAction, res client.BrowserResult) *mcp.CallToolResult {
	if a.Action == "screenshot" {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{MIMEType: res.MimeType, Data: res.Data}}}
	}
	var text strings.Builder
	switch {
	case a.Action == "navigate":
		fmt.Fprintf(&text, "opened %s (title %q)", res.URL, res.Title)
	case a.Format == "text":
		text.WriteString(res.Text)
	case a.Format == "html":
		text.WriteString(res.HTML)
	case a.Format == "links":
		for _, l := range res.Links {
			fmt.Fprintf(&text, "%s <%s>\n", l.Text, l.Href)
		}
		if len(res.Links) == 0 {
			text.WriteString("(no links)")
		}
	case a.Format == "accessibility":
		outline(&text, res.Tree, 0)
	default:
		fmt.Fprintf(&text, "%s done", a.Action)
	}
	// Every field of res but Data has a JSON form worth keeping; an empty
	// result is an empty object.
	structured, _ := json.Marshal(res)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.TrimRight(text.String(), "\n")}}, StructuredContent: json.RawMessage(structured)}
}

// outline writes the accessibility tree under n, one node a line indented
// by its depth: - role "name" = "value" [ref=e12].
func outline(w *strings.Builder, n *client.BrowserNode, depth int) {
	if n == nil {
		return
	}
	fmt.Fprintf(w, "%s- %s", strings.Repeat("  ", depth), n.Role)
	if n.Name != "" {
		fmt.Fprintf(w, " %q", n.Name)
	}
	if n.Value != "" {
		fmt.Fprintf(w, " = %q", n.Value)
	}
	if n.Ref != "" {
		fmt.Fprintf(w, " [ref=%s]", n.Ref)
	}
	w.WriteString("\n")
	for _, c := range n.Children {
		outline(w, c, depth+1)
	}
}

type desktopScreenshotIn struct {
	sandboxRef
	Width  int `json:"width,omitempty" jsonschema:"width of the screenshot in pixels, to which the display is scaled; default 1024"`
	Height int `json:"height,omitempty" jsonschema:"height of the screenshot in pixels; default 768"`
}

// maxScreenshotSide bounds a desktop screenshot's sides, as the
// computer-use executor bounds a declared display.
const maxScreenshotSide = 8192

// screenshotSide is the argument name's value v, or dflt when it is left
// out.
func screenshotSide(name string, v, dflt int) (int, error) {
	switch {
	case v == 0:
		return dflt, nil
	case v < 0 || v > maxScreenshotSide:
		return 0, fmt.Errorf("%s: %d is not between 1 and %d", name, v, maxScreenshotSide)
	}
	return v, nil
}

func (t *tools) desktopScreenshot(ctx context.Context, _ *mcp.CallToolRequest, in desktopScreenshotIn) (*mcp.CallToolResult, any, error) {
	width, err := screenshotSide("width", in.Width, 1024)
	if err != nil {
		return nil, nil, err
	}
	height, err := screenshotSide("height", in.Height, 768)
	if err != nil {
		return nil, nil, err
	}
	sb, err := t.sandbox(ctx, in.SandboxID)
	if err != nil {
		return nil, nil, err
	}
	png, err := t.c.DesktopScreenshot(ctx, sb.ID, width, height)
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{MIMEType: "image/png", Data: png}}}, nil, nil
}
