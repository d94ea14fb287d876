package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
)

// Names of the browser figures (the browser action API of docs/BROWSER.md
// on sandboxes of the browser template).
const (
	browserPrefix        = "browser: "
	figBrowserRoundTrip  = browserPrefix + "commands.run('true') round trip"
	figBrowserClick      = browserPrefix + "action round trip (click at a point)"
	figBrowserConnect    = browserPrefix + "CDP connect (a sandbox's first action)"
	figBrowserScreenshot = browserPrefix + "screenshot (PNG of the viewport)"
)

// browserTemplate is the built-in template with Chromium.
const browserTemplate = "browser"

// browserBuildWait bounds the build of the browser template on a data dir
// without it: the server builds a built-in template on its first create.
const browserBuildWait = 20 * time.Minute

// measureBrowser measures the browser action API on the jail server: the
// first action of each of a few fresh sandboxes (attaching to their
// Chromium over DevTools, then the click), then on one sandbox clicks and
// screenshots, each against the command round trip to the same sandbox
// (the control plane's path into the sandbox without DevTools) and the
// click (an action without a PNG to encode).
func measureBrowser(ctx context.Context, opts *Options, c *client.Client) ([]*Figure, error) {
	fresh := opts.scale(10, 2)
	opts.progress("browser: the first action of %d fresh browser sandboxes", fresh)
	connect := &Latency{}
	for range fresh {
		sb, err := createBrowser(ctx, opts, c)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		_, err = clickCorner(ctx, c, sb.ID)
		connect.add(time.Since(t0))
		if kerr := sb.Kill(ctx); err == nil {
			err = kerr
		}
		if err != nil {
			return nil, err
		}
	}

	rounds := opts.scale(100, 5)
	opts.progress("browser: %d command round trips, clicks and screenshots on one sandbox", rounds)
	sb, err := createBrowser(ctx, opts, c)
	if err != nil {
		return nil, err
	}
	defer sb.Kill(context.WithoutCancel(ctx))
	rt, err := runTrue(ctx, sb, rounds)
	if err != nil {
		return nil, fmt.Errorf("commands.run('true'): %w", err)
	}
	click, err := repeat(rounds, func() error { _, err := clickCorner(ctx, c, sb.ID); return err })
	if err != nil {
		return nil, err
	}
	shot, err := repeat(rounds, func() error {
		res, err := c.Browser(ctx, sb.ID, client.BrowserAction{Action: "screenshot"})
		if err == nil && res.MimeType != "image/png" {
			err = fmt.Errorf("screenshot answered %s, want image/png", res.MimeType)
		}
		return err
	})
	if err != nil {
		return nil, err
	}

	fc := latencyFigure(figBrowserConnect, connect)
	fc.Baseline = figBrowserClick
	fc.Note = "the server dials DevTools in the sandbox, lists its targets, attaches to the page and enables the Page and Network domains, then clicks"
	fa := latencyFigure(figBrowserClick, click)
	fa.Baseline = figBrowserRoundTrip
	fa.Note = "POST /sandboxes/{id}/browser/actions on the attached session: three mouse events over CDP"
	fs := latencyFigure(figBrowserScreenshot, shot)
	fs.Baseline = figBrowserClick
	fs.Note = "Page.captureScreenshot of about:blank at Chromium's default viewport, base64 in the JSON answer"
	return []*Figure{latencyFigure(figBrowserRoundTrip, rt), fa, fc, fs}, nil
}

// clickCorner clicks near the top left of sandbox id's page.
func clickCorner(ctx context.Context, c *client.Client, id string) (client.BrowserResult, error) {
	x, y := 5.0, 5.0
	return c.Browser(ctx, id, client.BrowserAction{Action: "click", X: &x, Y: &y})
}

// repeat times n calls of f.
func repeat(n int, f func() error) (*Latency, error) {
	l := &Latency{}
	for range n {
		t0 := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		l.add(time.Since(t0))
	}
	return l, nil
}

// createBrowser creates a browser sandbox, waiting out the template's
// build on demand (503 while it builds).
func createBrowser(ctx context.Context, opts *Options, c *client.Client) (*client.Sandbox, error) {
	deadline := time.Now().Add(browserBuildWait)
	for {
		sb, err := c.CreateSandbox(ctx, client.CreateOptions{Template: browserTemplate, Timeout: sandboxTimeout})
		var apiErr *client.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			if err != nil {
				return nil, fmt.Errorf("creating a %s sandbox: %w", browserTemplate, err)
			}
			return sb, nil
		}
		opts.progress("browser: %s", apiErr.Message)
		select {
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
