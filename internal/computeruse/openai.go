package computeruse

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// OpenAIEnvironment is the computer-use tool environment the executor
// serves: a sandbox's display is a Linux desktop.
const OpenAIEnvironment = "linux"

// openAIWait is how long the "wait" action waits: it names no duration,
// and OpenAI's own examples wait about this long.
const openAIWait = 2 * time.Second

// openAIScrollStep is how many pixels of scroll_x or scroll_y one wheel
// notch stands for: X scrolls in notches, the action in pixels.
const openAIScrollStep = 100

// OpenAIRequest is the body of an OpenAI action: the tool as declared to
// the model and the computer_call output item, verbatim, plus the safety
// checks the user acknowledged (the call's pending_safety_checks must all
// be among them).
type OpenAIRequest struct {
	Tool                     OpenAITool     `json:"tool"`
	ComputerCall             OpenAICall     `json:"computer_call"`
	AcknowledgedSafetyChecks []OpenAISafety `json:"acknowledged_safety_checks,omitempty"`
}

// OpenAITool is the computer-use tool's definition.
type OpenAITool struct {
	Type          string `json:"type"`
	DisplayWidth  int    `json:"display_width"`
	DisplayHeight int    `json:"display_height"`
	Environment   string `json:"environment"`
}

// OpenAICall is a computer_call output item.
type OpenAICall struct {
	Type                string          `json:"type"`
	ID                  string          `json:"id"`
	CallID              string          `json:"call_id"`
	Action              json.RawMessage `json:"action"`
	PendingSafetyChecks []OpenAISafety  `json:"pending_safety_checks"`
	Status              string          `json:"status"`
}

