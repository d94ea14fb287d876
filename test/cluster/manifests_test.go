package cluster

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubetest"
	"github.com/agent-sandbox/agent-sandbox/internal/cluster/v1alpha1"
	"github.com/agent-sandbox/agent-sandbox/internal/testenv"
)

// namespace is the kustomize base's.
const namespace = "agent-sandbox"

// The roles' service accounts, as RBAC sees them.
var (
	nodeAccount = serviceAccount("agent-sandbox-node")
	apiAccount  = serviceAccount("agent-sandbox-api")
)

type account struct {
	user   string
	groups []string
}

func serviceAccount(name string) account {
	return account{
		user:   "system:serviceaccount:" + namespace + ":" + name,
		groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
}

func (a account) config(c *kubetest.Cluster) *rest.Config {
	return kubetest.As(c.Admin, a.user, a.groups...)
}

// kubectl runs kubectl on the test's API server and returns its output.
func kubectl(t *testing.T, c *kubetest.Cluster, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	testenv.Require(t, err == nil, "test needs kubectl (the Go machine image has it)")
	out, err := exec.Command(path, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// applyBase applies deploy/kubernetes server-side and waits for its CRDs.
func applyBase(t *testing.T, c *kubetest.Cluster) string {
	t.Helper()
	base, err := filepath.Abs("../../deploy/kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	out := kubectl(t, c, "apply", "--server-side", "--field-manager=agent-sandbox-test", "-k", base)
	kubectl(t, c, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/sandboxes.agent-sandbox.dev", "crd/sandboxnodes.agent-sandbox.dev")
	return out
}

func TestManifests(t *testing.T) {
	c := kubetest.Start(t)
	out := applyBase(t, c)
	t.Logf("kubectl apply --server-side -k deploy/kubernetes:\n%s", out)
	for _, want := range []string{
		"namespace/agent-sandbox serverside-applied",
		"customresourcedefinition.apiextensions.k8s.io/sandboxes.agent-sandbox.dev serverside-applied",
		"customresourcedefinition.apiextensions.k8s.io/sandboxnodes.agent-sandbox.dev serverside-applied",
		"role.rbac.authorization.k8s.io/agent-sandbox-node serverside-applied",
		"role.rbac.authorization.k8s.io/agent-sandbox-api serverside-applied",
		"clusterrole.rbac.authorization.k8s.io/agent-sandbox-node serverside-applied",
		"clusterrolebinding.rbac.authorization.k8s.io/agent-sandbox-node serverside-applied",
		"configmap/agent-sandbox serverside-applied",
		"daemonset.apps/agent-sandbox-node serverside-applied",
		"deployment.apps/agent-sandbox-api serverside-applied",
		"service/agent-sandbox-api serverside-applied",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("apply did not say %q", want)
		}
	}
	// Applied again, it changes nothing and conflicts with nothing.
	if again := applyBase(t, c); again != out {
		t.Errorf("applying again said:\n%s", again)
	}

	t.Run("rbac", func(t *testing.T) { checkRBAC(t, c) })
	t.Run("kubectl get sandboxes", func(t *testing.T) { checkListing(t, c) })
}

// checkRBAC asks the API server, through SubjectAccessReviews, what each
// role may do, and prints the table.
func checkRBAC(t *testing.T, c *kubetest.Cluster) {
	az, err := authorizationclient.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	type rule struct {
		who                              string
		verb, group, resource, sub, name string
		allowed                          bool
	}
	const g, coord = v1alpha1.GroupName, "coordination.k8s.io"
	rules := []rule{
		{"node", "update", coord, "leases", "", "node-1", true},
		{"node", "create", coord, "leases", "", "", true},
		{"node", "delete", coord, "leases", "", "node-1", false},
		{"node", "create", g, "sandboxnodes", "", "", true},
		{"node", "update", g, "sandboxnodes", "status", "node-1", true},
		{"node", "list", g, "sandboxes", "", "", true},
		{"node", "update", g, "sandboxes", "status", "sb-1", true},
		{"node", "create", g, "sandboxes", "", "", false},
		{"node", "delete", g, "sandboxes", "", "sb-1", false},
		{"node", "update", g, "sandboxes", "", "sb-1", false},
		{"node", "patch", g, "sandboxes", "", "sb-1", true}, // its finalizer
		{"node", "get", "", "secrets", "", "", false},
		{"node", "get", "", "nodes", "", "node-1", true}, // whether it is cordoned
		{"node", "list", "", "nodes", "", "", false},
		{"node", "update", "", "nodes", "", "node-1", false},
		{"api", "create", g, "sandboxes", "", "", true},
		{"api", "delete", g, "sandboxes", "", "sb-1", true},
		{"api", "patch", g, "sandboxes", "status", "sb-1", true},
		{"api", "list", g, "sandboxnodes", "", "", true},
		{"api", "update", g, "sandboxnodes", "", "node-1", false},
		{"api", "update", g, "sandboxnodes", "status", "node-1", false},
		{"api", "watch", coord, "leases", "", "", true},
		{"api", "update", coord, "leases", "", "node-1", false},
		{"api", "update", coord, "leases", "", "agent-sandbox-api-leader", true},
		{"api", "get", "", "secrets", "", "", false},
		{"api", "create", "", "pods", "", "", false},
		{"api", "get", "", "nodes", "", "node-1", false},
	}
	accounts := map[string]account{"node": nodeAccount, "api": apiAccount}
	ctx := t.Context()
	var table strings.Builder
	for _, r := range rules {
		a := accounts[r.who]
		ns := namespace
		if r.resource == "nodes" { // cluster-scoped
			ns = ""
		}
		review, err := az.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User: a.user, Groups: a.groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: r.verb, Group: r.group, Resource: r.resource, Subresource: r.sub, Name: r.name,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("reviewing %+v: %v", r, err)
		}
		res := r.resource
		if r.sub != "" {
			res += "/" + r.sub
		}
		fmt.Fprintf(&table, "%-4s %-6s %-20s %-40s %-24s expected %-5v got %v\n", r.who, r.verb, r.group, res, r.name, r.allowed, review.Status.Allowed)
		if review.Status.Allowed != r.allowed {
			t.Errorf("%s %s %s/%s %q: allowed %v, want %v (%s)", r.who, r.verb, r.group, res, r.name, review.Status.Allowed, r.allowed, review.Status.Reason)
		}
	}
	t.Logf("RBAC, role by role:\n%s", table.String())
}

// checkListing creates a Sandbox as the API role, reports it running as
// the node role, and has kubectl list it.
func checkListing(t *testing.T, c *kubetest.Cluster) {
	ctx := t.Context()
	api, err := v1alpha1.NewClient(apiAccount.config(c))
	if err != nil {
		t.Fatal(err)
	}
	node, err := v1alpha1.NewClient(nodeAccount.config(c))
	if err != nil {
		t.Fatal(err)
	}
	sb := &v1alpha1.Sandbox{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{Name: "i3xk0cq7sh2dpf5ryl0bz", Namespace: namespace},
		Spec: v1alpha1.SandboxSpec{
			Template: "code-interpreter-v1", Timeout: metav1.Duration{Duration: 5 * time.Minute},
			Metadata: map[string]string{"user": "alice"}, Node: "node-2", Secure: true,
		},
	}
	created := new(v1alpha1.Sandbox)
	if err := api.Post().Namespace(namespace).Resource(v1alpha1.SandboxResource).Body(sb).Do(ctx).Into(created); err != nil {
		t.Fatalf("creating a sandbox as the api role: %v", err)
	}
	started := metav1.NewTime(time.Now().Truncate(time.Second)) // as the API keeps it
	created.Status = v1alpha1.SandboxStatus{State: v1alpha1.SandboxRunning, Node: "node-2", Reason: "started by test", StartedAt: &started,
		EnvdAccessToken: "envd-token", TrafficAccessToken: "traffic-token"}
	if err := node.Put().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(sb.Name).SubResource("status").Body(created).Do(ctx).Into(created); err != nil {
		t.Fatalf("reporting it running as the node role: %v", err)
	}
	// Every field of the Go types is in the CRD's schema: the API server
	// prunes those that are not, so a read-back would lack them.
	var got v1alpha1.Sandbox
	if err := api.Get().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(sb.Name).Do(ctx).Into(&got); err != nil {
		t.Fatalf("reading the sandbox back: %v", err)
	}
	if !reflect.DeepEqual(got.Spec, sb.Spec) || !reflect.DeepEqual(got.Status, created.Status) || got.Status.StartedAt == nil {
		t.Errorf("read back spec %+v status %+v, want %+v %+v", got.Spec, got.Status, sb.Spec, created.Status)
	}
	// The schema is enforced: a state outside the enum is refused.
	created.Status.State = "Sleeping"
	err = node.Put().Namespace(namespace).Resource(v1alpha1.SandboxResource).Name(sb.Name).SubResource("status").Body(created).Do(ctx).Error()
	if err == nil || !strings.Contains(err.Error(), "status.state") {
		t.Errorf("a status with state Sleeping: %v, want a refusal naming status.state", err)
	}

	out := kubectl(t, c, "get", "sandboxes", "-n", namespace)
	t.Logf("kubectl get sandboxes -n %s:\n%s", namespace, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and one sandbox, got %d lines", len(lines))
	}
	if got, want := strings.Fields(lines[0]), []string{"NAME", "NODE", "TEMPLATE", "STATE", "AGE"}; !slices.Equal(got, want) {
		t.Errorf("columns %q, want %q", got, want)
	}
	if got, want := strings.Fields(lines[1])[:4], []string{sb.Name, "node-2", "code-interpreter-v1", "Running"}; !slices.Equal(got, want) {
		t.Errorf("row %q, want it to start with %q", got, want)
	}
	// The short name works, and -o wide adds the reason.
	if wide := kubectl(t, c, "get", "sbx", "-n", namespace, "-o", "wide"); !strings.Contains(strings.SplitN(wide, "\n", 2)[0], "REASON") {
		t.Errorf("kubectl get sbx -o wide has no REASON column:\n%s", wide)
	}
}
