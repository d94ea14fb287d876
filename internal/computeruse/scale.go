package computeruse

import (
	"fmt"
	"math"
)

// point is a position on the display, in whichever coordinates the
// holder says.
type point struct{ X, Y int }

// size is a display's width and height in pixels.
type size struct{ W, H int }

// maxDeclared bounds the display size a tool may declare: the vendors'
// tools ask for far less, and a screenshot of a larger one is only big.
const maxDeclared = 8192

func (s size) String() string { return fmt.Sprintf("%dx%d", s.W, s.H) }

// validDeclared checks a declared display size; field names it.
func validDeclared(s size, field string) error {
	if s.W < 1 || s.H < 1 || s.W > maxDeclared || s.H > maxDeclared {
		return inputErrorf(field, "want a display size from 1x1 to %dx%d, got %s", maxDeclared, maxDeclared, s)
	}
	return nil
}

// scaler maps between the declared display (what the model sees) and the
// real one.
type scaler struct{ declared, real size }

// toReal maps a declared point onto the real display: each axis scaled
// by real/declared and rounded, clamped to the display.
func (s scaler) toReal(p point) point {
	return point{scaleAxis(p.X, s.declared.W, s.real.W), scaleAxis(p.Y, s.declared.H, s.real.H)}
}

// toDeclared maps a real point back into the declared display.
func (s scaler) toDeclared(p point) point {
	return point{scaleAxis(p.X, s.real.W, s.declared.W), scaleAxis(p.Y, s.real.H, s.declared.H)}
}

// scaleAxis maps v in [0, from) to [0, to), so the last pixel stays the
// last pixel.
func scaleAxis(v, from, to int) int {
	if from <= 1 || to <= 1 {
		return 0
	}
	out := int(math.Round(float64(v) * float64(to-1) / float64(from-1)))
	return min(max(out, 0), to-1)
}

// inside checks that p is on a display of declared size; field names it.
func inside(p point, declared size, field string) error {
	if p.X < 0 || p.Y < 0 || p.X >= declared.W || p.Y >= declared.H {
		return inputErrorf(field, "(%d, %d) is off the %s display", p.X, p.Y, declared)
	}
	return nil
}
