package pystartup

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/google/go-cmp/cmp"
)

// python is Debian's interpreter, which has python3-ipykernel, matplotlib,
// pandas and PIL; the first python3 on PATH may be another one without them.
const python = "/usr/bin/python3"

// requirePython skips t unless python can import what the kernel and the
// test driver need; under CI (CI=true) it fails instead, so the suite cannot
// pass by skipping.
func requirePython(t *testing.T) {
	t.Helper()
	const modules = "ipykernel, jupyter_client, IPython, matplotlib, matplotlib_inline, numpy, pandas, PIL"
	out, err := exec.Command(python, "-c", "import "+modules).CombinedOutput()
	testenv.Require(t, err == nil, fmt.Sprintf("%s cannot import one of %s (install python3-ipykernel python3-matplotlib python3-pandas python3-pil): %v: %s",
		python, modules, err, strings.TrimSpace(string(out))))
}

type cell struct {
	Name string `json:"name"`
	Code string `json:"code"`
}

// output is one iopub message of a cell, as testdata/check.py reports it.
type output struct {
	MsgType   string                     `json:"msg_type"`
	Data      map[string]json.RawMessage `json:"data"`
	Name      string                     `json:"name"`
	Text      string                     `json:"text"`
	EName     string                     `json:"ename"`
	EValue    string                     `json:"evalue"`
	Traceback []string                   `json:"traceback"`
}

type cellResult struct {
	Status  string   `json:"status"`
	Outputs []output `json:"outputs"`
}

type runResult struct {
	Cells  map[string]cellResult `json:"cells"`
	Stderr string                `json:"stderr"`
}

// runKernel starts an ipykernel with Script loaded the way doc.go says, runs
// cells in order and returns what each published. Modules named in block
// cannot be imported in the kernel.
func runKernel(t *testing.T, cells []cell, block []string) runResult {
	t.Helper()
	script := filepath.Join(t.TempDir(), "startup.py")
	if err := os.WriteFile(script, Script, 0o644); err != nil {
		t.Fatal(err)
	}
	request, err := json.Marshal(map[string]any{"cells": cells, "block": block})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, filepath.Join("testdata", "check.py"), ExecFilesFlag(script))
	cmd.Stdin = bytes.NewReader(request)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("running testdata/check.py: %v\nstderr:\n%s", err, stderr.String())
	}
	var res runResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("decoding check.py output: %v\n%s", err, stdout.String())
	}
	if strings.Contains(res.Stderr, "agent-sandbox startup") || strings.Contains(res.Stderr, "Traceback") {
		t.Errorf("kernel stderr reports a startup failure:\n%s", res.Stderr)
	}
	return res
}

// chart is the e2b/chart wire shape; which fields are set depends on Type.
type chart struct {
	Type        string          `json:"type"`
	Title       *string         `json:"title"`
	Elements    json.RawMessage `json:"elements"`
	XLabel      *string         `json:"x_label"`
	YLabel      *string         `json:"y_label"`
	XUnit       *string         `json:"x_unit"`
	YUnit       *string         `json:"y_unit"`
	XTicks      []any           `json:"x_ticks"`
	XTickLabels []string        `json:"x_tick_labels"`
	XScale      string          `json:"x_scale"`
	YTicks      []any           `json:"y_ticks"`
	YTickLabels []string        `json:"y_tick_labels"`
	YScale      string          `json:"y_scale"`
}

type series struct {
	Label  string  `json:"label"`
	Points [][]any `json:"points"`
}

type bar struct {
	Label string  `json:"label"`
	Group string  `json:"group"`
	Value float64 `json:"value"`
}

type slice struct {
	Label  string  `json:"label"`
	Angle  float64 `json:"angle"`
	Radius float64 `json:"radius"`
}

type box struct {
	Label         string    `json:"label"`
	Min           float64   `json:"min"`
	FirstQuartile float64   `json:"first_quartile"`
	Median        float64   `json:"median"`
	ThirdQuartile float64   `json:"third_quartile"`
	Max           float64   `json:"max"`
	Outliers      []float64 `json:"outliers"`
}

