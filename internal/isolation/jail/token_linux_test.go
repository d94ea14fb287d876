package jail

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
)

// TestEnvdToken starts sandboxes whose envd has an access token from the
// start, with and without a user namespace: envd refuses a request
// without it, and no process in the sandbox finds the token in a command
// line or environment.
func TestEnvdToken(t *testing.T) {
	for _, mode := range []UsernsMode{UsernsOff, UsernsAuto} {
		t.Run(string(mode), func(t *testing.T) {
			b := newTestBackend(t, func(c *Config) { c.Userns = mode })
			if mode == UsernsAuto {
				requireUserns(t, b)
			}
			spec := testSpec(t, isolation.Resources{})
			spec.EnvdAccessToken = "tok-" + spec.ID + "-secret"
			inst := startSandbox(t, b, spec)
			hc := envdHTTPClient(inst)
			get := func(token string) int {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://envd/envs", nil)
				if token != "" {
					req.Header.Set("X-Access-Token", token)
				}
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatalf("GET /envs: %v", err)
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			if got := get(""); got != http.StatusUnauthorized {
				t.Errorf("GET /envs without the token: %d, want 401", got)
			}
			if got := get("wrong"); got != http.StatusUnauthorized {
				t.Errorf("GET /envs with a wrong token: %d, want 401", got)
			}
			if got := get(spec.EnvdAccessToken); got != http.StatusOK {
				t.Fatalf("GET /envs with the token: %d, want 200", got)
			}

			// Every process's command line and environment, as root in
			// the sandbox sees them; the control is envd's own flag.
			r := runWithToken(t, inst, spec.EnvdAccessToken, "/bin/sh", "-c",
				`for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; tr '\0' ' ' < $p/environ; echo; done 2>/dev/null`)
			if !strings.Contains(r.stdout, "/usr/bin/envd --addr 127.0.0.1:49983 --access-token-fd 3") {
				t.Fatalf("envd's command line not among what the sandbox reads (the probe read nothing?):\n%s", r.stdout)
			}
			if strings.Contains(r.stdout, spec.EnvdAccessToken) {
				t.Errorf("the token is in a command line or environment in the sandbox:\n%s", r.stdout)
			}
		})
	}
}
