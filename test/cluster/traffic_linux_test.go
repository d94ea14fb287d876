package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// trafficDomain is the sandbox domain of the node and the replicas.
const trafficDomain = "cluster.test"

// upgradeServer answers any request with 101 (Upgrade: echo) and then
// echoes what it reads, upper-cased: a protocol upgrade as a WebSocket
// server makes one, without a WebSocket library in the sandbox.
const upgradeServer = `import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8001))
s.listen(8)
while True:
    c, _ = s.accept()
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = c.recv(4096)
        if not d:
            break
        buf += d
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
    while True:
        d = c.recv(4096)
        if not d:
            break
        c.sendall(d.upper())
    c.close()
`

// TestTrafficThroughReplicas runs a real node (`serve --cluster
// kubernetes`, jail backend, as the node role, a warm pool of one base
// member) and two real API replicas, all with the sandbox domain
// cluster.test, and reaches a sandbox only through the replicas, with the
// Go client: created through one, it is the node's warm member (the ID the
// node published, handed out from the pool; the node publishes its
// refill), and it runs
// a command (its output streamed) and writes and reads a file through that
// replica's endpoint (envd traffic, header routing: replica → node →
// sandbox, with the envd access token the node reported); connected
// through the other, the same there; a server in the sandbox answers
// through either by host routing (<port>-<id>.cluster.test), as does a
// protocol upgrade (101, then both ways); an unknown sandbox is 502 "not
// found" and a malformed host 400, in the router's words, and envd without
// the access token is refused (the node's rules apply); once killed, the
// sandbox is not found through the replicas either.
func TestTrafficThroughReplicas(t *testing.T) {
	testenv.RequireRoot(t)
	c := kubetest.Start(t)
	applyBase(t, c)
	const nodeName = "node-traffic"
	kubeconfig, err := c.KubeconfigAs(nodeAccount.user, nodeAccount.groups...)
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.New(t, "--backend", "jail", "--address-pool", "10.244.2.0/24", "--warm-pool", "base=1", "--domain", trafficDomain,
		"--cluster", "kubernetes", "--kubeconfig", kubeconfig, "--cluster-namespace", namespace, "--node-name", nodeName)
	srv.Start()
	defer srv.Stop()
	waitJoined(t, c, nodeName)
	bin := servertest.Build(t)
	one := startAPIReplica(t, c, bin, "--domain", trafficDomain)
	two := startAPIReplica(t, c, bin, "--domain", trafficDomain)
	rc := adminClient(t, c)
	ctx := t.Context()

	member := waitWarm(t, rc, nodeName, client.DefaultTemplate, "")
	cl1 := trafficClient(t, one)
	t0 := time.Now()
	sb, err := cl1.CreateSandbox(ctx, client.CreateOptions{Template: client.DefaultTemplate, Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatalf("creating a sandbox through replica %s: %v", one.url, err)
	}
	took := time.Since(t0)
	srv.Made = append(srv.Made, sb.ID)
	o := readSandbox(t, rc, sb.ID)
	t.Logf("sandbox %s created through %s in %s: on %s, %s, domain %s", sb.ID, one.url, took.Round(time.Millisecond), o.Spec.Node, o.Status.State, sb.Domain)
	if line := srv.LogLine("creating sandbox from the warm pool", sb.ID); sb.ID != member || !strings.Contains(line, sb.ID) {
		t.Errorf("sandbox %s: want the warm member %s the node published, handed out from its pool (the node's log: %q)", sb.ID, member, line)
	}
	t.Logf("the node's warm member %s handed out; the node published its refill %s", member, waitWarm(t, rc, nodeName, client.DefaultTemplate, member))
	if sb.EnvdAccessToken == "" || sb.EnvdAccessToken != o.Status.EnvdAccessToken || sb.Domain != trafficDomain {
		t.Errorf("create's envd token %q and domain %q; want the node's token (%q) and %s", sb.EnvdAccessToken, sb.Domain, o.Status.EnvdAccessToken, trafficDomain)
	}
	// The node runs it under the same ID, so its own API finds it too.
	if _, err := srv.Client().GetSandbox(ctx, sb.ID); err != nil {
		t.Errorf("the node's API: sandbox %s: %v", sb.ID, err)
	}

	envdThrough(t, sb, one.url, "one")

	// The other replica: connect (the token again), then the same.
	cl2 := trafficClient(t, two)
	sb2, err := cl2.Connect(ctx, sb.ID, client.ConnectOptions{Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatalf("connecting to %s through replica %s: %v", sb.ID, two.url, err)
	}
	if sb2.EnvdAccessToken != sb.EnvdAccessToken {
		t.Errorf("connect's envd token %q, want create's %q", sb2.EnvdAccessToken, sb.EnvdAccessToken)
	}
	envdThrough(t, sb2, two.url, "two")
	if info, err := cl2.GetSandbox(ctx, sb.ID); err != nil || info.State != client.StateRunning {
		t.Errorf("GET %s through replica two: %+v, %v", sb.ID, info, err)
	}

	// Servers in the sandbox, by host routing through either replica.
	if err := sb.WriteFile(ctx, "/home/user/site/index.txt", []byte("served from "+sb.ID), client.FileOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sb.WriteFile(ctx, "/home/user/upgrade.py", []byte(upgradeServer), client.FileOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"python3 -m http.server 8000 --directory /home/user/site", "python3 /home/user/upgrade.py"} {
		if _, err := sb.Start(ctx, cmd, client.RunOptions{}); err != nil {
			t.Fatalf("starting %q: %v", cmd, err)
		}
	}
	for _, r := range []*apiReplica{one, two} {
		host := fmt.Sprintf("8000-%s.%s", sb.ID, trafficDomain)
		var status int
		var body string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			status, body = get(t, r.url+"/index.txt", host)
			if status == http.StatusOK || time.Now().After(deadline) {
				break
			}
		}
		if status != http.StatusOK || body != "served from "+sb.ID {
			t.Fatalf("GET http://%s/index.txt through %s: %d %q", host, r.url, status, body)
		}
		t.Logf("GET http://%s/index.txt through %s: %d %q", host, r.url, status, body)

		upHost := fmt.Sprintf("8001-%s.%s", sb.ID, trafficDomain)
		var echoed string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if echoed, err = upgradeEcho(t, r.url, upHost, "through "+r.url); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || echoed != strings.ToUpper("through "+r.url) {
			t.Fatalf("upgrade at %s through %s: %q, %v", upHost, r.url, echoed, err)
		}
		t.Logf("upgrade at %s through %s: 101, echoed %q", upHost, r.url, echoed)
	}

	// The node's token rules apply to what a replica forwards: envd
	// without the access token is refused.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, one.url+"/files?path=/home/user/through-one.txt", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", sb.ID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	noToken, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("envd through a replica without the access token: %s %s, want 401", resp.Status, noToken)
	}
	t.Logf("envd through a replica without the access token: %s %s", resp.Status, strings.TrimSpace(string(noToken)))

	// The router's answers for what it cannot reach.
	for _, tc := range []struct{ host, want string }{
		{"8000-inosuchsandbox.cluster.test", `"message":"The sandbox was not found"`},
		{"8000.cluster.test", `"code":400`},
	} {
		status, body := get(t, one.url+"/", tc.host)
		if !strings.Contains(body, tc.want) {
			t.Errorf("GET http://%s/ through %s: %d %s, want %s", tc.host, one.url, status, body, tc.want)
		}
		t.Logf("GET http://%s/ through a replica: %d %s", tc.host, status, strings.TrimSpace(body))
	}

	// Killed: once the kill answers, gone from the node, and not found
	// through the replicas.
	if err := cl2.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	checkGoneOnNode(t, srv, sb.ID)
	status, body := get(t, one.url+"/index.txt", fmt.Sprintf("8000-%s.%s", sb.ID, trafficDomain))
	if status != http.StatusBadGateway || !strings.Contains(body, "The sandbox was not found") {
		t.Fatalf("right after the kill, through %s: %d %s, want 502 not found", one.url, status, body)
	}
	t.Logf("right after the kill, through %s: %d %s", one.url, status, strings.TrimSpace(body))

	// Cordoned (kubectl cordon, as drain does first), the node takes no
	// new sandbox; uncordoned, it does again.
	took = cordon(t, c, nodeName, true, 2*node.DefaultRenewInterval)
	_, err = cl1.CreateSandbox(ctx, client.CreateOptions{Template: client.DefaultTemplate, Timeout: time.Minute})
	t.Logf("cordoned (published %s after kubectl cordon): create through %s: %v", took.Round(time.Millisecond), one.url, err)
	if err == nil || !strings.Contains(err.Error(), "cordoned") {
		t.Fatalf("a create with the only node cordoned: %v, want refused, naming the cordon", err)
	}
	took = cordon(t, c, nodeName, false, 2*node.DefaultRenewInterval)
	again, err := cl1.CreateSandbox(ctx, client.CreateOptions{Template: client.DefaultTemplate, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("a create once uncordoned (published %s after kubectl uncordon): %v", took.Round(time.Millisecond), err)
	}
	srv.Made = append(srv.Made, again.ID)
	t.Logf("uncordoned (published %s after kubectl uncordon): sandbox %s created through %s", took.Round(time.Millisecond), again.ID, one.url)
	if err := cl1.KillSandbox(ctx, again.ID); err != nil {
		t.Fatal(err)
	}
}

// waitWarm waits until node publishes a warm member of template other
// than not, and returns its ID.
func waitWarm(t *testing.T, rc *rest.RESTClient, nodeName, template, not string) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var n v1alpha1.SandboxNode
		if err := rc.Get().Namespace(namespace).Resource(v1alpha1.SandboxNodeResource).Name(nodeName).Do(t.Context()).Into(&n); err != nil {
			t.Fatalf("reading SandboxNode %s: %v", nodeName, err)
		}
		if ids := n.Status.Warm[template]; len(ids) > 0 && ids[0] != not {
			return ids[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("SandboxNode %s publishes no warm member of %s but %q after a minute: status.warm %v", nodeName, template, not, n.Status.Warm)
		}
	}
}

// checkGoneOnNode checks that the node's own API no longer has sandbox
// id, as a replica's kill has answered: the replica waits for the node to
// kill it (the node's finalizer).
func checkGoneOnNode(t *testing.T, srv *servertest.Server, id string) {
	t.Helper()
	if _, err := srv.Client().GetSandbox(t.Context(), id); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("sandbox %s killed through a replica, yet its node's GET /sandboxes/%s: %v, want not found", id, id, err)
	}
}