// Keys every chart of a kind carries, null or not (SDK types in
// @e2b/code-interpreter 2.8.0 dist/index.d.ts).
var (
	chartKeys   = []string{"type", "title", "elements"}
	chart2DKeys = slices.Concat(chartKeys, []string{"x_label", "y_label", "x_unit", "y_unit"})
	pointKeys   = slices.Concat(chart2DKeys, []string{"x_ticks", "x_tick_labels", "x_scale", "y_ticks", "y_tick_labels", "y_scale"})
)

// sameChart compares the scalar fields of charts; tests check elements and
// ticks on their own.
var sameChart = cmp.FilterPath(func(p cmp.Path) bool {
	switch p.Last().String() {
	case ".Elements", ".XTicks", ".XTickLabels", ".YTicks", ".YTickLabels":
		return true
	}
	return false
}, cmp.Ignore())

func str(s string) *string { return &s }

// only returns the single rich output (display_data or execute_result) of a
// cell, failing if there is not exactly one.
func only(t *testing.T, r cellResult, msgType string) output {
	t.Helper()
	var rich []output
	for _, o := range r.Outputs {
		if o.MsgType == "display_data" || o.MsgType == "execute_result" {
			rich = append(rich, o)
		}
		if o.MsgType == "error" {
			t.Fatalf("cell failed: %s: %s\n%s", o.EName, o.EValue, strings.Join(o.Traceback, "\n"))
		}
	}
	if len(rich) != 1 || rich[0].MsgType != msgType {
		t.Fatalf("want one %s, got %+v", msgType, summarize(r.Outputs))
	}
	return rich[0]
}

func summarize(outputs []output) []string {
	var s []string
	for _, o := range outputs {
		keys := make([]string, 0, len(o.Data))
		for k := range o.Data {
			keys = append(keys, k)
		}
		s = append(s, o.MsgType+" "+strings.Join(keys, ",")+" "+o.Text+o.EName)
	}
	return s
}

// requirePNG checks that o carries a base64 PNG under image/png.
func requirePNG(t *testing.T, o output) {
	t.Helper()
	var b64 string
	if err := json.Unmarshal(o.Data["image/png"], &b64); err != nil {
		t.Fatalf("image/png: %v (have %v)", err, summarize([]output{o}))
	}
	png, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		t.Fatalf("image/png is not base64: %v", err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("image/png is not a PNG: % x", png[:min(8, len(png))])
	}
}

// chartOf decodes o's e2b/chart, checking that it has keys.
func chartOf(t *testing.T, o output, keys []string) chart {
	t.Helper()
	raw, ok := o.Data["e2b/chart"]
	if !ok {
		t.Fatalf("no e2b/chart in %v", summarize([]output{o}))
	}
	return decodeChart(t, raw, keys)
}

func decodeChart(t *testing.T, raw json.RawMessage, keys []string) chart {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatalf("e2b/chart: %v", err)
	}
	for _, k := range keys {
		if _, ok := fields[k]; !ok {
			t.Errorf("e2b/chart lacks %q: %s", k, raw)
		}
	}
	var c chart
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("e2b/chart: %v", err)
	}
	return c
}

func elements[T any](t *testing.T, c chart) []T {
	t.Helper()
	var out []T
	if err := json.Unmarshal(c.Elements, &out); err != nil {
		t.Fatalf("elements of %s chart: %v: %s", c.Type, err, c.Elements)
	}
	return out
}

// checkTicks checks the invariants of a point chart's ticks.
func checkTicks(t *testing.T, c chart) {
	t.Helper()
	if len(c.XTicks) == 0 || len(c.XTicks) != len(c.XTickLabels) {
		t.Errorf("x_ticks %v / x_tick_labels %q", c.XTicks, c.XTickLabels)
	}
	if len(c.YTicks) == 0 || len(c.YTicks) != len(c.YTickLabels) {
		t.Errorf("y_ticks %v / y_tick_labels %q", c.YTicks, c.YTickLabels)
	}
}

