package cluster

import (
	"bufio"
	"bytes"
	"encoding/json"
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
	// host ranges (the stand-in hosts share userns/) must not overlap.
	// The ranges are of one size and aligned (idmap), so distinct starts
	// do not overlap.
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
	sdkOps(t, sdkDir, two, "kill", ids...)
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
}

// sdkOps runs cluster-ops.mjs (the official SDK) operation op with args
// against replica r, header routing, and returns what it printed.
func sdkOps(t *testing.T, sdkDir string, r *apiReplica, op string, args ...string) []sdkResult {
	t.Helper()
	args = append([]string{op}, args...)
	cmd := exec.CommandContext(t.Context(), "node", append([]string{"cluster-ops.mjs"}, args...)...)
	cmd.Dir = sdkDir
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "E2B_") })
	cmd.Env = append(cmd.Env, "E2B_API_URL="+r.url, "E2B_SANDBOX_URL="+r.url, "E2B_DOMAIN="+trafficDomain, "E2B_API_KEY="+testAPIKey)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the SDK (cluster-ops.mjs %s) through %s: %v\n%s%s", strings.Join(args, " "), r.url, err, out, stderr.Bytes())
	}
	var res []sdkResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r sdkResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("cluster-ops.mjs printed %q: %v", sc.Text(), err)
		}
		res = append(res, r)
	}
	return res
}
