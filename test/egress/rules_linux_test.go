package egress

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/egress"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
)

// testHeaderRules shows network.rules at work: the egress proxy sets a
// header on the sandbox's requests to the rule's name, over HTTP and over
// HTTPS (terminating TLS with the sandbox's own CA, which the sandbox
// trusts, and verifying the test Internet's certificate itself), while
// the value is nowhere in the sandbox; other names stay a blind
// pass-through. The test Internet answers a digest of the header, so the
// value does not come back into the sandbox either.
func testHeaderRules(t *testing.T, h *harness) {
	secret, control := "asb-secret-"+randomHex(t), "asb-control-"+randomHex(t)
	digest := fmt.Sprintf("sha256=%x", sha256.Sum256([]byte(secret)))
	rules := func(value string) []byte {
		return fmt.Appendf(nil, `{"allowed.test":[{"transform":{"headers":{"X-Api-Key":%q}}}]}`, value)
	}
	network := fmt.Sprintf(`{"allowOut":["extra.test"],"rules":%s}`, rules(secret))
	sb := h.createReq(sandbox.CreateRequest{Network: []byte(network), EnvVars: map[string]string{"ASB_CONTROL": control}})
	intercepted := func(port uint16) func(egress.Event) bool {
		return func(e egress.Event) bool {
			return proxyEvent("allowed.test", allowedIP, true)(e) && e.Port == port && strings.HasSuffix(e.Rule, " + rules:allowed.test")
		}
	}
	h.check(sb, []expect{
		{name: "the header reaches the HTTPS server", args: []string{"get", "https://allowed.test/digest?header=X-Api-Key"}, want: "ok " + digest,
			audit: intercepted(443)},
		{name: "... and the HTTP one", args: []string{"get", "http://allowed.test/digest?header=X-Api-Key"}, want: "ok " + digest,
			audit: intercepted(80)},
		{name: "the rest of the site is served as before", args: []string{"get", "https://allowed.test/"}, want: "ok site=allowed.test"},
		{name: "a name without rules gets no header, over blind TLS", args: []string{"get", "https://extra.test/digest?header=X-Api-Key"},
			want: `fail status 404: no header "X-Api-Key"`,
			audit: func(e egress.Event) bool {
				return proxyEvent("extra.test", extraIP, true)(e) && e.Port == 443 && e.Rule == "allowOut:extra.test"
			}},
		{name: "the value is nowhere in the sandbox", args: []string{"absent", hex.EncodeToString([]byte(secret)), control}, want: "ok secret nowhere"},
	})

	// A live update replaces the value from the next connection on.
	next := "asb-next-" + randomHex(t)
	if err := h.m.UpdateNetwork(context.Background(), sb.ID, sandbox.NetworkUpdate{AllowOut: []string{"extra.test"}, Rules: rules(next)}); err != nil {
		t.Fatal(err)
	}
	h.check(sb, []expect{
		{name: "after PUT network", args: []string{"get", "https://allowed.test/digest?header=X-Api-Key"},
			want: fmt.Sprintf("ok sha256=%x", sha256.Sum256([]byte(next)))},
	})
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
