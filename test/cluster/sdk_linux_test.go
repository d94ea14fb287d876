package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// sdkCluster is a cluster for the official SDK: three real node agents
// (`serve --cluster kubernetes`, jail backend, as the node role), each on
// a stand-in host of its own (standInHost: network and mount namespaces),
// two real API replicas, and a front that passes each connection to
// either replica (as their Service would), all with the domain
// localhost:<the front's port>, which the SDK's getHost names and
// test/sdk's dns-preload resolves to the loopback.
type sdkCluster struct {
	sdkDir   string // test/sdk, with the SDK in node_modules
	names    []string
	nodes    map[string]*servertest.Server
	one, two *apiReplica
	front    string // the front's URL
	domain   string
	rc       *rest.RESTClient // the admin's
}

// startSDKCluster starts an sdkCluster on a new API server; what the
// tests leave running is killed through the front when they end.
func startSDKCluster(t *testing.T) *sdkCluster {
	t.Helper()
	testenv.RequireRoot(t)
	sdkDir, err := filepath.Abs("../sdk")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "e2b")); err != nil {
		t.Fatalf("the official SDK is not installed (make deps-test, or npm ci in test/sdk): %v", err)
	}
	c, hosts, kubeconfig := standInCluster(t, 3)
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc := &sdkCluster{sdkDir: sdkDir, names: []string{"node-a", "node-b", "node-c"}, nodes: map[string]*servertest.Server{},
		front: "http://" + front.Addr().String(), domain: fmt.Sprintf("localhost:%d", front.Addr().(*net.TCPAddr).Port)}
	for i, name := range sc.names {
		sc.nodes[name] = hosts[i].agent(t, name, kubeconfig, "--warm-pool", "none", "--domain", sc.domain, "--max-sandboxes", "6")
	}
	waitJoined(t, c, sc.names...)
	bin := servertest.Build(t)
	sc.one = startAPIReplica(t, c, bin, "--domain", sc.domain)
	sc.two = startAPIReplica(t, c, bin, "--domain", sc.domain)
	forward(t, front, strings.TrimPrefix(sc.one.url, "http://"), strings.TrimPrefix(sc.two.url, "http://"))
	sc.rc = adminClient(t, c)
	t.Cleanup(func() {
		cl, err := client.New(client.Config{APIURL: sc.front, APIKey: testAPIKey})
		if err != nil {
			t.Error(err)
			return
		}
		ctx := context.WithoutCancel(t.Context())
		left, _, err := cl.ListSandboxes(ctx, client.ListOptions{})
		if err != nil {
			t.Errorf("cleaning up: listing the cluster's sandboxes: %v", err)
		}
		for _, sb := range left {
			if err := cl.KillSandbox(ctx, sb.ID); err != nil {
				t.Errorf("cleaning up: killing %s: %v", sb.ID, err)
			}
		}
	})
	return sc
}

