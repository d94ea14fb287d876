package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// anthropicScreenshot is the body of the Anthropic computer-use route
// (docs/BROWSER.md) asking for a screenshot at a declared display size.
type anthropicScreenshot struct {
	Tool struct {
		Type   string `json:"type"`
		Name   string `json:"name"`
		Width  int    `json:"display_width_px"`
		Height int    `json:"display_height_px"`
	} `json:"tool"`
	ToolUse struct {
		Type  string            `json:"type"`
		ID    string            `json:"id"`
		Name  string            `json:"name"`
		Input map[string]string `json:"input"`
	} `json:"tool_use"`
}

// DesktopScreenshot takes a PNG screenshot of the X display of the sandbox
// id (a desktop sandbox whose display runs), scaled to width×height
// pixels. It asks the server's Anthropic computer-use executor for its
// screenshot action, whose tool_result carries the PNG.
func (c *Client) DesktopScreenshot(ctx context.Context, id string, width, height int) ([]byte, error) {
	var req anthropicScreenshot
	req.Tool.Type, req.Tool.Name, req.Tool.Width, req.Tool.Height = "computer_20250124", "computer", width, height
	req.ToolUse.Type, req.ToolUse.ID, req.ToolUse.Name = "tool_use", "screenshot", "computer"
	req.ToolUse.Input = map[string]string{"action": "screenshot"}
	var res struct {
		Content []struct {
			Type   string `json:"type"`
			Source *struct {
				MediaType string `json:"media_type"`
				Data      []byte `json:"data"`
			} `json:"source"`
		} `json:"content"`
	}
	_, err := c.do(ctx, apiRequest{
		method: http.MethodPost, path: "/sandboxes/" + url.PathEscape(id) + "/computer-use/anthropic", body: req,
		ok: []int{http.StatusOK},
	}, &res)
	if err != nil {
		return nil, fmt.Errorf("desktop screenshot of sandbox %s: %w", id, err)
	}
	for _, c := range res.Content {
		if c.Type == "image" && c.Source != nil && c.Source.MediaType == "image/png" {
			return c.Source.Data, nil
		}
	}
	return nil, fmt.Errorf("desktop screenshot of sandbox %s: the answer holds no PNG", id)
}
