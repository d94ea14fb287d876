package computeruse

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RunFunc runs a program on the display (as the sandbox's user, DISPLAY
// set) and returns its stdout; an error when it cannot or it fails.
type RunFunc func(ctx context.Context, args ...string) ([]byte, error)

// settleTime lets the screen redraw after an action before its
// screenshot (a typed line, a window raised by a click).
const settleTime = 400 * time.Millisecond

// Executor carries out actions on one display.
type Executor struct {
	run     RunFunc
	display string
	settle  time.Duration // settleTime; tests shorten it
}

// New returns an executor that runs its commands with run on X display
// display (":0").
func New(run RunFunc, display string) *Executor {
	return &Executor{run: run, display: display, settle: settleTime}
}

// Anthropic performs an Anthropic computer-use action and answers with
// its tool_result block; an *InputError for a bad request.
func (e *Executor) Anthropic(ctx context.Context, req AnthropicRequest) (AnthropicResult, error) {
	p, declared, err := parseAnthropic(req)
	if err != nil {
		return AnthropicResult{}, err
	}
	out, err := e.do(ctx, p, declared)
	if err != nil {
		return AnthropicResult{}, err
	}
	return anthropicResult(req.ToolUse.ID, out), nil
}

// OpenAI performs an OpenAI computer_call and answers with its
// computer_call_output item; an *InputError for a bad request.
func (e *Executor) OpenAI(ctx context.Context, req OpenAIRequest) (OpenAIOutput, error) {
	p, declared, err := parseOpenAI(req)
	if err != nil {
		return OpenAIOutput{}, err
	}
	out, err := e.do(ctx, p, declared)
	if err != nil {
		return OpenAIOutput{}, err
	}
	return openAIOutput(req, out), nil
}

// outcome is what an action produced, in declared coordinates.
type outcome struct {
	screenshot []byte // PNG of the declared size
	cursor     *point
}

func (e *Executor) do(ctx context.Context, p plan, declared size) (outcome, error) {
	real, err := e.displaySize(ctx)
	if err != nil {
		return outcome{}, err
	}
	sc := scaler{declared: declared, real: real}
	for _, s := range p.steps {
		args := s.args
		switch {
		case s.move != nil:
			to := sc.toReal(*s.move)
			args = []string{"mousemove", strconv.Itoa(to.X), strconv.Itoa(to.Y)}
		case s.pause > 0:
			if err := sleep(ctx, s.pause); err != nil {
				return outcome{}, err
			}
			continue
		case len(args) == 0:
			continue
		}
		if _, err := e.run(ctx, append([]string{"xdotool"}, args...)...); err != nil {
			return outcome{}, fmt.Errorf("xdotool %s: %w", args[0], err)
		}
	}
	if p.answer == answerCursor {
		at, err := e.cursor(ctx)
		if err != nil {
			return outcome{}, err
		}
		at = sc.toDeclared(at)
		return outcome{cursor: &at}, nil
	}
	if p.settle {
		if err := sleep(ctx, e.settle); err != nil {
			return outcome{}, err
		}
	}
	png, err := e.Screenshot(ctx, declared)
	return outcome{screenshot: png}, err
}

// displaySize asks X for the display's size.
func (e *Executor) displaySize(ctx context.Context) (size, error) {
	out, err := e.run(ctx, "xdotool", "getdisplaygeometry")
	if err != nil {
		return size{}, fmt.Errorf("measuring the display: %w", err)
	}
	var s size
	if _, err := fmt.Sscan(string(out), &s.W, &s.H); err != nil || s.W < 1 || s.H < 1 {
		return size{}, fmt.Errorf("measuring the display: xdotool said %q", out)
	}
	return s, nil
}

// cursor asks X where the pointer is.
func (e *Executor) cursor(ctx context.Context) (point, error) {
	out, err := e.run(ctx, "xdotool", "getmouselocation", "--shell")
	if err != nil {
		return point{}, fmt.Errorf("locating the pointer: %w", err)
	}
	var p point
	var haveX, haveY bool
	for _, line := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		n, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case err != nil:
		case k == "X":
			p.X, haveX = n, true
		case k == "Y":
			p.Y, haveY = n, true
		}
	}
	if !haveX || !haveY {
		return point{}, fmt.Errorf("locating the pointer: xdotool said %q", out)
	}
	return p, nil
}

// Screenshot grabs the display with ffmpeg's x11grab, scaled to the given
// size, as a PNG.
func (e *Executor) Screenshot(ctx context.Context, to size) ([]byte, error) {
	out, err := e.run(ctx, "ffmpeg", "-nostdin", "-loglevel", "error", "-f", "x11grab", "-i", e.display,
		"-frames:v", "1", "-vf", fmt.Sprintf("scale=%d:%d:flags=lanczos", to.W, to.H),
		"-f", "image2pipe", "-c:v", "png", "-")
	if err != nil {
		return nil, fmt.Errorf("taking a screenshot: %w", err)
	}
	got, err := pngSize(out)
	if err != nil {
		return nil, fmt.Errorf("taking a screenshot: %w", err)
	}
	if got != to {
		return nil, fmt.Errorf("taking a screenshot: ffmpeg made a %s PNG, not %s", got, to)
	}
	return out, nil
}

// pngSize reads a PNG's width and height from its header.
func pngSize(b []byte) (size, error) {
	const sig = "\x89PNG\r\n\x1a\n"
	if len(b) < 24 || string(b[:8]) != sig || !bytes.Equal(b[12:16], []byte("IHDR")) {
		return size{}, fmt.Errorf("not a PNG (%d bytes)", len(b))
	}
	return size{int(binary.BigEndian.Uint32(b[16:20])), int(binary.BigEndian.Uint32(b[20:24]))}, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
