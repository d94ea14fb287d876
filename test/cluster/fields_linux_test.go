package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// hostEcho answers every GET with the Host header it got.
const hostEcho = `from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        b = self.headers.get("Host", "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
HTTPServer(("0.0.0.0", 8000), H).serve_forever()
`

// TestCreateFieldsThroughReplicas runs a real node (`serve --cluster
// kubernetes`, jail backend, --max-timeout 1h) and a real API replica, and
// creates through the replica with the fields the Sandbox object carries:
// env vars reach the sandbox's processes; a network config with
// allowPublicTraffic false and maskRequestHost gets the node's traffic
// token back, its port answers 403 without it and with the masked Host
// with it. A request no node takes is the single host's 400 with no
// object written (a malformed allowOut, autoPause, volumeMounts); one the
// node refuses (a timeout beyond its limit) is 400 in the node's words,
// its object deleted.
func TestCreateFieldsThroughReplicas(t *testing.T) {
	testenv.RequireRoot(t)
	c := kubetest.Start(t)
	applyBase(t, c)
	const nodeName = "node-fields"
	kubeconfig, err := c.KubeconfigAs(nodeAccount.user, nodeAccount.groups...)
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.New(t, "--backend", "jail", "--address-pool", "10.244.3.0/24", "--warm-pool", "none", "--domain", trafficDomain,
		"--max-timeout", "1h", "--cluster", "kubernetes", "--kubeconfig", kubeconfig, "--cluster-namespace", namespace, "--node-name", nodeName)
	srv.Start()
	defer srv.Stop()
	waitJoined(t, c, nodeName)
	replica := startAPIReplica(t, c, servertest.Build(t), "--domain", trafficDomain)
	rc := adminClient(t, c)
	ctx := t.Context()
	tag := servertest.RandomHex(t, 6)

	status, body := postCreate(t, replica, map[string]any{
		"templateID": client.DefaultTemplate, "timeout": 300,
		"envVars": map[string]string{"CLUSTER_VAR": "value-" + tag},
		"network": map[string]any{"allowPublicTraffic": false, "maskRequestHost": "localhost:${PORT}"},
	})
	if status != http.StatusCreated {
		t.Fatalf("create with envVars and network through the replica: %d %s", status, body)
	}
	var created struct {
		SandboxID          string `json:"sandboxID"`
		EnvdAccessToken    string `json:"envdAccessToken"`
		TrafficAccessToken string `json:"trafficAccessToken"`
	}
	if err := json.Unmarshal(body, &created); err != nil {
		t.Fatalf("create's answer %s: %v", body, err)
	}
	id := created.SandboxID
	srv.Made = append(srv.Made, id)
	o := readSandbox(t, rc, id)
	t.Logf("Sandbox %s: spec envVars %v, network %s; status %s, traffic token set: %t", id, o.Spec.EnvVars, o.Spec.Network, o.Status.State, created.TrafficAccessToken != "")
	if created.TrafficAccessToken == "" || created.TrafficAccessToken != o.Status.TrafficAccessToken {
		t.Fatalf("create's traffic token %q, want the node's (%q), not empty", created.TrafficAccessToken, o.Status.TrafficAccessToken)
	}

	sb, err := trafficClient(t, replica).Connect(ctx, id, client.ConnectOptions{Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatalf("connecting to %s: %v", id, err)
	}
	var out bytes.Buffer
	if code, err := sb.Run(ctx, `echo "$CLUSTER_VAR"`, client.RunOptions{Stdout: &out}); err != nil || code != 0 {
		t.Fatalf("run: exit %d, %v: %s", code, err, out.String())
	}
	if got := strings.TrimSpace(out.String()); got != "value-"+tag {
		t.Errorf("$CLUSTER_VAR in the sandbox: %q, want %q", got, "value-"+tag)
	}
	t.Logf("$CLUSTER_VAR in the sandbox: %s", strings.TrimSpace(out.String()))

	if err := sb.WriteFile(ctx, "/home/user/host.py", []byte(hostEcho), client.FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Start(ctx, "python3 /home/user/host.py", client.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("8000-%s.%s", id, trafficDomain)
	var got string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		status, got = getWith(t, replica.url+"/", host, created.TrafficAccessToken)
		if status == http.StatusOK || time.Now().After(deadline) {
			break
		}
	}
	if status != http.StatusOK || got != "localhost:8000" {
		t.Fatalf("GET http://%s/ with the traffic token: %d %q, want 200 and the masked host localhost:8000", host, status, got)
	}
	t.Logf("GET http://%s/ with the traffic token: %d, the sandbox saw Host %q", host, status, got)
	status, got = getWith(t, replica.url+"/", host, "")
	if status != http.StatusForbidden || !strings.Contains(got, "missing traffic access token") {
		t.Errorf("GET http://%s/ without the traffic token: %d %s, want 403", host, status, got)
	}
	t.Logf("GET http://%s/ without the traffic token: %d %s", host, status, strings.TrimSpace(got))

	// Refused by the replica, in the single host's words, before any write.
	before := countSandboxes(t, rc)
	for _, tc := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"a malformed allowOut", map[string]any{"network": map[string]any{"allowOut": []string{"not a host!"}}}, "network.allowOut"},
		{"autoPause", map[string]any{"autoPause": true}, "autoPause is not supported in cluster mode yet"},
		{"volumeMounts", map[string]any{"volumeMounts": []map[string]string{{"name": "v", "path": "/data"}}}, "volumeMounts are not supported in cluster mode yet"},
	} {
		tc.body["templateID"] = client.DefaultTemplate
		status, body := postCreate(t, replica, tc.body)
		if status != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
			t.Errorf("create with %s: %d %s, want 400 saying %q", tc.name, status, body, tc.want)
		}
		t.Logf("create with %s: %d %s", tc.name, status, bytes.TrimSpace(body))
	}
	if n := countSandboxes(t, rc); n != before {
		t.Errorf("%d Sandbox objects after the refused creates, want %d", n, before)
	}

	// Refused by the node: its Error's class makes it the client's 400.
	status, body = postCreate(t, replica, map[string]any{"templateID": client.DefaultTemplate, "timeout": 2 * 3600})
	if status != http.StatusBadRequest || !strings.Contains(string(body), "Timeout cannot be greater than 1 hours") {
		t.Errorf("create with a timeout beyond the node's limit: %d %s, want 400 in the node's words", status, body)
	}
	t.Logf("create with a timeout beyond the node's limit: %d %s", status, bytes.TrimSpace(body))
	for deadline := time.Now().Add(10 * time.Second); countSandboxes(t, rc) != before; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the refused create's object still there 10 s later")
		}
	}

	if err := trafficClient(t, replica).KillSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	checkGoneOnNode(t, srv, id)
}

// postCreate sends POST /sandboxes with body to replica r and returns the
// status and body of the answer.
func postCreate(t *testing.T, r *apiReplica, body map[string]any) (int, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.url+"/sandboxes", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", testAPIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s/sandboxes: %v", r.url, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// getWith sends GET url with Host host and, unless empty, the traffic
// access token.
func getWith(t *testing.T, url, host, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if token != "" {
		req.Header.Set("E2b-Traffic-Access-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", url, host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
