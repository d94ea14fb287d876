package computeruse

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var screen = size{1024, 768}

// anthropic builds a request for input on a 1024x768 declared display.
func anthropic(input string) AnthropicRequest {
	return AnthropicRequest{
		Tool:    AnthropicTool{Type: AnthropicToolType, Name: "computer", DisplayWidthPx: screen.W, DisplayHeightPx: screen.H},
		ToolUse: AnthropicToolUse{Type: "tool_use", ID: "toolu_1", Name: "computer", Input: json.RawMessage(input)},
	}
}

func openAI(action string) OpenAIRequest {
	return OpenAIRequest{
		Tool:         OpenAITool{Type: "computer_use_preview", DisplayWidth: screen.W, DisplayHeight: screen.H, Environment: "linux"},
		ComputerCall: OpenAICall{Type: "computer_call", ID: "cu_1", CallID: "call_1", Action: json.RawMessage(action), Status: "completed"},
	}
}

// newExecutor is New without the settling pause.
func newExecutor(d *fakeDisplay) *Executor {
	e := New(d.run, ":0")
	e.settle = 0
	return e
}

// fakeDisplay records the commands run and answers as X would on a
// 2048x1536 display.
type fakeDisplay struct {
	ran []string
}

func (d *fakeDisplay) run(_ context.Context, args ...string) ([]byte, error) {
	switch {
	case args[0] == "xdotool" && args[1] == "getdisplaygeometry":
		return []byte("2048 1536\n"), nil
	case args[0] == "xdotool" && args[1] == "getmouselocation":
		return []byte("X=2047\nY=767\nSCREEN=0\nWINDOW=42\n"), nil
	case args[0] == "ffmpeg":
		d.ran = append(d.ran, "ffmpeg "+args[len(args)-6])
		return fakePNG(screen), nil
	}
	d.ran = append(d.ran, strings.Join(args, " "))
	return nil, nil
}

// fakePNG is the start of a PNG of size s: enough for pngSize.
func fakePNG(s size) []byte {
	b := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x00\x00\x00\x00\x00")
	binary.BigEndian.PutUint32(b[16:], uint32(s.W))
	binary.BigEndian.PutUint32(b[20:], uint32(s.H))
	return b
}

