package browser

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Action is one request of the browser action API, decoded by
// DecodeAction: the action's name and the fields it takes.
type Action struct {
	Action string `json:"action"`
	// URL is navigate's page.
	URL string `json:"url"`
	// Selector, Ref or X and Y name the element (or point) of click,
	// fill, select and scroll, and the element of extract and wait.
	Selector string   `json:"selector"`
	Ref      string   `json:"ref"`
	X        *float64 `json:"x"`
	Y        *float64 `json:"y"`
	// Value is fill's text and select's option (its value or label).
	Value *string `json:"value"`
	// Key is press's key ("Enter", "Tab", "a").
	Key string `json:"key"`
	// DeltaX and DeltaY are scroll's distances in CSS pixels.
	DeltaX float64 `json:"deltaX"`
	DeltaY float64 `json:"deltaY"`
	// For is what wait waits for: "selector", "navigation", "networkIdle".
	For string `json:"for"`
	// Format is what extract returns: "text", "html", "links",
	// "accessibility".
	Format string `json:"format"`
	// TimeoutMs bounds navigate and wait (default 10 s, at most 60 s).
	TimeoutMs *int64 `json:"timeoutMs"`
}

// fields lists, per action, the fields it takes besides "action"; any
// other field is refused, never ignored.
var fields = map[string][]string{
	"navigate":   {"url", "timeoutMs"},
	"click":      {"selector", "ref", "x", "y"},
	"fill":       {"selector", "ref", "value"},
	"select":     {"selector", "ref", "value"},
	"press":      {"key"},
	"scroll":     {"selector", "ref", "deltaX", "deltaY"},
	"wait":       {"for", "selector", "timeoutMs"},
	"extract":    {"format", "selector"},
	"screenshot": {},
	"pdf":        {},
}

const (
	defaultTimeout = 10 * time.Second
	maxTimeout     = 60 * time.Second
)

// InputError is a request the API refuses: Field names what is wrong.
type InputError struct {
	Field, Msg string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

func badField(field, format string, args ...any) error {
	return &InputError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// DecodeAction decodes and checks body: a known action, only the fields
// that action takes, and those it needs.
func DecodeAction(body []byte) (Action, error) {
	var a Action
	present, err := decodeFields(body, &a, "action", fields)
	if err != nil {
		return Action{}, err
	}
	return a, a.check(present)
}

// decodeFields decodes body, a JSON object, into v, refusing a field v
// lacks, a kind (the string of field kind) that kinds does not list, and
// a field that kind does not take; it answers the fields present.
func decodeFields(body []byte, v any, kind string, kinds map[string][]string) (map[string]json.RawMessage, error) {
	var present map[string]json.RawMessage
	if err := json.Unmarshal(body, &present); err != nil {
		return nil, badField("body", "not a JSON object: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return nil, badField("body", "%v", err)
	}
	var k string
	_ = json.Unmarshal(present[kind], &k) // a string: v's field decoded it
	allowed, ok := kinds[k]
	if !ok {
		return nil, badField(kind, "%q is not one of %s", k, strings.Join(slices.Sorted(maps.Keys(kinds)), ", "))
	}
	for _, name := range slices.Sorted(maps.Keys(present)) {
		if name != kind && !slices.Contains(allowed, name) {
			return nil, badField(name, "%s does not take it", k)
		}
	}
	return present, nil
}

// check checks what a's action needs.
func (a Action) check(present map[string]json.RawMessage) error {
	if a.TimeoutMs != nil && (*a.TimeoutMs <= 0 || time.Duration(*a.TimeoutMs)*time.Millisecond > maxTimeout) {
		return badField("timeoutMs", "%d is not between 1 and %d", *a.TimeoutMs, maxTimeout.Milliseconds())
	}
	switch a.Action {
	case "navigate":
		if !strings.HasPrefix(a.URL, "http://") && !strings.HasPrefix(a.URL, "https://") && a.URL != "about:blank" {
			return badField("url", "%q is not an http or https URL", a.URL)
		}
	case "click":
		return a.checkTarget()
	case "fill", "select":
		if a.Value == nil {
			return badField("value", "%s needs it", a.Action)
		}
		return a.checkTarget()
	case "press":
		if _, err := keyEvent(a.Key); err != nil {
			return err
		}
	case "scroll":
		if a.Selector == "" && a.Ref == "" && a.DeltaX == 0 && a.DeltaY == 0 {
			return badField("deltaY", "scroll needs deltaX or deltaY, or an element (selector or ref) to scroll into view")
		}
		if (a.Selector != "" || a.Ref != "") && (a.DeltaX != 0 || a.DeltaY != 0) {
			return badField("deltaY", "scroll takes distances or an element, not both")
		}
		if a.Selector != "" && a.Ref != "" {
			return badField("ref", "give selector or ref, not both")
		}
	case "wait":
		switch a.For {
		case "selector":
			if a.Selector == "" {
				return badField("selector", "wait for selector needs it")
			}
		case "navigation", "networkIdle":
			if a.Selector != "" {
				return badField("selector", "wait for %s does not take it", a.For)
			}
		default:
			return badField("for", "%q is not one of selector, navigation, networkIdle", a.For)
		}
	case "extract":
		switch a.Format {
		case "text", "html":
		case "links", "accessibility":
			if a.Selector != "" {
				return badField("selector", "extract of %s takes the whole page", a.Format)
			}
		default:
			return badField("format", "%q is not one of text, html, links, accessibility", a.Format)
		}
	}
	return nil
}

// checkTarget checks that a names exactly one element: a selector, a ref,
// or (click only) the coordinates x and y.
func (a Action) checkTarget() error {
	n := 0
	for _, set := range []bool{a.Selector != "", a.Ref != "", a.X != nil || a.Y != nil} {
		if set {
			n++
		}
	}
	if (a.X == nil) != (a.Y == nil) { // only click takes them (fields)
		return badField("y", "coordinates need both x and y")
	}
	if n != 1 {
		want := "selector or ref"
		if slices.Contains(fields[a.Action], "x") {
			want = "selector, ref, or x and y"
		}
		return badField("selector", "%s needs exactly one of %s", a.Action, want)
	}
	if a.Ref != "" {
		if _, err := parseRef(a.Ref); err != nil {
			return err
		}
	}
	return nil
}

// timeout is a's timeoutMs, or the default.
func (a Action) timeout() time.Duration {
	if a.TimeoutMs == nil {
		return defaultTimeout
	}
	return time.Duration(*a.TimeoutMs) * time.Millisecond
}
