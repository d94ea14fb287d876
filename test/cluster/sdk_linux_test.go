package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/node"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv/servertest"
)

// TestSDKOnCluster runs three real node agents (`serve --cluster
// kubernetes`, jail backend, as the node role), each on a stand-in host of
// its own (standInHost: network and mount namespaces), and two real API
// replicas, and drives them with the official E2B SDK (test/sdk's e2b
// package, test/sdk/cluster-ops.mjs) through the replicas alone, header
// routing: three creates through one replica land one on each node
// (printed from the Sandbox objects' spec.node), each runs a command and
// writes and reads a file; through the other replica, connect to each, run
// a command and read the file back, then kill each, after which no node
// holds a sandbox.
func TestSDKOnCluster(t *testing.T) {
	testenv.RequireRoot(t)
	sdkDir, err := filepath.Abs("../sdk")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "e2b")); err != nil {
		t.Fatalf("the official SDK is not installed (run npm ci in test/sdk): %v", err)
	}
	c := kubetest.Start(t)
	applyBase(t, c)
	kubeconfig, err := c.KubeconfigAs(nodeAccount.user, nodeAccount.groups...)
	if err != nil {
		t.Fatal(err)
	}
	apiServer, err := url.Parse(c.Admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"node-a", "node-b", "node-c"}
	nodes := map[string]*servertest.Server{}
	for i, name := range names {
		h := newStandInHost(t, i)
		h.relay(t, apiServer.Host)
		srv := h.node(t, "--backend", "jail", "--warm-pool", "none", "--domain", trafficDomain, "--max-sandboxes", "4",
			"--cluster", "kubernetes", "--kubeconfig", kubeconfig, "--cluster-namespace", namespace, "--node-name", name)
		srv.Start()
		defer srv.Stop()
		nodes[name] = srv
	}
	waitJoined(t, c, names...)
	bin := servertest.Build(t)
	one := startAPIReplica(t, c, bin, "--domain", trafficDomain)
	two := startAPIReplica(t, c, bin, "--domain", trafficDomain)
	rc, err := v1alpha1.NewClient(c.Admin)
	if err != nil {
		t.Fatal(err)
	}

	created := sdkOps(t, sdkDir, one, "create", "3")
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
	if len(landed) != len(names) {
		t.Errorf("the sandboxes landed on %v, want one on each of %v", landed, names)
	}
	for _, r := range sdkOps(t, sdkDir, two, "connect", ids...) {
		t.Logf("sandbox %s connected through %s: %q", r.ID, two.url, r.Stdout)
	}

	// An API replica killed mid-run: the SDK, through a front that passes
	// connections to either replica (as the replicas' Service does), goes
	// on through the other, with no error beyond a retried request.
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	forward(t, front, strings.TrimPrefix(one.url, "http://"), strings.TrimPrefix(two.url, "http://"))
	frontURL := "http://" + front.Addr().String()
	loop := startSDK(t, sdkDir, frontURL, "loop", "8")
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
	for _, r := range sdkOps(t, sdkDir, two, "create", "2") {
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
	sdkOps(t, sdkDir, two, "kill", live...)
	for _, name := range names {
		var left []client.SandboxInfo
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
func sdkOps(t *testing.T, sdkDir string, r *apiReplica, op string, args ...string) []sdkResult {
	t.Helper()
	p := startSDK(t, sdkDir, r.url, op, args...)
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
func startSDK(t *testing.T, sdkDir, url, op string, args ...string) *sdkProcess {
	t.Helper()
	p := &sdkProcess{t: t}
	p.cmd = exec.CommandContext(t.Context(), "node", append([]string{"cluster-ops.mjs", op}, args...)...)
	p.cmd.Dir = sdkDir
	p.cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "E2B_") })
	p.cmd.Env = append(p.cmd.Env, "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_DOMAIN="+trafficDomain, "E2B_API_KEY="+testAPIKey)
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