// TestSDKOnCluster drives an sdkCluster with the official E2B SDK
// (test/sdk/cluster-ops.mjs) through the replicas alone, header routing:
// three creates through one replica land one on each node (printed from
// the Sandbox objects' spec.node), each runs a command and writes and
// reads a file, its user namespace a host range of its own; through the
// other replica, connect to each, run a command and read the file back.
// Then an API replica is killed with SIGKILL while the SDK runs through
// the front (at most one request retried), and a node agent is killed
// with SIGKILL: its sandbox is Lost, with the reason, within the Lease's
// duration, new creates land on the other nodes, and the node, started
// again, kills its local sandbox; after the kills no node holds a
// sandbox.
func TestSDKOnCluster(t *testing.T) {
	c := startSDKCluster(t)
	nodes, one, two, rc := c.nodes, c.one, c.two, c.rc

	created := sdkOps(t, c, one, "create", "3")
	var ids []string
	landed := map[string]bool{}
	for _, r := range created {
		o := readSandbox(t, rc, r.ID)
		nodes[o.Spec.Node].Made = append(nodes[o.Spec.Node].Made, r.ID)
		ids = append(ids, r.ID)
		landed[o.Spec.Node] = true
		t.Logf("sandbox %s landed on %s (%s; create %d ms through %s): %q, uid_map %q", r.ID, o.Spec.Node, o.Status.State, r.CreateMs, one.url, r.Stdout, r.UIDMap)
	}
	// Every node's sandboxes run on this one kernel: their user namespaces'
	// host ranges (the stand-in hosts share userns/) must not overlap. The
	// ranges are of one size and aligned (idmap), so distinct starts do
	// not overlap.
	ranges := map[string]string{}
	for _, r := range created {
		f := strings.Fields(r.UIDMap)
		if len(f) != 3 || f[0] != "0" || f[1] == "0" {
			t.Errorf("sandbox %s: uid_map %q, want root mapped onto a host range of its own", r.ID, r.UIDMap)
			continue
		}
		if other, ok := ranges[f[1]]; ok {
			t.Errorf("sandboxes %s and %s both map root onto host uid %s", other, r.ID, f[1])
		}
		ranges[f[1]] = r.ID
	}
	if len(landed) != len(c.names) {
		t.Errorf("the sandboxes landed on %v, want one on each of %v", landed, c.names)
	}
	for _, r := range sdkOps(t, c, two, "connect", ids...) {
		t.Logf("sandbox %s connected through %s: %q", r.ID, two.url, r.Stdout)
	}

	// An API replica killed mid-run: the SDK, through a front that passes
	// connections to either replica (as the replicas' Service does), goes
	// on through the other, with no error beyond a retried request.
	frontURL := c.front
	loop := startSDK(t, c, frontURL, "loop", "8")
	started := loop.line()
	time.Sleep(time.Second)
	one.kill()
	t.Logf("replica %s killed (SIGKILL) while the SDK ran sandbox %s through %s", one.url, started.ID, frontURL)
	ended := loop.line()
	loop.wait()
	t.Logf("the SDK's run through %s: %d rounds of commands.run, files.write and files.read, then kill; retried: %q", frontURL, ended.Ops, ended.Retries)
	if ended.Ops == 0 || len(ended.Retries) > 1 {
		t.Errorf("the SDK's run: %d rounds, %d retried requests; want some rounds and at most one retry", ended.Ops, len(ended.Retries))
	}

	// A node agent killed: its sandbox is Lost, with the reason, within
	// the Lease's duration (after the other replica has taken the lead,
	// 15 s after the first's death), and new creates land on the others.
	const dead = "node-c"
	var lost string
	var live []string
	for _, id := range ids {
		if readSandbox(t, rc, id).Spec.Node == dead {
			lost = id
		} else {
			live = append(live, id)
		}
	}
	nodes[dead].Kill9()
	o, took := waitState(t, rc, lost, v1alpha1.SandboxLost, node.DefaultLeaseDuration+10*time.Second)
	t.Logf("node agent %s killed (SIGKILL): its sandbox %s %s %s after, reason %q", dead, lost, o.Status.State, took.Round(time.Millisecond), o.Status.Reason)
	if took > node.DefaultLeaseDuration+2*time.Second || !strings.Contains(o.Status.Reason, "lease expired") {
		t.Errorf("sandbox %s Lost %s after its node's death with reason %q; want within the Lease's %s, the reason naming the expired lease", lost, took, o.Status.Reason, node.DefaultLeaseDuration)
	}
	for _, r := range sdkOps(t, c, two, "create", "2") {
		o := readSandbox(t, rc, r.ID)
		nodes[o.Spec.Node].Made = append(nodes[o.Spec.Node].Made, r.ID)
		live = append(live, r.ID)
		t.Logf("sandbox %s created through %s with %s dead: on %s", r.ID, two.url, dead, o.Spec.Node)
		if o.Spec.Node == dead {
			t.Errorf("sandbox %s placed on the dead node %s", r.ID, dead)
		}
	}
	// Back, the node kills the local sandbox of the object marked Lost.
	nodes[dead].Start()
	sdkOps(t, c, two, "kill", live...)
	for _, name := range c.names {
		var left []client.SandboxInfo
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if left, _, err = nodes[name].Client().ListSandboxes(t.Context(), client.ListOptions{}); err != nil {
				t.Fatalf("listing node %s's sandboxes: %v", name, err)
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(left) > 0 {
			t.Errorf("node %s still holds %d sandboxes 10 s after the kills", name, len(left))
		}
	}
}

// env is the environment of an SDK process with API and sandbox URL url
// (header routing), as test/sdk/run.mjs sets it for a single host.
func (c *sdkCluster) env(url string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "E2B_") || strings.HasPrefix(kv, "SDK_TEST_")
	})
	return append(env, "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_DOMAIN="+c.domain, "E2B_API_KEY="+testAPIKey)
}

// coreFiles are test/sdk's core server files, run.mjs's CORE_FILES: what
// every backend must pass.
var coreFiles = []string{"lifecycle", "router", "ports"}

