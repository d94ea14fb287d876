package browser

import (
	"context"
	"math"
	"unicode/utf8"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
)

// InputEvent is a mouse or key event of the live view's takeover page,
// decoded and checked by DecodeInput; its names are those of the DevTools
// protocol's Input domain.
type InputEvent struct {
	// Type is mouseMoved, mousePressed, mouseReleased, mouseWheel, keyDown
	// or keyUp.
	Type string `json:"type"`
	// X and Y are the pointer's place as fractions of the frame, from 0
	// (left, top) to 1 (right, bottom).
	X *float64 `json:"x"`
	Y *float64 `json:"y"`
	// Button is the button pressed or released (left, middle, right);
	// on mouseMoved, the one held down, if any.
	Button string `json:"button"`
	// ClickCount counts the presses of a double or triple click (1 when
	// absent).
	ClickCount int64 `json:"clickCount"`
	// DeltaX and DeltaY are a wheel's distances in CSS pixels.
	DeltaX float64 `json:"deltaX"`
	DeltaY float64 `json:"deltaY"`
	// Key, Code and KeyCode name the key as a DOM KeyboardEvent does ("a",
	// "KeyA", 65); Text is what it types, if anything ("a", "\r").
	Key     string `json:"key"`
	Code    string `json:"code"`
	KeyCode int64  `json:"keyCode"`
	Text    string `json:"text"`
	// Modifiers are the keys held: Alt 1, Ctrl 2, Meta 4, Shift 8.
	Modifiers int64 `json:"modifiers"`
}

// inputFields lists, per event type, the fields it takes besides "type".
var inputFields = map[string][]string{
	"mouseMoved":    {"x", "y", "button", "modifiers"},
	"mousePressed":  {"x", "y", "button", "clickCount", "modifiers"},
	"mouseReleased": {"x", "y", "button", "clickCount", "modifiers"},
	"mouseWheel":    {"x", "y", "deltaX", "deltaY", "modifiers"},
	"keyDown":       {"key", "code", "keyCode", "text", "modifiers"},
	"keyUp":         {"key", "code", "keyCode", "modifiers"},
}

// maxWheelDelta bounds a wheel event's distances, in CSS pixels.
const maxWheelDelta = 10000

// DecodeInput decodes and checks a message of the takeover page: a known
// event type, only the fields it takes, and values in range.
func DecodeInput(msg []byte) (InputEvent, error) {
	var ev InputEvent
	if _, err := decodeFields(msg, &ev, "type", inputFields); err != nil {
		return InputEvent{}, err
	}
	return ev, ev.check()
}

func (ev InputEvent) check() error {
	if ev.Modifiers < 0 || ev.Modifiers > 15 {
		return badField("modifiers", "%d is not a bit field of Alt 1, Ctrl 2, Meta 4 and Shift 8", ev.Modifiers)
	}
	switch ev.Type {
	case "keyDown", "keyUp":
		if ev.Key == "" || len(ev.Key) > 32 || len(ev.Code) > 32 {
			return badField("key", "want a key name of 1 to 32 bytes and a code of at most 32")
		}
		if ev.KeyCode < 0 || ev.KeyCode > 255 {
			return badField("keyCode", "%d is not a key code (0 to 255)", ev.KeyCode)
		}
		if !utf8.ValidString(ev.Text) || utf8.RuneCountInString(ev.Text) > 1 {
			return badField("text", "%q is not one character", ev.Text)
		}
		return nil
	}
	for _, c := range []struct {
		name string
		v    *float64
	}{{"x", ev.X}, {"y", ev.Y}} {
		if c.v == nil || !(*c.v >= 0 && *c.v <= 1) {
			return badField(c.name, "want the pointer as a fraction of the frame, 0 to 1")
		}
	}
	switch ev.Type {
	case "mousePressed", "mouseReleased":
		if ev.Button != "left" && ev.Button != "middle" && ev.Button != "right" {
			return badField("button", "%q is not one of left, middle, right", ev.Button)
		}
		if ev.ClickCount < 0 || ev.ClickCount > 3 {
			return badField("clickCount", "%d is not 1, 2 or 3", ev.ClickCount)
		}
	case "mouseMoved":
		if ev.Button != "" && ev.Button != "none" && ev.Button != "left" && ev.Button != "middle" && ev.Button != "right" {
			return badField("button", "%q is not one of none, left, middle, right", ev.Button)
		}
	case "mouseWheel":
		for _, d := range []float64{ev.DeltaX, ev.DeltaY} {
			if !(math.Abs(d) <= maxWheelDelta) {
				return badField("deltaY", "want distances of at most %d CSS pixels", maxWheelDelta)
			}
		}
	}
	return nil
}

// Dispatch sends ev, which DecodeInput checked, to the page: a point at
// the fractions of the frame Next last returned, in the viewport's CSS
// pixels.
func (w *Watcher) Dispatch(ctx context.Context, ev InputEvent) error {
	c := w.cast.conn
	switch ev.Type {
	case "keyDown", "keyUp":
		p := input.DispatchKeyEventParams{
			Type: input.DispatchKeyEventType(ev.Type), Key: ev.Key, Code: ev.Code, WindowsVirtualKeyCode: ev.KeyCode,
			Text: ev.Text, UnmodifiedText: ev.Text, Modifiers: ev.Modifiers,
		}
		if ev.Type == "keyDown" && ev.Text == "" { // a key that types nothing: Chromium's rawKeyDown
			p.Type = input.DispatchKeyEventTypeRawKeyDown
		}
		_, err := cdp.Call(ctx, c, input.DispatchKeyEvent, p)
		return err
	}
	w.cast.mu.Lock()
	f := w.seen
	w.cast.mu.Unlock()
	if f == nil {
		return badField("x", "no frame has been shown yet to point at")
	}
	p := input.DispatchMouseEventParams{
		Type: input.DispatchMouseEventType(ev.Type), X: *ev.X * f.Width, Y: *ev.Y * f.Height,
		Modifiers: ev.Modifiers, Button: input.MouseButton(ev.Button),
		DeltaX: ev.DeltaX, DeltaY: ev.DeltaY,
	}
	if p.Button == "" {
		p.Button = input.MouseButtonNone
	}
	if ev.Type == "mousePressed" || ev.Type == "mouseReleased" {
		p.ClickCount = max(ev.ClickCount, 1)
	}
	_, err := cdp.Call(ctx, c, input.DispatchMouseEvent, p)
	return err
}
