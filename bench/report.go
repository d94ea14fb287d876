package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is one run's figures, baselines first.
type Report struct {
	StartedAt time.Time `json:"startedAt"`
	Duration  string    `json:"duration"`
	Host      Host      `json:"host"`
	Server    string    `json:"server"` // "own (bin/agent-sandbox …)" or the URL
	Template  string    `json:"template"`
	Quick     bool      `json:"quick"`
	Figures   []*Figure `json:"figures"`
}

// Host describes the machine the run measured.
type Host struct {
	Cores      int     `json:"cores"`
	MemTotalGB float64 `json:"memTotalGiB"`
	Kernel     string  `json:"kernel"`
	LoadAvg    string  `json:"loadAvgAtStart"` // other work on the host skews every figure
}

// Figure is one measured figure.
type Figure struct {
	Name string `json:"name"`
	Unit string `json:"unit"` // of P50, P99 and Value
	// Latency figures set P50 and P99; rates, sizes and counts set Value.
	P50   float64 `json:"p50,omitempty"`
	P99   float64 `json:"p99,omitempty"`
	Value float64 `json:"value,omitempty"`
	N     int     `json:"n"` // samples (or sandboxes, for density)
	// Baseline names the figure this one is compared with; Ratio is this
	// figure's P50 (or Value) over the baseline's.
	Baseline string  `json:"baseline,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	// Target is the goal with the bound it came to in this run; Met is
	// nil when it was not judged, and NotJudged then says why.
	Target    string `json:"target,omitempty"`
	Met       *bool  `json:"met,omitempty"`
	NotJudged string `json:"notJudged,omitempty"`
	// Skipped says why the figure was not measured.
	Skipped   string `json:"skipped,omitempty"`
	Note      string `json:"note,omitempty"`
	Histogram []Bin  `json:"histogram,omitempty"` // latency figures, in ms

	lat    *Latency
	target *target
}

// latencyFigure summarises samples in milliseconds.
func latencyFigure(name string, l *Latency) *Figure {
	return &Figure{Name: name, Unit: "ms", P50: ms(l.Quantile(0.5)), P99: ms(l.Quantile(0.99)), N: len(l.Samples), lat: l}
}

func skipped(name, why string) *Figure { return &Figure{Name: name, Skipped: why} }

// primary is P50 for latencies and Value otherwise.
func (f *Figure) primary() float64 {
	if f.lat != nil {
		return f.P50
	}
	return f.Value
}

// finish fills ratios, targets and histograms once every figure is in.
func (r *Report) finish() {
	byName := map[string]*Figure{}
	for _, f := range r.Figures {
		byName[f.Name] = f
	}
	for _, f := range r.Figures {
		if f.Skipped != "" {
			continue
		}
		if b := byName[f.Baseline]; b != nil && b.Skipped == "" && b.primary() > 0 {
			f.Ratio = f.primary() / b.primary()
		}
		if f.target != nil {
			j := f.target.judge(f, byName)
			f.Target, f.Met, f.NotJudged = j.text, j.met, j.why
		}
		if f.lat != nil {
			f.Histogram = f.lat.histogram(10)
		}
	}
}

// WriteTable writes the report as an aligned text table.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "agent-sandbox bench — %s, %s; host: %d cores, %.1f GiB, kernel %s, load %s at start\n",
		r.StartedAt.UTC().Format(time.RFC3339), r.Duration, r.Host.Cores, r.Host.MemTotalGB, r.Host.Kernel, r.Host.LoadAvg)
	fmt.Fprintf(w, "server: %s; template: %s", r.Server, r.Template)
	if r.Quick {
		fmt.Fprint(w, "; --quick (smoke: few samples, figures are rough)")
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tn\tp50\tp99\tvalue\tvs baseline\ttarget\tmet")
	for _, f := range r.Figures {
		if f.Skipped != "" {
			fmt.Fprintf(tw, "%s\t-\t\t\t\tskipped: %s\t\t\n", f.Name, f.Skipped)
			continue
		}
		var p50, p99, value, ratio, met string
		if f.lat != nil {
			p50, p99 = num(f.P50)+" ms", num(f.P99)+" ms"
		} else {
			value = num(f.Value) + " " + f.Unit
		}
		if f.Ratio > 0 {
			ratio = fmt.Sprintf("%s× %s", num(f.Ratio), f.Baseline)
		}
		switch {
		case f.Met != nil:
			met = map[bool]string{true: "yes", false: "NO"}[*f.Met]
		case f.NotJudged != "":
			met = "not judged"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Name, f.N, p50, p99, value, ratio, f.Target, met)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range r.Figures {
		if f.Note != "" {
			fmt.Fprintf(w, "  note: %s: %s\n", f.Name, f.Note)
		}
		if f.NotJudged != "" {
			fmt.Fprintf(w, "  not judged: %s: %s\n", f.Name, f.NotJudged)
		}
	}
	return nil
}

// num prints a figure with about three significant digits.
func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteHTML writes a self-contained page: the table, then one latency
// histogram per latency figure as inline SVG.
func (r *Report) WriteHTML(w io.Writer) error {
	var table strings.Builder
	if err := r.WriteTable(&table); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>agent-sandbox bench</title>
<style>body{font-family:sans-serif;margin:2em}pre{font-size:12px}figure{display:inline-block;margin:1em}figcaption{font-size:13px}</style>
</head><body><h1>agent-sandbox bench</h1><pre>`)
	b.WriteString(html.EscapeString(table.String()))
	b.WriteString("</pre><h2>Latency histograms (log scale, milliseconds)</h2>\n")
	for _, f := range r.Figures {
		if len(f.Histogram) > 0 {
			b.WriteString(f.SVG())
		}
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// SVG draws the figure's histogram with its p50 and p99 marked.
func (f *Figure) SVG() string {
	const width, height, left, bottom, top = 420, 200, 36, 34, 10
	plotW, plotH := float64(width-left-10), float64(height-bottom-top)
	peak := 1
	for _, bin := range f.Histogram {
		peak = max(peak, bin.Count)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<figure><svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-size="10" font-family="sans-serif">`, width, height, width, height)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`, left, height-bottom, width-10, height-bottom)
	fmt.Fprintf(&b, `<text x="4" y="%d">%d</text><text x="4" y="%d">0</text>`, top+8, peak, height-bottom)
	n := len(f.Histogram)
	barW := plotW / float64(n)
	lo, hi := f.Histogram[0].Lo, f.Histogram[n-1].Hi
	xOf := func(v float64) float64 { return float64(left) + plotW*logFrac(v, lo, hi) }
	for i, bin := range f.Histogram {
		h := plotH * float64(bin.Count) / float64(peak)
		x := float64(left) + float64(i)*barW
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a7ebb"><title>%s–%s ms: %d</title></rect>`,
			x+0.5, float64(height-bottom)-h, barW-1, h, num(bin.Lo), num(bin.Hi), bin.Count)
		if i%max(1, n/6) == 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, height-bottom+12, num(bin.Lo))
		}
	}
	for _, m := range []struct {
		label string
		v     float64
		color string
	}{{"p50", f.P50, "#2a2"}, {"p99", f.P99, "#c22"}} {
		x := xOf(m.v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="3,2"/><text x="%.1f" y="%d" fill="%s">%s %s</text>`,
			x, top, x, height-bottom, m.color, x+2, top+10, m.color, m.label, num(m.v))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">ms</text></svg>`, width/2, height-4)
	fmt.Fprintf(&b, `<figcaption>%s (n=%d)</figcaption></figure>`+"\n", html.EscapeString(f.Name), f.N)
	return b.String()
}

// logFrac is where v falls between lo and hi on a log scale, 0..1.
func logFrac(v, lo, hi float64) float64 {
	if v <= lo {
		return 0
	}
	if v >= hi {
		return 1
	}
	return (math.Log10(v) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
}
