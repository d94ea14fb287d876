package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// LiveView is a pair of share links to a desktop sandbox's display or a
// browser sandbox's page (docs/BROWSER.md): URL shows it, TakeoverURL
// lets its holder operate it.
// Both stop working at ExpiresAt; a session open then runs on until it is
// closed.
type LiveView struct {
	URL         string    `json:"url"`
	TakeoverURL string    `json:"takeoverUrl"`
	ExpiresAt   time.Time `json:"expiresAt"`
}

// CreateLiveView starts the live view of the sandbox's display or
// browser, if it is not running yet, and returns links good for ttl, rounded up to whole
// seconds; 0 takes the server's default (an hour). POST
// /sandboxes/{id}/live-view, an agent-sandbox extension.
func (c *Client) CreateLiveView(ctx context.Context, id string, ttl time.Duration) (*LiveView, error) {
	if ttl < 0 {
		return nil, fmt.Errorf("creating a live view of sandbox %s: ttl %v is negative", id, ttl)
	}
	var body struct {
		TTL int64 `json:"ttl,omitempty"`
	}
	body.TTL = seconds(ttl)
	var out LiveView
	_, err := c.do(ctx, apiRequest{
		method: http.MethodPost, path: "/sandboxes/" + url.PathEscape(id) + "/live-view", body: body,
		ok: []int{http.StatusCreated},
	}, &out)
	if err != nil {
		return nil, fmt.Errorf("creating a live view of sandbox %s: %w", id, err)
	}
	return &out, nil
}
