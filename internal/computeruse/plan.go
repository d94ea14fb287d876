package computeruse

import (
	"strconv"
	"time"
)

// X mouse buttons as xdotool numbers them.
const (
	buttonLeft        = 1
	buttonMiddle      = 2
	buttonRight       = 3
	buttonWheelUp     = 4
	buttonWheelDown   = 5
	buttonWheelLeft   = 6
	buttonWheelRight  = 7
	buttonBack        = 8
	buttonForward     = 9
	typeDelayMillis   = 12 // between typed characters, as xdotool's default
	maxRepeat         = 50 // clicks or wheel notches in one action
	maxWait           = 60 * time.Second
	clickRepeatMillis = 80 // between the clicks of a double or triple click
)

// answer is what an action is answered with.
type answer int

const (
	answerScreenshot answer = iota
	answerCursor
)

// step is one thing done on the display: a pointer move to a declared
// point, a pause, or an xdotool command as it stands.
type step struct {
	move  *point
	pause time.Duration
	args  []string
}

// plan is one vendor action, ready to run.
type plan struct {
	steps []step
	// answer says what the result carries; settle is whether the screen
	// is given a moment to redraw before the screenshot.
	answer answer
	settle bool
}

func moveTo(p point) step { return step{move: &p} }

func pause(d time.Duration) step { return step{pause: d} }

func xdotool(args ...string) step { return step{args: args} }

func click(button, repeat int) step {
	return xdotool("click", "--repeat", strconv.Itoa(repeat), "--delay", strconv.Itoa(clickRepeatMillis), strconv.Itoa(button))
}

func mouseDown(button int) step { return xdotool("mousedown", strconv.Itoa(button)) }

func mouseUp(button int) step { return xdotool("mouseup", strconv.Itoa(button)) }

func keyDown(combo string) step { return xdotool("keydown", "--", combo) }

func keyUp(combo string) step { return xdotool("keyup", "--", combo) }

func typeText(s string) step {
	return xdotool("type", "--delay", strconv.Itoa(typeDelayMillis), "--", s)
}

// holding wraps steps in the modifier keys held down around them
// (Anthropic's click and scroll "text"); combo "" holds nothing.
func holding(combo string, steps ...step) []step {
	if combo == "" {
		return steps
	}
	return append(append([]step{keyDown(combo)}, steps...), keyUp(combo))
}
