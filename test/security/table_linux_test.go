package security

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// outcome is one row of the table: an attack, whom it ran as, the
// containment expected, what was observed and whether it was contained.
type outcome struct {
	attack, as, expected, observed string
	contained                      bool
}

// table collects the outcomes of every case.
type table struct {
	mu   sync.Mutex
	rows []outcome // guarded by mu
}

// add records o and fails t when the attack was not contained.
func (tb *table) add(t *testing.T, o outcome) {
	t.Helper()
	tb.mu.Lock()
	tb.rows = append(tb.rows, o)
	tb.mu.Unlock()
	if !o.contained {
		t.Errorf("NOT CONTAINED: %s (as %s): expected %s; observed %s", o.attack, o.as, o.expected, o.observed)
	}
}

// String formats the table with aligned columns.
func (tb *table) String() string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	head := outcome{attack: "attack", as: "as", expected: "expected containment", observed: "observed"}
	rows := append([]outcome{head}, tb.rows...)
	const maxObserved = 150
	w := [3]int{}
	for _, r := range rows {
		w[0] = max(w[0], len(r.attack))
		w[1] = max(w[1], len(r.as))
		w[2] = max(w[2], len(r.expected))
	}
	var b strings.Builder
	line := func(a, as, exp, obs, ok string) {
		if len(obs) > maxObserved {
			obs = obs[:maxObserved-1] + "…"
		}
		fmt.Fprintf(&b, "%-*s | %-*s | %-*s | %-*s | %s\n", w[0], a, w[1], as, w[2], exp, maxObserved, obs, ok)
	}
	line(head.attack, head.as, head.expected, head.observed, "contained?")
	b.WriteString(strings.Repeat("-", w[0]+w[1]+w[2]+maxObserved+24) + "\n")
	n := 0
	for _, r := range tb.rows {
		ok := "yes"
		if !r.contained {
			ok = "NO"
		} else {
			n++
		}
		line(r.attack, r.as, r.expected, r.observed, ok)
	}
	fmt.Fprintf(&b, "%d cases, %d contained, %d not contained\n", len(tb.rows), n, len(tb.rows)-n)
	return b.String()
}