func TestStartupScript(t *testing.T) {
	t.Parallel()
	requirePython(t)

	tests := []struct {
		name  string
		code  string
		check func(t *testing.T, r cellResult)
	}{
		{
			name: "namespace left clean",
			code: "print(sorted(n for n in globals() if 'sandbox' in n.lower()), get_ipython().colors)",
			check: func(t *testing.T, r cellResult) {
				if len(r.Outputs) != 1 || r.Outputs[0].Text != "[] NoColor\n" {
					t.Errorf("got %v, want the user namespace free of startup names and colors NoColor", summarize(r.Outputs))
				}
			},
		},
		{
			name: "traceback without colours",
			code: "def f():\n    raise ValueError('boom')\nf()",
			check: func(t *testing.T, r cellResult) {
				if r.Status != "error" || len(r.Outputs) != 1 || r.Outputs[0].EName != "ValueError" {
					t.Fatalf("got status %s, %v", r.Status, summarize(r.Outputs))
				}
				tb := strings.Join(r.Outputs[0].Traceback, "\n")
				if strings.Contains(tb, "\x1b[") {
					t.Errorf("traceback has ANSI escapes: %q", tb)
				}
				if !strings.Contains(tb, "ValueError: boom") {
					t.Errorf("traceback %q lacks the error", tb)
				}
			},
		},
		{
			name: "dataframe",
			code: "import numpy as np, pandas as pd\n" +
				"pd.DataFrame({'a': [1, 2, 3], 'f': [1.5, np.nan, 3.0], " +
				"'t': pd.to_datetime(['2023-01-01', None, '2023-01-03 04:05:06']), 's': ['x', None, 'z'], 5: [True, False, True]})",
			check: func(t *testing.T, r cellResult) {
				o := only(t, r, "execute_result")
				for _, mime := range []string{"text/plain", "text/html", "e2b/data"} {
					if _, ok := o.Data[mime]; !ok {
						t.Errorf("no %s in %v", mime, summarize(r.Outputs))
					}
				}
				var data map[string][]any
				if err := json.Unmarshal(o.Data["e2b/data"], &data); err != nil {
					t.Fatalf("e2b/data: %v", err)
				}
				want := map[string][]any{
					"a": {1.0, 2.0, 3.0},
					"f": {1.5, nil, 3.0},
					"t": {"2023-01-01T00:00:00", nil, "2023-01-03T04:05:06"},
					"s": {"x", nil, "z"},
					"5": {true, false, true},
				}
				if diff := cmp.Diff(want, data); diff != "" {
					t.Errorf("e2b/data (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "line",
			code: "import matplotlib.pyplot as plt\n" +
				"plt.plot([0, 1, 2, 3], [0, 1, 4, 9], label='squares')\n" +
				"plt.plot([0, 1, 2, 3], [0, 1, 2, 3], label='identity')\n" +
				"plt.xlabel('Time (s)'); plt.ylabel('Amplitude [Hz]'); plt.title('Two lines')\n" +
				"plt.show()",
			check: func(t *testing.T, r cellResult) {
				o := only(t, r, "display_data")
				requirePNG(t, o)
				c := chartOf(t, o, pointKeys)
				want := chart{
					Type: "line", Title: str("Two lines"),
					XLabel: str("Time (s)"), YLabel: str("Amplitude [Hz]"), XUnit: str("s"), YUnit: str("Hz"),
					XScale: "linear", YScale: "linear",
				}
				if diff := cmp.Diff(want, c, sameChart); diff != "" {
					t.Errorf("chart (-want +got):\n%s", diff)
				}
				checkTicks(t, c)
				wantLines := []series{
					{Label: "squares", Points: [][]any{{0.0, 0.0}, {1.0, 1.0}, {2.0, 4.0}, {3.0, 9.0}}},
					{Label: "identity", Points: [][]any{{0.0, 0.0}, {1.0, 1.0}, {2.0, 2.0}, {3.0, 3.0}}},
				}
				if diff := cmp.Diff(wantLines, elements[series](t, c)); diff != "" {
					t.Errorf("elements (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "scatter",
			code: "import matplotlib.pyplot as plt\n" +
				"plt.scatter([1, 2, 3], [4, 5, 6], label='Dataset 1')\n" +
				"plt.scatter([7, 8], [9, 10], label='Dataset 2')\n" +
				"plt.xlabel('A'); plt.ylabel('B')\n" +
				"plt.show()",
			check: func(t *testing.T, r cellResult) {
				o := only(t, r, "display_data")
				requirePNG(t, o)
				c := chartOf(t, o, pointKeys)
				wantChart := chart{Type: "scatter", XLabel: str("A"), YLabel: str("B"), XScale: "linear", YScale: "linear"}
				if diff := cmp.Diff(wantChart, c, sameChart); diff != "" {
					t.Errorf("chart (-want +got):\n%s", diff)
				}
				checkTicks(t, c)
				want := []series{
					{Label: "Dataset 1", Points: [][]any{{1.0, 4.0}, {2.0, 5.0}, {3.0, 6.0}}},
					{Label: "Dataset 2", Points: [][]any{{7.0, 9.0}, {8.0, 10.0}}},
				}
				if diff := cmp.Diff(want, elements[series](t, c)); diff != "" {
					t.Errorf("elements (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "bar",
			code: "import matplotlib.pyplot as plt\n" +
				"plt.bar(['Author A', 'Author B', 'Author C'], [100, 200, 300], label='Books Sold')\n" +
				"plt.xlabel('Authors'); plt.ylabel('Number of Books Sold'); plt.title('Book Sales')\n" +
				"plt.show()",
			check: func(t *testing.T, r cellResult) {
				o := only(t, r, "display_data")
				requirePNG(t, o)
				c := chartOf(t, o, chart2DKeys)
				wantChart := chart{Type: "bar", Title: str("Book Sales"), XLabel: str("Authors"), YLabel: str("Number of Books Sold")}
				if diff := cmp.Diff(wantChart, c, sameChart); diff != "" {
					t.Errorf("chart (-want +got):\n%s", diff)
				}
				want := []bar{
					{Label: "Author A", Group: "Books Sold", Value: 100},
					{Label: "Author B", Group: "Books Sold", Value: 200},
					{Label: "Author C", Group: "Books Sold", Value: 300},
				}
				if diff := cmp.Diff(want, elements[bar](t, c)); diff != "" {
					t.Errorf("elements (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "grouped bars",
			code: "import numpy as np, matplotlib.pyplot as plt\n" +
				"x = np.arange(2); w = 0.35\n" +
				"fig, ax = plt.subplots()\n" +
				"ax.bar(x - w/2, [20, 34], w, label='Men')\n" +
				"ax.bar(x + w/2, [25, 32], w, label='Women')\n" +
				"ax.set_xticks(x, ['G1', 'G2'])\n" +
				"plt.show()",
			check: func(t *testing.T, r cellResult) {
				c := chartOf(t, only(t, r, "display_data"), chart2DKeys)
				want := []bar{
					{Label: "G1", Group: "Men", Value: 20},
					{Label: "G2", Group: "Men", Value: 34},
					{Label: "G1", Group: "Women", Value: 25},
					{Label: "G2", Group: "Women", Value: 32},
				}
				if diff := cmp.Diff(want, elements[bar](t, c)); diff != "" {
					t.Errorf("elements (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "horizontal bars",
			code: "import matplotlib.pyplot as plt\n" +
				"plt.barh(['a', 'b'], [3, 4])\n" +
				"plt.xlabel('Count'); plt.ylabel('Letter')\n" +
				"plt.show()",
			check: func(t *testing.T, r cellResult) {
				c := chartOf(t, only(t, r, "display_data"), chart2DKeys)
				// The category axis is reported as x.
				wantChart := chart{Type: "bar", XLabel: str("Letter"), YLabel: str("Count")}
				if diff := cmp.Diff(wantChart, c, sameChart); diff != "" {
					t.Errorf("chart (-want +got):\n%s", diff)
				}
				want := []bar{{Label: "a", Group: "Group 0", Value: 3}, {Label: "b", Group: "Group 0", Value: 4}}
				if diff := cmp.Diff(want, elements[bar](t, c)); diff != "" {
					t.Errorf("elements (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "pie",
			code: "import matplotlib.pyplot as plt\n" +
				"fig, ax = plt.subplots()\n" +
				"ax.pie([90, 10], labels=['No', 'No, in blue'], autopct='%1.1f%%', startangle=90)\n" +
				"plt.title('Will I wake up early tomorrow?')\n" +
				"plt.show()",
			check: func(t *testing.T, r cellResult) {
				o := only(t, r, "display_data")
				requirePNG(t, o)
				c := chartOf(t, o, chartKeys)
				wantChart := chart{Type: "pie", Title: str("Will I wake up early tomorrow?")}
				if diff := cmp.Diff(wantChart, c, sameChart); diff != "" {
					t.Errorf("chart (-want +got):\n%s", diff)
				}
				slices := elements[slice](t, c)
				want := []slice{{Label: "No", Angle: 324, Radius: 1}, {Label: "No, in blue", Angle: 36, Radius: 1}}
				if diff := cmp.Diff(want, slices); diff != "" {
					t.Errorf("elements (-want +got):\n%s", diff)
				}
				var sum float64
				for _, s := range slices {
					sum += s.Angle
				}
				if math.Abs(sum-360) > 1e-9 {
					t.Errorf("angles sum to %v, want 360", sum)
				}
			},
		},
		{
			// As E2B's SDK test: boxplot drawn twice, the second time over the first.
			name: "box and whisker",
			code: "import matplotlib.pyplot as plt\n" +
				"data = {'Class A': [85, 90, 78, 92, 88], 'Class B': [95, 89, 76, 91, 84, 87], 'Class C': [75, 82, 88, 79, 86]}\n" +
				"fig, ax = plt.subplots()\n" +
				"ax.boxplot(data.values(), labels=data.keys())\n" +
				"ax.set_title('Exam Scores Distribution'); ax.set_xlabel('Class'); ax.set_ylabel('Score')\n" +
				"ax.boxplot(data.values(), labels=data.keys(), patch_artist=True)\n" +
				"plt.show()",
			check: func(t *testing.T, r cellResult) {
				o := only(t, r, "display_data")
				requirePNG(t, o)
				c := chartOf(t, o, chart2DKeys)
				wantChart := chart{Type: "box_and_whisker", Title: str("Exam Scores Distribution"), XLabel: str("Class"), YLabel: str("Score")}
				if diff := cmp.Diff(wantChart, c, sameChart); diff != "" {
					t.Errorf("chart (-want +got):\n%s", diff)
				}
				want := []box{
					{Label: "Class A", Min: 78, FirstQuartile: 85, Median: 88, ThirdQuartile: 90, Max: 92, Outliers: []float64{}},
					{Label: "Class B", Min: 84, FirstQuartile: 84.75, Median: 88, ThirdQuartile: 90.5, Max: 95, Outliers: []float64{76}},
					{Label: "Class C", Min: 75, FirstQuartile: 79, Median: 82, ThirdQuartile: 86, Max: 88, Outliers: []float64{}},
				}
				if diff := cmp.Diff(want, elements[box](t, c)); diff != "" {
					t.Errorf("elements (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "superchart",
			code: "import numpy as np, matplotlib.pyplot as plt\n" +
				"fig, axs = plt.subplots(1, 2)\n" +
				"fig.suptitle('Multiple Charts')\n" +
				"x = np.linspace(0, 10, 100)\n" +
				"axs[0].plot(x, np.sin(x), 'r'); axs[0].set_title('Sine Wave'); axs[0].grid(True)\n" +
				"axs[1].scatter([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]); axs[1].set_title('Scatter Plot')\n" +
				"axs[1].set_xlabel('X'); axs[1].set_ylabel('Y')\n" +
				"plt.show()",
			check: func(t *testing.T, r cellResult) {
				o := only(t, r, "display_data")
				requirePNG(t, o)
				c := chartOf(t, o, chartKeys)
				if diff := cmp.Diff(chart{Type: "superchart", Title: str("Multiple Charts")}, c, sameChart); diff != "" {
					t.Fatalf("chart (-want +got):\n%s", diff)
				}
				subs := elements[json.RawMessage](t, c)
				if len(subs) != 2 {
					t.Fatalf("got %d charts, want 2", len(subs))
				}
				first, second := decodeChart(t, subs[0], pointKeys), decodeChart(t, subs[1], pointKeys)
				wantFirst := chart{Type: "line", Title: str("Sine Wave"), XScale: "linear", YScale: "linear"}
				if diff := cmp.Diff(wantFirst, first, sameChart); diff != "" {
					t.Errorf("first chart (-want +got):\n%s", diff)
				}
				if lines := elements[series](t, first); len(lines) != 1 || len(lines[0].Points) != 100 {
					t.Errorf("first chart: want 1 line of 100 points, got %d lines", len(lines))
				}
				wantSecond := chart{Type: "scatter", Title: str("Scatter Plot"), XLabel: str("X"), YLabel: str("Y"), XScale: "linear", YScale: "linear"}
				if diff := cmp.Diff(wantSecond, second, sameChart); diff != "" {
					t.Errorf("second chart (-want +got):\n%s", diff)
				}
				if dots := elements[series](t, second); len(dots) != 1 || len(dots[0].Points) != 5 {
					t.Errorf("second chart: want 1 series of 5 points, got %d", len(dots))
				}
			},
		},
		{
			name: "datetime x axis",
			code: "import datetime, matplotlib.pyplot as plt\n" +
				"dates = [datetime.date(2023, 9, 1) + datetime.timedelta(days=i) for i in range(3)]\n" +
				"plt.plot(dates, [1, 2, 3], label='n')\n" +
				"plt.show()",
			check: func(t *testing.T, r cellResult) {
				c := chartOf(t, only(t, r, "display_data"), pointKeys)
				if c.Type != "line" || c.XScale != "datetime" || c.YScale != "linear" {
					t.Errorf("got %s chart, scales %s/%s", c.Type, c.XScale, c.YScale)
				}
				checkTicks(t, c)
				for _, tick := range c.XTicks {
					s, ok := tick.(string)
					if _, err := time.Parse(time.RFC3339, s); !ok || err != nil {
						t.Errorf("x tick %v is not an RFC 3339 time", tick)
					}
				}
				lines := elements[series](t, c)
				if len(lines) != 1 || len(lines[0].Points) != 3 {
					t.Fatalf("want one line of 3 points, got %+v", lines)
				}
				first, _ := lines[0].Points[0][0].(string)
				if got, err := time.Parse(time.RFC3339, first); err != nil || !got.Equal(time.Date(2023, 9, 1, 0, 0, 0, 0, time.UTC)) {
					t.Errorf("first x = %v, want 2023-09-01T00:00:00Z as an ISO string", lines[0].Points[0][0])
				}
			},
		},
		{
			// pandas plots a regular series as Period ordinals (here months).
			name: "pandas monthly series",
			code: "import pandas as pd\n" +
				"pd.Series([1.0, 2.0], index=pd.date_range('2024-01-01', periods=2, freq='MS')).plot()\n" +
				"import matplotlib.pyplot as plt; plt.show()",
			check: func(t *testing.T, r cellResult) {
				c := chartOf(t, only(t, r, "display_data"), pointKeys)
				if c.XScale != "datetime" {
					t.Errorf("x_scale %q, want datetime", c.XScale)
				}
				want := []series{{Label: "_child0", Points: [][]any{{"2024-01-01T00:00:00+00:00", 1.0}, {"2024-02-01T00:00:00+00:00", 2.0}}}}
				if diff := cmp.Diff(want, elements[series](t, c)); diff != "" {
					t.Errorf("elements (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "categorical and log scales",
			code: "import matplotlib.pyplot as plt\n" +
				"fig, ax = plt.subplots()\n" +
				"ax.plot(['A', 'B', 'C'], [1, 100, 10000]); ax.set_yscale('log'); ax.set_ylabel('Y (log scale)')\n" +
				"plt.show()",
			check: func(t *testing.T, r cellResult) {
				c := chartOf(t, only(t, r, "display_data"), pointKeys)
				wantChart := chart{Type: "line", YLabel: str("Y (log scale)"), YUnit: str("log scale"), XScale: "categorical", YScale: "log"}
				if diff := cmp.Diff(wantChart, c, sameChart); diff != "" {
					t.Errorf("chart (-want +got):\n%s", diff)
				}
				want := []series{{Label: "_child0", Points: [][]any{{"A", 1.0}, {"B", 100.0}, {"C", 10000.0}}}}
				if diff := cmp.Diff(want, elements[series](t, c)); diff != "" {
					t.Errorf("elements (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "unknown",
			code: "import matplotlib.pyplot as plt\n" +
				"fig, ax = plt.subplots()\n" +
				"ax.add_artist(plt.Circle((0, 0), 1, fill=False))\n" +
				"plt.title('A Circle')\n" +
				"plt.show()",
			check: func(t *testing.T, r cellResult) {
				o := only(t, r, "display_data")
				requirePNG(t, o)
				c := chartOf(t, o, chartKeys)
				if diff := cmp.Diff(chart{Type: "unknown", Title: str("A Circle")}, c, sameChart); diff != "" {
					t.Errorf("chart (-want +got):\n%s", diff)
				}
				if string(c.Elements) != "[]" {
					t.Errorf("elements %s, want []", c.Elements)
				}
			},
		},
		{
			name: "empty figure has no chart",
			code: "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nplt.show()",
			check: func(t *testing.T, r cellResult) {
				o := only(t, r, "display_data")
				requirePNG(t, o)
				if _, ok := o.Data["e2b/chart"]; ok {
					t.Errorf("empty figure has an e2b/chart: %s", o.Data["e2b/chart"])
				}
			},
		},
		{
			name: "figure drawn at the end of the cell",
			code: "import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4]);",
			check: func(t *testing.T, r cellResult) {
				o := only(t, r, "display_data")
				requirePNG(t, o)
				if c := chartOf(t, o, pointKeys); c.Type != "line" {
					t.Errorf("got %s chart", c.Type)
				}
			},
		},
		{
			name: "figure as the last expression",
			code: "import matplotlib.figure\nfig = matplotlib.figure.Figure()\nfig.add_subplot().plot([1, 2], [3, 4])\nfig",
			check: func(t *testing.T, r cellResult) {
				o := only(t, r, "execute_result")
				requirePNG(t, o)
				if c := chartOf(t, o, pointKeys); c.Type != "line" {
					t.Errorf("got %s chart", c.Type)
				}
			},
		},
		{
			name: "PIL image as the last expression",
			code: "from PIL import Image\nImage.new('RGB', (4, 4), 'red')",
			check: func(t *testing.T, r cellResult) {
				requirePNG(t, only(t, r, "execute_result"))
			},
		},
		{
			name: "PIL image show",
			code: "from PIL import Image\nImage.new('RGB', (4, 4), 'red').show()",
			check: func(t *testing.T, r cellResult) {
				requirePNG(t, only(t, r, "display_data"))
			},
		},
		{
			name: "PIL image save",
			code: "from PIL import Image\nImage.new('RGB', (4, 4), 'red').save('red.png')",
			check: func(t *testing.T, r cellResult) {
				requirePNG(t, only(t, r, "display_data"))
			},
		},
	}

	cells := make([]cell, len(tests))
	for i, tt := range tests {
		cells[i] = cell{Name: tt.name, Code: tt.code}
	}
	res := runKernel(t, cells, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := res.Cells[tt.name]
			if !ok {
				t.Fatal("cell did not run")
			}
			tt.check(t, r)
		})
	}
}

// TestStartupWithoutOptionalPackages checks that a kernel lacking pandas,
// matplotlib, numpy and PIL still starts, runs cells and has the formatters.
func TestStartupWithoutOptionalPackages(t *testing.T) {
	t.Parallel()
	requirePython(t)
	res := runKernel(t, []cell{
		{Name: "sum", Code: "1 + 1"},
		{Name: "formatters", Code: "print(sorted(k for k in get_ipython().display_formatter.formatters if k.startswith('e2b/')))"},
		{Name: "import", Code: "import pandas"},
	}, []string{"pandas", "matplotlib", "numpy", "PIL"})

	o := only(t, res.Cells["sum"], "execute_result")
	if got := string(o.Data["text/plain"]); got != `"2"` {
		t.Errorf("1 + 1 = %s", got)
	}
	if out := res.Cells["formatters"].Outputs; len(out) != 1 || out[0].Text != "['e2b/chart', 'e2b/data']\n" {
		t.Errorf("formatters: %v", summarize(out))
	}
	if out := res.Cells["import"].Outputs; len(out) != 1 || out[0].EName != "ModuleNotFoundError" {
		t.Errorf("import pandas: want ModuleNotFoundError (the test's block), got %v", summarize(out))
	}
}
