package bench

import (
	"fmt"
	"strings"
)

// target is a goal of a performance issue: a bound on one quantity of a
// figure (its p50, p99 or value), fixed, or computed from baselines
// measured in the same run, as issue 21 states its goals.
type target struct {
	text    string                // the goal as the issue states it
	unit    string                // of the bound
	of      func(*Figure) float64 // the quantity bounded
	atLeast bool                  // a floor; otherwise a ceiling
	// needs names the baselines the bound is computed from; a target
	// whose baseline was not measured cannot be judged.
	needs []string
	bound func(fig func(name string) *Figure) float64
}

func p50(f *Figure) float64   { return f.P50 }
func p99(f *Figure) float64   { return f.P99 }
func value(f *Figure) float64 { return f.Value }

// p50AtMost is a fixed ceiling on the p50 in ms.
func p50AtMost(ms float64) *target {
	return &target{text: fmt.Sprintf("p50 ≤ %g ms", ms), of: p50, bound: fixed(ms)}
}

// valueAtMost and valueAtLeast are fixed bounds on the value.
func valueAtMost(v float64, unit string) *target {
	return &target{text: fmt.Sprintf("≤ %g %s", v, unit), of: value, bound: fixed(v)}
}

func valueAtLeast(v float64, unit string) *target {
	return &target{text: fmt.Sprintf("≥ %g %s", v, unit), of: value, atLeast: true, bound: fixed(v)}
}

func fixed(v float64) func(func(string) *Figure) float64 {
	return func(func(string) *Figure) float64 { return v }
}

// p50Times is a ceiling on the p50 of factor times baseline's p50 (named
// short in the text).
func p50Times(factor float64, baseline, short string) *target {
	return &target{
		text: fmt.Sprintf("p50 ≤ %g× %s", factor, short), unit: "ms", of: p50, needs: []string{baseline},
		bound: func(fig func(string) *Figure) float64 { return factor * fig(baseline).P50 },
	}
}

// p99Times is a ceiling on the p99 of factor times baseline's p99.
func p99Times(factor float64, baseline, short string) *target {
	return &target{
		text: fmt.Sprintf("p99 ≤ %g× %s", factor, short), unit: "ms", of: p99, needs: []string{baseline},
		bound: func(fig func(string) *Figure) float64 { return factor * fig(baseline).P99 },
	}
}

// valueTimesAtLeast is a floor on the value of factor times baseline's
// value.
func valueTimesAtLeast(factor float64, baseline, short, unit string) *target {
	return &target{
		text: fmt.Sprintf("≥ %g× %s", factor, short), unit: unit, of: value, atLeast: true, needs: []string{baseline},
		bound: func(fig func(string) *Figure) float64 { return factor * fig(baseline).Value },
	}
}

// poolCreateTarget is issue 21's for create→ready from the warm pool: the
// p50 within the in-sandbox login shell (the first command is one) and
// twice the isolation floor.
func poolCreateTarget() *target {
	return &target{
		text: "p50 ≤ in-sandbox bash + 2× floor", unit: "ms", of: p50, needs: []string{figSandboxBash, figFloor},
		bound: func(fig func(string) *Figure) float64 { return fig(figSandboxBash).P50 + 2*fig(figFloor).P50 },
	}
}

// judgement is what finish makes of a figure's target.
type judgement struct {
	text string // the goal, with the bound it came to in this run
	met  *bool  // nil: not judged
	why  string // why it was not judged
}

// judge holds f to t, with its baselines looked up in byName.
func (t *target) judge(f *Figure, byName map[string]*Figure) judgement {
	var missing []string
	for _, n := range t.needs {
		switch b := byName[n]; {
		case b == nil:
			missing = append(missing, n+" was not measured in this run")
		case b.Skipped != "":
			missing = append(missing, n+" was not measured ("+b.Skipped+")")
		case b.primary() <= 0:
			missing = append(missing, n+" measured nothing")
		}
	}
	if len(missing) > 0 {
		return judgement{text: t.text, why: strings.Join(missing, "; ")}
	}
	limit := t.bound(func(n string) *Figure { return byName[n] })
	text := t.text
	if len(t.needs) > 0 {
		text += " = " + num(limit) + " " + t.unit
	}
	met := t.of(f) <= limit
	if t.atLeast {
		met = t.of(f) >= limit
	}
	return judgement{text: text, met: &met}
}