// trafficClient is a client of replica r for the API and for envd
// (header routing on the replica's address), in the sandbox domain.
func trafficClient(t *testing.T, r *apiReplica) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{APIURL: r.url, SandboxURL: r.url, Domain: trafficDomain, APIKey: testAPIKey})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// envdThrough runs a command in sb (its output streamed back) and writes
// and reads a file, sb's client sending envd traffic to the replica at
// url.
func envdThrough(t *testing.T, sb *client.Sandbox, url, name string) {
	t.Helper()
	ctx := t.Context()
	if sb.EnvdURL() != url {
		t.Fatalf("envd URL %s, want the replica's %s", sb.EnvdURL(), url)
	}
	var out bytes.Buffer
	code, err := sb.Run(ctx, "for i in 1 2 3; do echo line $i; done; cat /proc/sys/kernel/hostname", client.RunOptions{Stdout: &out})
	if err != nil || code != 0 {
		t.Fatalf("run through replica %s: exit %d, %v: %s", name, code, err, out.String())
	}
	if want := "line 1\nline 2\nline 3\n" + sb.ID + "\n"; out.String() != want {
		t.Errorf("run through replica %s: %q, want %q", name, out.String(), want)
	}
	path := "/home/user/through-" + name + ".txt"
	data := []byte("written through replica " + name)
	if err := sb.WriteFile(ctx, path, data, client.FileOptions{}); err != nil {
		t.Fatalf("writing %s through replica %s: %v", path, name, err)
	}
	got, err := sb.ReadFile(ctx, path, client.FileOptions{})
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading %s through replica %s: %q, %v", path, name, got, err)
	}
	t.Logf("through replica %s (%s): ran a command (%q), wrote and read %s", name, url, strings.TrimSpace(out.String()), path)
}

// get sends GET url with Host host and returns the status and body.
func get(t *testing.T, url, host string) (int, string) {
	t.Helper()
	return getWith(t, url, host, "")
}

// upgradeEcho asks for Upgrade: echo at host through the replica at url,
// sends msg over the upgraded connection and returns what came back.
func upgradeEcho(t *testing.T, url, host, msg string) (string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	rw, ok := resp.Body.(io.ReadWriter)
	if !ok {
		t.Fatalf("a 101's body is a %T, not writable", resp.Body)
	}
	if _, err := io.WriteString(rw, msg); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(rw, buf); err != nil {
		return "", err
	}
	return string(buf), nil
}
