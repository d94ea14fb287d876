package egress

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/testenv/inet"
)

// capMbit is the bandwidth cap under test, each way.
const capMbit = 10

// testBandwidth shows a 10 Mbit/s cap, set by the create request, holds
// within ±20% both ways for transfers to and from the test Internet
// (through the egress proxy, which the cap covers like forwarded traffic).
func testBandwidth(t *testing.T, h *harness) {
	sb := h.create(fmt.Sprintf(`{"bandwidth":{"downMbit":%d,"upMbit":%d}}`, capMbit, capMbit), nil)
	const bytes = capMbit * 1e6 / 8 * 4 // about 4 s at the cap
	for _, dir := range []struct {
		name string
		args []string
	}{
		{"download", []string{"download", fmt.Sprintf("http://allowed.test/bytes?n=%d", int(bytes))}},
		{"upload", []string{"upload", "http://allowed.test/sink", strconv.Itoa(int(bytes))}},
	} {
		n, secs := transfer(t, h.probe(sb, dir.args...))
		mbit := n * 8 / secs / 1e6
		t.Logf("%s of %.0f bytes with a %d Mbit/s cap: %.2f Mbit/s in %.2f s", dir.name, n, capMbit, mbit, secs)
		if math.Abs(mbit-capMbit)/capMbit > 0.2 {
			t.Errorf("%s: %.2f Mbit/s, want %d ±20%%", dir.name, mbit, capMbit)
		}
	}
}

// transfer parses "ok BYTES SECONDS".
func transfer(t *testing.T, line string) (n, secs float64) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "ok" {
		t.Fatalf("transfer failed: %s", line)
	}
	n, err1 := strconv.ParseFloat(f[1], 64)
	secs, err2 := strconv.ParseFloat(f[2], 64)
	if err1 != nil || err2 != nil || secs <= 0 {
		t.Fatalf("transfer printed %q", line)
	}
	return n, secs
}

// testFigures measures, from one sandbox in one run, HTTP request time on a
// fresh connection through the egress proxy (port 80, by name) and direct to
// an address a CIDR rule allows (port 8080, forwarded), and the proxy's
// download throughput. They are figures, not pass/fail: machines differ.
func testFigures(t *testing.T, h *harness) {
	sb := h.create(`{"allowOut":["198.18.2.0/24","direct.test"]}`, nil)
	const n = 200
	p50 := func(url string) float64 {
		line := h.probe(sb, "connect-times", strconv.Itoa(n), url)
		f := strings.Fields(line)
		if len(f) != n+1 || f[0] != "ok" {
			t.Fatalf("connect-times %s: %s", url, line)
		}
		var vals []float64
		for _, s := range f[1:] {
			v, _ := strconv.ParseFloat(s, 64)
			vals = append(vals, v)
		}
		return ms(vals)
	}
	direct := p50(fmt.Sprintf("http://%s/", ap(directIP, inet.AltHTTPPort)))
	proxied := p50("http://direct.test/")
	t.Logf("FIGURE connection set-up + GET, p50 of %d: direct %.3f ms, through the egress proxy %.3f ms (%.2fx)", n, direct, proxied, proxied/direct)
	const size = 500_000_000
	rate := func(url string) float64 {
		bytes, secs := transfer(t, h.probe(sb, "download", url))
		return bytes / secs / 1e6
	}
	directRate := rate(fmt.Sprintf("http://%s/bytes?n=%d", ap(directIP, inet.AltHTTPPort), size))
	proxiedRate := rate(fmt.Sprintf("http://direct.test/bytes?n=%d", size))
	t.Logf("FIGURE download of %.0f MB: direct %.0f MB/s, through the egress proxy %.0f MB/s (%.2fx)", size/1e6, directRate, proxiedRate, proxiedRate/directRate)
}
