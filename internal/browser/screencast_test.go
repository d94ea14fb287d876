package browser

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// frameEvent is a Page.screencastFrame of an 800x600 viewport whose
// picture is the bytes "jpeg-<n>".
func frameEvent(n int64) string {
	data := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "jpeg-%d", n))
	return fmt.Sprintf(`{"method":"Page.screencastFrame","params":{"data":%q,"sessionId":%d,`+
		`"metadata":{"offsetTop":0,"pageScaleFactor":1,"deviceWidth":800,"deviceHeight":600,"scrollOffsetX":0,"scrollOffsetY":0}}}`, data, n)
}

// castingChromium is a fake whose screencast sends frame 1 when started
// and frame n+1 when frame n is acknowledged, up to frame last, as
// Chromium sends the next frame only after an acknowledgement.
func castingChromium(t *testing.T, last int64) *fakeChromium {
	f := newFakeChromium(t)
	f.answer("Page.startScreencast", func(json.RawMessage) (any, []string) {
		return map[string]any{}, []string{frameEvent(1)}
	})
	f.answer("Page.screencastFrameAck", func(p json.RawMessage) (any, []string) {
		var ack struct{ SessionID int64 }
		json.Unmarshal(p, &ack)
		if ack.SessionID >= last {
			return map[string]any{}, nil
		}
		return map[string]any{}, []string{frameEvent(ack.SessionID + 1)}
	})
	return f
}

// waitSent waits until f was sent n calls of method.
func waitSent(t *testing.T, f *fakeChromium, method string, n int) []json.RawMessage {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := f.sent(method)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s sent %d times, want %d", method, len(got), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func next(t *testing.T, w *Watcher) Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return f
}

// TestScreencastRelay: one screencast for every watcher, started by the
// first and stopped by the last; frames acknowledged at the frame rate;
// a watcher that falls behind gets the latest frame, and a new one the
// latest at once.
func TestScreencastRelay(t *testing.T) {
	f := castingChromium(t, 3)
	sess := session(t, f)
	ctx := context.Background()
	start := time.Now()
	w1, err := sess.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Frame{JPEG: []byte("jpeg-1"), Width: 800, Height: 600}, next(t, w1)); diff != "" {
		t.Errorf("first frame (-want +got):\n%s", diff)
	}
	var params struct {
		Format            string
		MaxFramesInFlight int64
		SendLastFrame     bool
	}
	json.Unmarshal(f.sent("Page.startScreencast")[0], &params)
	if params.Format != "jpeg" || params.MaxFramesInFlight != 1 || !params.SendLastFrame {
		t.Errorf("Page.startScreencast %s, want jpeg, one frame in flight, the last frame kept", f.sent("Page.startScreencast")[0])
	}

	// Frames 2 and 3 come and are acknowledged while w1 does not look.
	acks := waitSent(t, f, "Page.screencastFrameAck", 3)
	if elapsed, least := time.Since(start), 2*time.Second/frameRate; elapsed < least {
		t.Errorf("three frames acknowledged within %v, want them paced at %d a second", elapsed, frameRate)
	}
	for i, ack := range acks {
		if want := fmt.Sprintf(`{"sessionId":%d}`, i+1); string(ack) != want {
			t.Errorf("acknowledgement %d: %s, want %s", i, ack, want)
		}
	}
	if got := next(t, w1); string(got.JPEG) != "jpeg-3" {
		t.Errorf("a watcher behind got %q, want the latest frame, jpeg-3", got.JPEG)
	}

	w2, err := sess.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := next(t, w2); string(got.JPEG) != "jpeg-3" {
		t.Errorf("a new watcher got %q first, want the latest frame, jpeg-3", got.JPEG)
	}
	if n := len(f.sent("Page.startScreencast")); n != 1 {
		t.Errorf("Page.startScreencast sent %d times for two watchers, want once", n)
	}
	w1.Close()
	w1.Close() // a second Close does nothing
	if n := len(f.sent("Page.stopScreencast")); n != 0 {
		t.Errorf("Page.stopScreencast sent while a watcher remains")
	}
	w2.Close()
	waitSent(t, f, "Page.stopScreencast", 1)

	// The next viewer starts it again, and sees no frame of the old one.
	w3, err := sess.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Close()
	if got := next(t, w3); string(got.JPEG) != "jpeg-1" {
		t.Errorf("after a restart got %q, want the new screencast's first frame", got.JPEG)
	}
	if n := len(f.sent("Page.startScreencast")); n != 2 {
		t.Errorf("Page.startScreencast sent %d times, want twice", n)
	}
}

func TestScreencastStartFails(t *testing.T) {
	f := newFakeChromium(t)
	f.answer("Page.startScreencast", func(json.RawMessage) (any, []string) { return errors.New("Not supported"), nil })
	sess := session(t, f)
	if _, err := sess.Watch(context.Background()); err == nil || !strings.Contains(err.Error(), "starting the screencast") {
		t.Fatalf("Watch = %v, want the failed start", err)
	}
	// Nothing was left running: the next Watch tries again.
	if _, err := sess.Watch(context.Background()); err == nil {
		t.Fatal("the second Watch succeeded")
	}
	if n := len(f.sent("Page.startScreencast")); n != 2 {
		t.Errorf("Page.startScreencast sent %d times, want twice", n)
	}
}