func TestAnthropicActions(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		want        []string // commands run on a 2048x1536 display
	}{
		{"screenshot", `{"action":"screenshot"}`, []string{"ffmpeg scale=1024:768:flags=lanczos"}},
		{"click scaled", `{"action":"left_click","coordinate":[100,50]}`, []string{
			"xdotool mousemove 200 100", "xdotool click --repeat 1 --delay 80 1", "ffmpeg scale=1024:768:flags=lanczos"}},
		{"last pixel stays last", `{"action":"mouse_move","coordinate":[1023,767]}`, []string{
			"xdotool mousemove 2047 1535", "ffmpeg scale=1024:768:flags=lanczos"}},
		{"triple click with shift held", `{"action":"triple_click","text":"shift"}`, []string{
			"xdotool keydown -- shift", "xdotool click --repeat 3 --delay 80 1", "xdotool keyup -- shift", "ffmpeg scale=1024:768:flags=lanczos"}},
		{"keys mapped", `{"action":"key","text":"ctrl+Enter cmd+a ctrl++"}`, []string{
			"xdotool key -- ctrl+Return super+a ctrl+plus", "ffmpeg scale=1024:768:flags=lanczos"}},
		{"type", `{"action":"type","text":"echo hi > /tmp/x\n"}`, []string{
			"xdotool type --delay 12 -- echo hi > /tmp/x\n", "ffmpeg scale=1024:768:flags=lanczos"}},
		{"drag", `{"action":"left_click_drag","start_coordinate":[0,0],"coordinate":[10,10]}`, []string{
			"xdotool mousemove 0 0", "xdotool mousedown 1", "xdotool mousemove 20 20", "xdotool mouseup 1", "ffmpeg scale=1024:768:flags=lanczos"}},
		{"scroll", `{"action":"scroll","coordinate":[10,10],"scroll_direction":"down","scroll_amount":3}`, []string{
			"xdotool mousemove 20 20", "xdotool click --repeat 3 --delay 80 5", "ffmpeg scale=1024:768:flags=lanczos"}},
		{"hold_key", `{"action":"hold_key","text":"a","duration":0}`, []string{
			"xdotool keydown -- a", "xdotool keyup -- a", "ffmpeg scale=1024:768:flags=lanczos"}},
		{"mouse down and up", `{"action":"left_mouse_down"}`, []string{"xdotool mousedown 1", "ffmpeg scale=1024:768:flags=lanczos"}},
		{"cursor", `{"action":"cursor_position"}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDisplay{}
			res, err := newExecutor(d).Anthropic(t.Context(), anthropic(tc.input))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, d.ran); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
			if res.Type != "tool_result" || res.ToolUseID != "toolu_1" || len(res.Content) != 1 {
				t.Fatalf("result %+v", res)
			}
		})
	}
}

func TestAnthropicCursorScaledBack(t *testing.T) {
	d := &fakeDisplay{}
	res, err := newExecutor(d).Anthropic(t.Context(), anthropic(`{"action":"cursor_position"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []AnthropicContent{{Type: "text", Text: "X=1023,Y=383"}}
	if diff := cmp.Diff(want, res.Content); diff != "" {
		t.Errorf("content (-want +got):\n%s", diff)
	}
}

func TestOpenAIActions(t *testing.T) {
	for _, tc := range []struct {
		name, action string
		want         []string
	}{
		{"click right", `{"type":"click","x":10,"y":20,"button":"right"}`, []string{"xdotool mousemove 20 40", "xdotool click --repeat 1 --delay 80 3"}},
		{"double click", `{"type":"double_click","x":1,"y":1}`, []string{"xdotool mousemove 2 2", "xdotool click --repeat 2 --delay 80 1"}},
		{"keypress", `{"type":"keypress","keys":["CTRL","A"]}`, []string{"xdotool key -- ctrl+a"}},
		{"keypress enter", `{"type":"keypress","keys":["ENTER"]}`, []string{"xdotool key -- Return"}},
		{"scroll up and right", `{"type":"scroll","x":0,"y":0,"scroll_x":250,"scroll_y":-100}`, []string{
			"xdotool mousemove 0 0", "xdotool click --repeat 3 --delay 80 7", "xdotool click --repeat 1 --delay 80 4"}},
		{"drag", `{"type":"drag","path":[{"x":0,"y":0},{"x":5,"y":5},{"x":9,"y":9}]}`, []string{
			"xdotool mousemove 0 0", "xdotool mousedown 1", "xdotool mousemove 10 10", "xdotool mousemove 18 18", "xdotool mouseup 1"}},
		{"type", `{"type":"type","text":"hi"}`, []string{"xdotool type --delay 12 -- hi"}},
		{"screenshot", `{"type":"screenshot"}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDisplay{}
			out, err := newExecutor(d).OpenAI(t.Context(), openAI(tc.action))
			if err != nil {
				t.Fatal(err)
			}
			want := append(tc.want, "ffmpeg scale=1024:768:flags=lanczos")
			if diff := cmp.Diff(want, d.ran); diff != "" {
				t.Errorf("commands (-want +got):\n%s", diff)
			}
			if out.Type != "computer_call_output" || out.CallID != "call_1" || out.Output.Type != "computer_screenshot" ||
				!strings.HasPrefix(out.Output.ImageURL, "data:image/png;base64,") {
				t.Errorf("output %+v", out)
			}
		})
	}
}

func TestBadInputNamesTheField(t *testing.T) {
	badTool := anthropic(`{"action":"screenshot"}`)
	badTool.Tool.DisplayWidthPx = 0
	wrongType := anthropic(`{"action":"screenshot"}`)
	wrongType.Tool.Type = "computer_20241022"
	unchecked := openAI(`{"type":"screenshot"}`)
	unchecked.ComputerCall.PendingSafetyChecks = []OpenAISafety{{ID: "cu_sc_1", Code: "malicious_instructions"}}
	for _, tc := range []struct {
		name  string
		req   any
		field string
	}{
		{"unknown action", anthropic(`{"action":"zoom"}`), "tool_use.input.action"},
		{"unknown field", anthropic(`{"action":"screenshot","region":[0,0,1,1]}`), "tool_use.input"},
		{"field the action does not take", anthropic(`{"action":"type","text":"x","coordinate":[1,1]}`), "tool_use.input.coordinate"},
		{"missing field", anthropic(`{"action":"mouse_move"}`), "tool_use.input.coordinate"},
		{"off the display", anthropic(`{"action":"left_click","coordinate":[1024,0]}`), "tool_use.input.coordinate"},
		{"three numbers", anthropic(`{"action":"left_click","coordinate":[1,2,3]}`), "tool_use.input.coordinate"},
		{"bad key", anthropic(`{"action":"key","text":"ctrl+\u00e9\u00e9"}`), "tool_use.input.text"},
		{"bad direction", anthropic(`{"action":"scroll","scroll_direction":"sideways","scroll_amount":1}`), "tool_use.input.scroll_direction"},
		{"long wait", anthropic(`{"action":"wait","duration":3600}`), "tool_use.input.duration"},
		{"no display size", badTool, "tool.display_width_px"},
		{"other tool version", wrongType, "tool.type"},
		{"openai unknown action", openAI(`{"type":"zoom"}`), "computer_call.action.type"},
		{"openai missing button", openAI(`{"type":"click","x":1,"y":1}`), "computer_call.action.button"},
		{"openai bad button", openAI(`{"type":"click","x":1,"y":1,"button":"thumb"}`), "computer_call.action.button"},
		{"openai short drag", openAI(`{"type":"drag","path":[{"x":1,"y":1}]}`), "computer_call.action.path"},
		{"openai drag off display", openAI(`{"type":"drag","path":[{"x":1,"y":1},{"x":1,"y":9999}]}`), "computer_call.action.path[1]"},
		{"openai bad key", openAI(`{"type":"keypress","keys":["CTRL","<>"]}`), "computer_call.action.keys"},
		{"openai unacknowledged safety check", unchecked, "computer_call.pending_safety_checks[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDisplay{}
			e := newExecutor(d)
			var err error
			switch req := tc.req.(type) {
			case AnthropicRequest:
				_, err = e.Anthropic(t.Context(), req)
			case OpenAIRequest:
				_, err = e.OpenAI(t.Context(), req)
			}
			var ie *InputError
			if !errors.As(err, &ie) || ie.Field != tc.field {
				t.Fatalf("error %v; want an InputError naming %s", err, tc.field)
			}
			if len(d.ran) != 0 {
				t.Errorf("ran %q for a bad request", d.ran)
			}
		})
	}
}

func TestScaleAxis(t *testing.T) {
	for _, tc := range []struct{ v, from, to, want int }{
		{0, 1024, 2048, 0}, {1023, 1024, 2048, 2047}, {512, 1024, 1024, 512},
		{1919, 1920, 1280, 1279}, {960, 1920, 1280, 640}, {5000, 100, 10, 9}, {-3, 100, 10, 0},
	} {
		if got := scaleAxis(tc.v, tc.from, tc.to); got != tc.want {
			t.Errorf("scaleAxis(%d, %d, %d) = %d; want %d", tc.v, tc.from, tc.to, got, tc.want)
		}
	}
}

func TestXdotoolKey(t *testing.T) {
	for in, want := range map[string]string{
		"Return": "Return", "enter": "Return", "ESC": "Escape", "BACKSPACE": "BackSpace", "ArrowLeft": "Left",
		"cmd": "super", "/": "slash", " ": "space", "a": "a", "F5": "F5", "KP_Enter": "KP_Enter", "XF86AudioMute": "XF86AudioMute",
	} {
		if got, ok := xdotoolKey(in); !ok || got != want {
			t.Errorf("xdotoolKey(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "a b", "ctrl-x", "--help", "é"} {
		if got, ok := xdotoolKey(in); ok {
			t.Errorf("xdotoolKey(%q) = %q; want refused", in, got)
		}
	}
}

func TestDecodeRefusesUnknownFields(t *testing.T) {
	_, err := DecodeAnthropic([]byte(`{"tool":{"type":"computer_20250124","name":"computer","display_width_px":8,"display_height_px":8,"zoom":true},"tool_use":{}}`))
	var ie *InputError
	if !errors.As(err, &ie) || ie.Field != "body" || !strings.Contains(ie.Msg, "zoom") {
		t.Errorf("DecodeAnthropic: %v; want an InputError naming zoom", err)
	}
	if _, err := DecodeOpenAI([]byte(`{"tool":{},"computer_call":{},"extra":1}`)); !errors.As(err, &ie) {
		t.Errorf("DecodeOpenAI: %v; want an InputError", err)
	}
}