// OpenAISafety is a safety check.
type OpenAISafety struct {
	ID      string `json:"id"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// openAIAction is a computer_call's action.
type openAIAction struct {
	Type    string        `json:"type"`
	X       *int          `json:"x"`
	Y       *int          `json:"y"`
	Button  *string       `json:"button"`
	Path    []openAIPoint `json:"path"`
	Keys    []string      `json:"keys"`
	ScrollX *int          `json:"scroll_x"`
	ScrollY *int          `json:"scroll_y"`
	Text    *string       `json:"text"`
}

type openAIPoint struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// openAIFields lists, per action, the fields it requires besides "type".
var openAIFields = map[string][]string{
	"click":        {"x", "y", "button"},
	"double_click": {"x", "y"},
	"drag":         {"path"},
	"keypress":     {"keys"},
	"move":         {"x", "y"},
	"screenshot":   {},
	"scroll":       {"x", "y", "scroll_x", "scroll_y"},
	"type":         {"text"},
	"wait":         {},
}

var openAIButtons = map[string]int{
	"left": buttonLeft, "right": buttonRight, "wheel": buttonMiddle, "back": buttonBack, "forward": buttonForward,
}

// OpenAIToolTypes are the tool types whose computer_call actions the
// executor takes.
var OpenAIToolTypes = []string{"computer_use_preview", "computer"}

func (t OpenAITool) declared() (size, error) {
	if !slices.Contains(OpenAIToolTypes, t.Type) {
		return size{}, inputErrorf("tool.type", "want one of %s, got %q", strings.Join(OpenAIToolTypes, ", "), t.Type)
	}
	if t.Environment != OpenAIEnvironment {
		return size{}, inputErrorf("tool.environment", "want %q (a sandbox's display), got %q", OpenAIEnvironment, t.Environment)
	}
	s := size{t.DisplayWidth, t.DisplayHeight}
	return s, validDeclared(s, "tool.display_width")
}

func parseOpenAI(req OpenAIRequest) (plan, size, error) {
	declared, err := req.Tool.declared()
	if err != nil {
		return plan{}, size{}, err
	}
	c := req.ComputerCall
	switch {
	case c.Type != "computer_call":
		return plan{}, size{}, inputErrorf("computer_call.type", `want "computer_call", got %q`, c.Type)
	case c.CallID == "":
		return plan{}, size{}, inputErrorf("computer_call.call_id", "missing")
	}
	for i, check := range c.PendingSafetyChecks {
		if !slices.ContainsFunc(req.AcknowledgedSafetyChecks, func(a OpenAISafety) bool { return a.ID == check.ID }) {
			return plan{}, size{}, inputErrorf("computer_call.pending_safety_checks["+strconv.Itoa(i)+"]",
				"check %q (%s) is not among acknowledged_safety_checks: the user must acknowledge it first", check.ID, check.Code)
		}
	}
	var a openAIAction
	if err := decodeStrict(c.Action, &a, "computer_call.action"); err != nil {
		return plan{}, size{}, err
	}
	p, err := a.plan(declared)
	return p, declared, err
}

func (a openAIAction) set() map[string]bool {
	return map[string]bool{
		"x": a.X != nil, "y": a.Y != nil, "button": a.Button != nil, "path": a.Path != nil,
		"keys": a.Keys != nil, "scroll_x": a.ScrollX != nil, "scroll_y": a.ScrollY != nil, "text": a.Text != nil,
	}
}

func (a openAIAction) plan(declared size) (plan, error) {
	fields, ok := openAIFields[a.Type]
	if !ok {
		return plan{}, inputErrorf("computer_call.action.type", "unknown action %q", a.Type)
	}
	for name, present := range a.set() {
		if present != slices.Contains(fields, name) {
			if present {
				return plan{}, inputErrorf("computer_call.action."+name, "not taken by action %q", a.Type)
			}
			return plan{}, inputErrorf("computer_call.action."+name, "required by action %q", a.Type)
		}
	}
	xy := func() (point, error) {
		p := point{*a.X, *a.Y}
		return p, inside(p, declared, "computer_call.action.x")
	}
	// Every OpenAI action is answered with a screenshot.
	p := plan{settle: true}
	switch a.Type {
	case "click", "double_click":
		at, err := xy()
		if err != nil {
			return plan{}, err
		}
		button, count := buttonLeft, 2
		if a.Type == "click" {
			count = 1
			if button, ok = openAIButtons[*a.Button]; !ok {
				return plan{}, inputErrorf("computer_call.action.button", "want left, right, wheel, back or forward, got %q", *a.Button)
			}
		}
		p.steps = []step{moveTo(at), click(button, count)}
	case "drag":
		if len(a.Path) < 2 {
			return plan{}, inputErrorf("computer_call.action.path", "want at least 2 points, got %d", len(a.Path))
		}
		for i, q := range a.Path {
			at := point(q)
			if err := inside(at, declared, "computer_call.action.path["+strconv.Itoa(i)+"]"); err != nil {
				return plan{}, err
			}
			p.steps = append(p.steps, moveTo(at))
			if i == 0 {
				p.steps = append(p.steps, mouseDown(buttonLeft))
			}
		}
		p.steps = append(p.steps, mouseUp(buttonLeft))
	case "keypress":
		keys := make([]string, len(a.Keys))
		for i, k := range a.Keys {
			// "CTRL"+"A" means the key a with ctrl, not A (shift+a).
			if len(k) == 1 {
				k = strings.ToLower(k)
			}
			keys[i] = k
		}
		combo, err := xdotoolCombo(keys, "computer_call.action.keys")
		if err != nil {
			return plan{}, err
		}
		p.steps = []step{xdotool("key", "--", combo)}
	case "move":
		at, err := xy()
		if err != nil {
			return plan{}, err
		}
		p.steps = []step{moveTo(at)}
	case "screenshot":
		p.settle = false
	case "scroll":
		at, err := xy()
		if err != nil {
			return plan{}, err
		}
		p.steps = []step{moveTo(at)}
		for _, axis := range []struct {
			by         int
			field      string
			less, more int
		}{{*a.ScrollX, "scroll_x", buttonWheelLeft, buttonWheelRight}, {*a.ScrollY, "scroll_y", buttonWheelUp, buttonWheelDown}} {
			if axis.by == 0 {
				continue
			}
			notches := max(1, int(math.Round(math.Abs(float64(axis.by))/openAIScrollStep)))
			if notches > maxRepeat {
				return plan{}, inputErrorf("computer_call.action."+axis.field, "at most %d pixels, got %d", maxRepeat*openAIScrollStep, axis.by)
			}
			button := axis.more
			if axis.by < 0 {
				button = axis.less
			}
			p.steps = append(p.steps, click(button, notches))
		}
	case "type":
		if *a.Text == "" {
			return plan{}, inputErrorf("computer_call.action.text", "nothing to type")
		}
		p.steps = []step{typeText(*a.Text)}
	case "wait":
		p.steps = []step{pause(openAIWait)}
	}
	return p, nil
}

// OpenAIOutput is a computer_call_output input item.
type OpenAIOutput struct {
	Type                     string         `json:"type"` // "computer_call_output"
	CallID                   string         `json:"call_id"`
	AcknowledgedSafetyChecks []OpenAISafety `json:"acknowledged_safety_checks,omitempty"`
	Output                   OpenAIImage    `json:"output"`
}

// OpenAIImage is a computer_screenshot.
type OpenAIImage struct {
	Type     string `json:"type"` // "computer_screenshot"
	ImageURL string `json:"image_url"`
}

func openAIOutput(req OpenAIRequest, out outcome) OpenAIOutput {
	return OpenAIOutput{
		Type: "computer_call_output", CallID: req.ComputerCall.CallID,
		AcknowledgedSafetyChecks: req.AcknowledgedSafetyChecks,
		Output:                   OpenAIImage{Type: "computer_screenshot", ImageURL: "data:image/png;base64," + base64.StdEncoding.EncodeToString(out.screenshot)},
	}
}