func TestScreencastSessionEnds(t *testing.T) {
	f := castingChromium(t, 1)
	w, err := session(t, f).Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next(t, w)
	f.mu.Lock()
	f.conns[0].CloseNow()
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.Next(ctx); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("Next after Chromium went away = %v, want ErrSessionEnded", err)
	}
}

// TestDispatch: a pointer's fractions become CSS pixels of the frame the
// watcher was shown; keys that type nothing are raw key downs.
func TestDispatch(t *testing.T) {
	f := castingChromium(t, 1)
	w, err := session(t, f).Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx := context.Background()
	press := decodeInput(t, `{"type":"mousePressed","x":0.5,"y":0.25,"button":"left"}`)
	var input *InputError
	if err := w.Dispatch(ctx, press); !errors.As(err, &input) {
		t.Errorf("Dispatch before a frame was shown = %v, want an InputError", err)
	}
	next(t, w)
	for _, ev := range []string{
		`{"type":"mousePressed","x":0.5,"y":0.25,"button":"left"}`,
		`{"type":"mouseWheel","x":1,"y":1,"deltaY":120}`,
		`{"type":"keyDown","key":"a","code":"KeyA","keyCode":65,"text":"a"}`,
		`{"type":"keyDown","key":"Shift","code":"ShiftLeft","keyCode":16,"modifiers":8}`,
		`{"type":"keyUp","key":"a","code":"KeyA","keyCode":65}`,
	} {
		if err := w.Dispatch(ctx, decodeInput(t, ev)); err != nil {
			t.Fatalf("Dispatch(%s): %v", ev, err)
		}
	}
	var mouse []string
	for _, p := range f.sent("Input.dispatchMouseEvent") {
		mouse = append(mouse, string(p))
	}
	if diff := cmp.Diff([]string{
		`{"type":"mousePressed","x":400,"y":150,"button":"left","clickCount":1}`,
		`{"type":"mouseWheel","x":800,"y":600,"button":"none","deltaY":120}`,
	}, mouse); diff != "" {
		t.Errorf("mouse events (-want +got):\n%s", diff)
	}
	var keys []string
	for _, p := range f.sent("Input.dispatchKeyEvent") {
		keys = append(keys, string(p))
	}
	if diff := cmp.Diff([]string{
		`{"type":"keyDown","text":"a","unmodifiedText":"a","code":"KeyA","key":"a","windowsVirtualKeyCode":65}`,
		`{"type":"rawKeyDown","modifiers":8,"code":"ShiftLeft","key":"Shift","windowsVirtualKeyCode":16}`,
		`{"type":"keyUp","code":"KeyA","key":"a","windowsVirtualKeyCode":65}`,
	}, keys); diff != "" {
		t.Errorf("key events (-want +got):\n%s", diff)
	}
}

func decodeInput(t *testing.T, msg string) InputEvent {
	t.Helper()
	ev, err := DecodeInput([]byte(msg))
	if err != nil {
		t.Fatalf("DecodeInput(%s): %v", msg, err)
	}
	return ev
}

func TestDecodeInputRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, msg, field string
	}{
		{"not an object", `"click"`, "body"},
		{"unknown type", `{"type":"touchStart","x":0,"y":0}`, "type"},
		{"unknown field", `{"type":"mouseMoved","x":0,"y":0,"z":1}`, "body"},
		{"field of another type", `{"type":"mouseMoved","x":0,"y":0,"key":"a"}`, "key"},
		{"no point", `{"type":"mousePressed","button":"left"}`, "x"},
		{"off the frame", `{"type":"mouseMoved","x":0.5,"y":1.5}`, "y"},
		{"no button", `{"type":"mousePressed","x":0,"y":0}`, "button"},
		{"odd button", `{"type":"mouseReleased","x":0,"y":0,"button":"back"}`, "button"},
		{"clicks", `{"type":"mousePressed","x":0,"y":0,"button":"left","clickCount":9}`, "clickCount"},
		{"a wheel too far", `{"type":"mouseWheel","x":0,"y":0,"deltaY":1e9}`, "deltaY"},
		{"no key", `{"type":"keyDown","code":"KeyA"}`, "key"},
		{"text of two characters", `{"type":"keyDown","key":"a","text":"ab"}`, "text"},
		{"text on key up", `{"type":"keyUp","key":"a","text":"a"}`, "text"},
		{"modifiers", `{"type":"keyDown","key":"a","modifiers":16}`, "modifiers"},
		{"key code", `{"type":"keyUp","key":"a","keyCode":300}`, "keyCode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeInput([]byte(tc.msg))
			var input *InputError
			if !errors.As(err, &input) || input.Field != tc.field {
				t.Fatalf("DecodeInput(%s) = %v, want an InputError about %s", tc.msg, err, tc.field)
			}
		})
	}
}
