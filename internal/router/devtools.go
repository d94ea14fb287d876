package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// Chromium's DevTools HTTP server answers only requests whose Host is an
// IP address or localhost (its guard against DNS rebinding), and names
// its WebSocket endpoints after that Host. So the router sends requests to
// template.DevToolsPort with the Host Chromium listens on, and rewrites the
// endpoints in its /json answers to the host and scheme the client used:
// `playwright.chromium.connectOverCDP("https://9222-<id>.<domain>")` then
// dials the WebSocket back through the router unchanged.

// devToolsHost is the Host header Chromium accepts, and so the host part
// of the URLs it answers with.
var devToolsHost = "127.0.0.1:" + strconv.Itoa(template.DevToolsPort)

// devToolsListings are the DevTools HTTP routes whose JSON names WebSocket
// endpoints (/json is /json/list; /json/new opens a tab and describes it).
var devToolsListings = map[string]bool{
	"/json": true, "/json/list": true, "/json/version": true, "/json/new": true,
}

// devToolsTarget readies t, a request to the DevTools port, for Chromium:
// the Host it accepts, and the public WebSocket base (ws or wss by the
// client's scheme, the host the client sent) for rewriteDevTools.
func devToolsTarget(r *http.Request, t target) target {
	scheme := "ws"
	if r.TLS != nil {
		scheme = "wss"
	}
	t.host = devToolsHost
	t.publicWS = scheme + "://" + r.Host
	return t
}

// rewriteDevTools is the proxy's ModifyResponse: it rewrites the
// WebSocket endpoints in Chromium's /json listings to the public host.
// Other responses pass untouched.
func rewriteDevTools(resp *http.Response) error {
	t, _ := resp.Request.Context().Value(targetKey{}).(target)
	if t.publicWS == "" || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" ||
		!devToolsListings[path.Clean("/"+resp.Request.URL.Path)] {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the DevTools listing: %w", err)
	}
	body, err = publicDevToolsListing(body, t.publicWS)
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

// publicDevToolsListing rewrites body, Chromium's JSON (an object, or a
// list of them), so that its endpoints point at publicWS
// ("wss://9222-<id>.<domain>") instead of devToolsHost: the
// webSocketDebuggerUrl, and the ws= parameter of the frontend URLs.
func publicDevToolsListing(body []byte, publicWS string) ([]byte, error) {
	scheme, host, _ := strings.Cut(publicWS, "://")
	replacer := strings.NewReplacer(
		"ws://"+devToolsHost, publicWS,
		"ws="+devToolsHost, scheme+"="+host,
	)
	rewrite := func(obj map[string]json.RawMessage) error {
		for _, key := range []string{"webSocketDebuggerUrl", "devtoolsFrontendUrl", "devtoolsFrontendUrlCompat"} {
			raw, ok := obj[key]
			if !ok {
				continue
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return fmt.Errorf("reading %s of the DevTools listing: %w", key, err)
			}
			obj[key], _ = json.Marshal(replacer.Replace(s)) // a string always marshals
		}
		return nil
	}
	if trimmed := bytes.TrimSpace(body); len(trimmed) > 0 && trimmed[0] == '[' {
		var list []map[string]json.RawMessage
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("reading the DevTools listing: %w", err)
		}
		for _, obj := range list {
			if err := rewrite(obj); err != nil {
				return nil, err
			}
		}
		return json.Marshal(list)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("reading the DevTools listing: %w", err)
	}
	if err := rewrite(obj); err != nil {
		return nil, err
	}
	return json.Marshal(obj)
}
