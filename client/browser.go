package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// BrowserAction is one action of the browser action API (POST
// /sandboxes/{id}/browser/actions, an agent-sandbox extension; see
// docs/BROWSER.md for what each action takes). Leave unset what the
// action does not take: the server refuses fields an action ignores.
type BrowserAction struct {
	// Action is navigate, click, fill, select, press, scroll, wait,
	// extract, screenshot or pdf.
	Action string `json:"action"`
	URL    string `json:"url,omitempty"`
	// Selector (CSS), Ref (from the accessibility tree) or X and Y name
	// what click, fill, select and scroll act on.
	Selector string   `json:"selector,omitempty"`
	Ref      string   `json:"ref,omitempty"`
	X        *float64 `json:"x,omitempty"`
	Y        *float64 `json:"y,omitempty"`
	Value    *string  `json:"value,omitempty"`
	Key      string   `json:"key,omitempty"`
	DeltaX   float64  `json:"deltaX,omitempty"`
	DeltaY   float64  `json:"deltaY,omitempty"`
	// For is wait's condition: selector, navigation or networkIdle.
	For string `json:"for,omitempty"`
	// Format is extract's: text, html, links or accessibility.
	Format    string `json:"format,omitempty"`
	TimeoutMs int64  `json:"timeoutMs,omitempty"`
}

// BrowserResult is a browser action's answer; only the action's fields
// are set.
type BrowserResult struct {
	URL   string        `json:"url,omitempty"`
	Title string        `json:"title,omitempty"`
	Text  string        `json:"text,omitempty"`
	HTML  string        `json:"html,omitempty"`
	Links []BrowserLink `json:"links,omitempty"`
	Tree  *BrowserNode  `json:"tree,omitempty"`
	// MimeType and Data are a screenshot's PNG or a pdf's PDF.
	MimeType string `json:"mimeType,omitempty"`
	Data     []byte `json:"data,omitempty"`
}

// BrowserLink is a link of the page.
type BrowserLink struct {
	Text string `json:"text"`
	Href string `json:"href"`
}

// BrowserNode is a node of the page's accessibility tree; its Ref names
// the element to click, fill or select.
type BrowserNode struct {
	Ref      string         `json:"ref,omitempty"`
	Role     string         `json:"role"`
	Name     string         `json:"name,omitempty"`
	Value    string         `json:"value,omitempty"`
	Children []*BrowserNode `json:"children,omitempty"`
}

// Browser performs a on the page of the sandbox's browser (a sandbox of
// the browser template).
func (c *Client) Browser(ctx context.Context, id string, a BrowserAction) (BrowserResult, error) {
	var out BrowserResult
	_, err := c.do(ctx, apiRequest{
		method: http.MethodPost, path: "/sandboxes/" + url.PathEscape(id) + "/browser/actions", body: a,
		ok: []int{http.StatusOK},
	}, &out)
	if err != nil {
		return BrowserResult{}, fmt.Errorf("browser %s in sandbox %s: %w", a.Action, id, err)
	}
	return out, nil
}