// TestSDKCoreFilesOnCluster runs test/sdk's core server files with the
// official SDK against an sdkCluster, through the front to both replicas,
// header routing, as run.mjs runs them against a single host (three files
// at a time, sandboxes tagged with the run's metadata).
func TestSDKCoreFilesOnCluster(t *testing.T) {
	c := startSDKCluster(t)
	args := []string{"--import=./dns-preload.mjs", "--test", "--test-concurrency=3"}
	for _, f := range coreFiles {
		args = append(args, "server/"+f+".test.mjs")
	}
	cmd := exec.CommandContext(t.Context(), "node", args...)
	cmd.Dir = c.sdkDir
	cmd.Env = append(c.env(c.front), "SDK_TEST_MODE=header", "SDK_TEST_API_URL="+c.front, "SDK_TEST_RUN="+servertest.RandomHex(t, 6),
		"SDK_TEST_RESOLVE=localhost", "SDK_TEST_BACKEND=jail")
	out, err := cmd.CombinedOutput()
	var summary []string
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "# tests") || strings.HasPrefix(line, "# pass") || strings.HasPrefix(line, "# fail") ||
			strings.Contains(line, "not ok") || strings.Contains(line, "error: '") {
			summary = append(summary, strings.TrimRight(line, "\n"))
		}
	}
	t.Logf("node %s through %s:\n%s", strings.Join(args, " "), c.front, strings.Join(summary, "\n"))
	if err != nil {
		t.Errorf("the core files: %v\n%s", err, servertest.Tail(out, 32<<10))
	}
}

// sdkResult is a line cluster-ops.mjs prints.
type sdkResult struct {
	ID       string `json:"id"`
	CreateMs int    `json:"createMs"`
	Stdout   string `json:"stdout"`
	UIDMap   string `json:"uidMap"` // envd's: "inside outside count"
	// loop's
	Ops     int      `json:"ops"`
	Retries []string `json:"retries"`
}

// sdkOps runs cluster-ops.mjs (the official SDK) operation op with args
// against replica r, header routing, and returns what it printed.
func sdkOps(t *testing.T, c *sdkCluster, r *apiReplica, op string, args ...string) []sdkResult {
	t.Helper()
	p := startSDK(t, c, r.url, op, args...)
	p.wait()
	var res []sdkResult
	sc := bufio.NewScanner(bytes.NewReader(p.stdout.Bytes()))
	for sc.Scan() {
		res = append(res, p.parse(sc.Bytes()))
	}
	return res
}

// sdkProcess is a run of cluster-ops.mjs.
type sdkProcess struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  *bufio.Scanner // of stdout, for line
	stdout bytes.Buffer   // what line read, then the rest, for wait
	stderr bytes.Buffer
}

// startSDK starts cluster-ops.mjs operation op with args, the SDK's API
// and sandbox URL url (header routing).
func startSDK(t *testing.T, c *sdkCluster, url, op string, args ...string) *sdkProcess {
	t.Helper()
	p := &sdkProcess{t: t}
	p.cmd = exec.CommandContext(t.Context(), "node", append([]string{"cluster-ops.mjs", op}, args...)...)
	p.cmd.Dir = c.sdkDir
	p.cmd.Env = c.env(url)
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting the SDK (cluster-ops.mjs %s): %v", op, err)
	}
	p.lines = bufio.NewScanner(io.TeeReader(out, &p.stdout))
	return p
}

// line waits for the next line the SDK prints.
func (p *sdkProcess) line() sdkResult {
	p.t.Helper()
	if !p.lines.Scan() {
		p.wait()
		p.t.Fatalf("%s printed no more lines", p.cmd)
	}
	return p.parse(p.lines.Bytes())
}

// wait waits for the SDK's exit, which must be a success.
func (p *sdkProcess) wait() {
	p.t.Helper()
	for p.lines.Scan() { // the rest, into stdout
	}
	if err := p.cmd.Wait(); err != nil {
		p.t.Fatalf("the SDK (%s): %v\n%s%s", p.cmd, err, p.stdout.Bytes(), p.stderr.Bytes())
	}
}

func (p *sdkProcess) parse(line []byte) sdkResult {
	p.t.Helper()
	var r sdkResult
	if err := json.Unmarshal(line, &r); err != nil {
		p.t.Fatalf("cluster-ops.mjs printed %q: %v", line, err)
	}
	return r
}
