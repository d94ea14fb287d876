package computeruse

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// AnthropicToolType is the version of Anthropic's computer-use tool whose
// actions the executor takes.
const AnthropicToolType = "computer_20250124"

// AnthropicRequest is the body of an Anthropic action: the tool as it was
// declared to the model, and the tool_use block the model answered with,
// both verbatim.
type AnthropicRequest struct {
	Tool    AnthropicTool    `json:"tool"`
	ToolUse AnthropicToolUse `json:"tool_use"`
}

// AnthropicTool is the computer tool's definition.
type AnthropicTool struct {
	Type            string `json:"type"`
	Name            string `json:"name"`
	DisplayWidthPx  int    `json:"display_width_px"`
	DisplayHeightPx int    `json:"display_height_px"`
	// DisplayNumber is the X display the model was told of; the sandbox
	// has one, so any number names it.
	DisplayNumber *int `json:"display_number,omitempty"`
	// CacheControl is the Messages API's prompt caching mark, which a
	// tool definition sent verbatim may carry; it asks nothing of the
	// executor.
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// AnthropicToolUse is a tool_use content block.
type AnthropicToolUse struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// anthropicInput is a tool_use block's input: the action and its fields.
type anthropicInput struct {
	Action          string   `json:"action"`
	Coordinate      []int    `json:"coordinate"`
	StartCoordinate []int    `json:"start_coordinate"`
	Text            *string  `json:"text"`
	ScrollDirection *string  `json:"scroll_direction"`
	ScrollAmount    *int     `json:"scroll_amount"`
	Duration        *float64 `json:"duration"`
}

// anthropicFields lists, per action, the input fields it takes besides
// "action"; a required one is marked with a trailing "!".
var anthropicFields = map[string][]string{
	"screenshot":      {},
	"cursor_position": {},
	"key":             {"text!"},
	"type":            {"text!"},
	"mouse_move":      {"coordinate!"},
	"left_click":      {"coordinate", "text"},
	"right_click":     {"coordinate", "text"},
	"middle_click":    {"coordinate", "text"},
	"double_click":    {"coordinate", "text"},
	"triple_click":    {"coordinate", "text"},
	"left_click_drag": {"start_coordinate!", "coordinate!"},
	"left_mouse_down": {},
	"left_mouse_up":   {},
	"scroll":          {"coordinate", "scroll_direction!", "scroll_amount!", "text"},
	"hold_key":        {"text!", "duration!"},
	"wait":            {"duration!"},
}

// anthropicClicks are the click actions: button and count.
var anthropicClicks = map[string][2]int{
	"left_click": {buttonLeft, 1}, "right_click": {buttonRight, 1}, "middle_click": {buttonMiddle, 1},
	"double_click": {buttonLeft, 2}, "triple_click": {buttonLeft, 3},
}

var wheelButtons = map[string]int{"up": buttonWheelUp, "down": buttonWheelDown, "left": buttonWheelLeft, "right": buttonWheelRight}

// declared checks the tool definition and returns its display size.
func (t AnthropicTool) declared() (size, error) {
	if t.Type != AnthropicToolType {
		return size{}, inputErrorf("tool.type", "want %q, got %q", AnthropicToolType, t.Type)
	}
	if t.Name == "" {
		return size{}, inputErrorf("tool.name", "missing")
	}
	s := size{t.DisplayWidthPx, t.DisplayHeightPx}
	return s, validDeclared(s, "tool.display_width_px")
}

// parseAnthropic turns a request into a plan on a display of the
// declared size.
func parseAnthropic(req AnthropicRequest) (plan, size, error) {
	declared, err := req.Tool.declared()
	if err != nil {
		return plan{}, size{}, err
	}
	u := req.ToolUse
	switch {
	case u.Type != "tool_use":
		return plan{}, size{}, inputErrorf("tool_use.type", `want "tool_use", got %q`, u.Type)
	case u.ID == "":
		return plan{}, size{}, inputErrorf("tool_use.id", "missing")
	case u.Name != req.Tool.Name:
		return plan{}, size{}, inputErrorf("tool_use.name", "%q is not the tool %q", u.Name, req.Tool.Name)
	}
	var in anthropicInput
	if err := decodeStrict(u.Input, &in, "tool_use.input"); err != nil {
		return plan{}, size{}, err
	}
	p, err := in.plan(declared)
	return p, declared, err
}

// set reports which input fields are present.
func (in anthropicInput) set() map[string]bool {
	return map[string]bool{
		"coordinate": in.Coordinate != nil, "start_coordinate": in.StartCoordinate != nil,
		"text": in.Text != nil, "scroll_direction": in.ScrollDirection != nil,
		"scroll_amount": in.ScrollAmount != nil, "duration": in.Duration != nil,
	}
}

func (in anthropicInput) plan(declared size) (plan, error) {
	fields, ok := anthropicFields[in.Action]
	if !ok {
		return plan{}, inputErrorf("tool_use.input.action", "unknown action %q", in.Action)
	}
	for name, present := range in.set() {
		required := slices.Contains(fields, name+"!")
		switch {
		case present && !required && !slices.Contains(fields, name):
			return plan{}, inputErrorf("tool_use.input."+name, "not taken by action %q", in.Action)
		case !present && required:
			return plan{}, inputErrorf("tool_use.input."+name, "required by action %q", in.Action)
		}
	}
	at := func(c []int, field string) (point, error) {
		if len(c) != 2 {
			return point{}, inputErrorf("tool_use.input."+field, "want [x, y], got %d numbers", len(c))
		}
		p := point{c[0], c[1]}
		return p, inside(p, declared, "tool_use.input."+field)
	}
	// clickAt is the move to the optional coordinate, then button clicked
	// count times with the modifier keys of text held.
	clickAt := func(button, count int) ([]step, error) {
		var steps []step
		if in.Coordinate != nil {
			to, err := at(in.Coordinate, "coordinate")
			if err != nil {
				return nil, err
			}
			steps = append(steps, moveTo(to))
		}
		var mods string
		if in.Text != nil && *in.Text != "" {
			var err error
			if mods, err = xdotoolCombo(splitCombo(*in.Text), "tool_use.input.text"); err != nil {
				return nil, err
			}
		}
		return append(steps, holding(mods, click(button, count))...), nil
	}
	seconds := func(limit time.Duration) (time.Duration, error) {
		d := *in.Duration
		if math.IsNaN(d) || d < 0 || d > limit.Seconds() {
			return 0, inputErrorf("tool_use.input.duration", "want 0 to %g seconds, got %g", limit.Seconds(), d)
		}
		return time.Duration(d * float64(time.Second)), nil
	}

	p := plan{settle: true}
	switch in.Action {
	case "screenshot":
		p.settle = false
	case "cursor_position":
		p.answer = answerCursor
	case "key":
		combos := strings.Fields(*in.Text)
		if len(combos) == 0 {
			return plan{}, inputErrorf("tool_use.input.text", "no key")
		}
		args := []string{"key", "--"}
		for _, c := range combos {
			x, err := xdotoolCombo(splitCombo(c), "tool_use.input.text")
			if err != nil {
				return plan{}, err
			}
			args = append(args, x)
		}
		p.steps = []step{xdotool(args...)}
	case "type":
		if *in.Text == "" {
			return plan{}, inputErrorf("tool_use.input.text", "nothing to type")
		}
		p.steps = []step{typeText(*in.Text)}
	case "mouse_move":
		to, err := at(in.Coordinate, "coordinate")
		if err != nil {
			return plan{}, err
		}
		p.steps = []step{moveTo(to)}
	case "left_click", "right_click", "middle_click", "double_click", "triple_click":
		b := anthropicClicks[in.Action]
		steps, err := clickAt(b[0], b[1])
		if err != nil {
			return plan{}, err
		}
		p.steps = steps
	case "left_click_drag":
		from, err := at(in.StartCoordinate, "start_coordinate")
		if err != nil {
			return plan{}, err
		}
		to, err := at(in.Coordinate, "coordinate")
		if err != nil {
			return plan{}, err
		}
		p.steps = []step{moveTo(from), mouseDown(buttonLeft), moveTo(to), mouseUp(buttonLeft)}
	case "left_mouse_down":
		p.steps = []step{mouseDown(buttonLeft)}
	case "left_mouse_up":
		p.steps = []step{mouseUp(buttonLeft)}
	case "scroll":
		button, ok := wheelButtons[*in.ScrollDirection]
		if !ok {
			return plan{}, inputErrorf("tool_use.input.scroll_direction", "want up, down, left or right, got %q", *in.ScrollDirection)
		}
		if n := *in.ScrollAmount; n < 1 || n > maxRepeat {
			return plan{}, inputErrorf("tool_use.input.scroll_amount", "want 1 to %d, got %d", maxRepeat, n)
		}
		steps, err := clickAt(button, *in.ScrollAmount)
		if err != nil {
			return plan{}, err
		}
		p.steps = steps
	case "hold_key":
		combo, err := xdotoolCombo(splitCombo(*in.Text), "tool_use.input.text")
		if err != nil {
			return plan{}, err
		}
		d, err := seconds(maxWait)
		if err != nil {
			return plan{}, err
		}
		p.steps = []step{keyDown(combo), pause(d), keyUp(combo)}
	case "wait":
		d, err := seconds(maxWait)
		if err != nil {
			return plan{}, err
		}
		p.steps = []step{pause(d)}
	}
	return p, nil
}

// AnthropicResult is a tool_result content block.
type AnthropicResult struct {
	Type      string             `json:"type"` // "tool_result"
	ToolUseID string             `json:"tool_use_id"`
	Content   []AnthropicContent `json:"content"`
}

// AnthropicContent is a text or image block of a tool_result.
type AnthropicContent struct {
	Type   string                `json:"type"`
	Text   string                `json:"text,omitempty"`
	Source *AnthropicImageSource `json:"source,omitempty"`
}

// AnthropicImageSource is a base64 image.
type AnthropicImageSource struct {
	Type      string `json:"type"` // "base64"
	MediaType string `json:"media_type"`
	Data      []byte `json:"data"` // base64 in JSON
}

func anthropicResult(toolUseID string, out outcome) AnthropicResult {
	r := AnthropicResult{Type: "tool_result", ToolUseID: toolUseID}
	if out.screenshot != nil {
		r.Content = append(r.Content, AnthropicContent{Type: "image", Source: &AnthropicImageSource{Type: "base64", MediaType: "image/png", Data: out.screenshot}})
	}
	if out.cursor != nil {
		r.Content = append(r.Content, AnthropicContent{Type: "text", Text: fmt.Sprintf("X=%d,Y=%d", out.cursor.X, out.cursor.Y)})
	}
	return r
}
