package v1alpha1

import (
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Sandbox is one sandbox of the E2B API. An API replica creates it with its
// placement (Spec.Node) in one write; the node agent there runs it and
// reports through the status subresource.
type Sandbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxSpec   `json:"spec"`
	Status SandboxStatus `json:"status,omitempty"`
}

// SandboxSpec is what was asked for.
type SandboxSpec struct {
	// Template is the template's name or id, as the SDK gave it.
	Template string `json:"template"`
	// Timeout is how long the sandbox lives from its start (E2B's
	// timeout), counted from status.startedAt in whole seconds once there
	// is one. An API replica's setTimeout rewrites it; the node applies
	// the change to the running sandbox.
	Timeout metav1.Duration `json:"timeout"`
	// Metadata is the SDK's metadata, listed and filtered on by the API.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Node is the SandboxNode placement chose.
	Node string `json:"node"`
	// Secure: the sandbox's ports besides envd's require its envd access
	// token too (E2B's secure).
	Secure bool `json:"secure,omitempty"`
	// EnvVars are the sandbox's environment (E2B's envVars). Values may
	// be secrets: whoever may read Sandboxes reads them, as they read the
	// access tokens of the status.
	EnvVars map[string]string `json:"envVars,omitempty"`
	// AllowInternetAccess is E2B's allow_internet_access; nil: the
	// node's default.
	AllowInternetAccess *bool `json:"allowInternetAccess,omitempty"`
	// Network is E2B's network config as the client sent it (allowOut,
	// denyOut, allowPublicTraffic, maskRequestHost, rules, bandwidth):
	// the node applies it as a single host does.
	Network json.RawMessage `json:"network,omitempty"`
	// Pause asks the node to pause the sandbox, keeping its memory or its
	// files only; cleared, to resume it (an API replica's pause and
	// connect).
	Pause SandboxPause `json:"pause,omitempty"`
}

// SandboxPause is how a sandbox is to be paused.
type SandboxPause string

// The pauses, as E2B's pause keeps memory or not.
const (
	PauseMemory SandboxPause = "Memory"
	PauseFiles  SandboxPause = "Files"
)

// SandboxState is where a sandbox is in its life.
type SandboxState string

// The states a node agent reports (Error: the create failed, Reason says
// why); Lost is set by the control plane for the sandboxes of a node whose
// Lease expired.
const (
	SandboxPending SandboxState = "Pending"
	SandboxRunning SandboxState = "Running"
	SandboxPaused  SandboxState = "Paused"
	SandboxKilled  SandboxState = "Killed"
	SandboxLost    SandboxState = "Lost"
	SandboxError   SandboxState = "Error"
)

// Ended says whether s is final: nothing runs for the sandbox any more.
func (s SandboxState) Ended() bool {
	return s == SandboxKilled || s == SandboxLost || s == SandboxError
}

// EndAt is when s's timeout ends its sandbox: spec.timeout after
// status.startedAt (whole seconds); false before it started.
func (s *Sandbox) EndAt() (time.Time, bool) {
	if s.Status.StartedAt == nil {
		return time.Time{}, false
	}
	return s.Status.StartedAt.Add(s.Spec.Timeout.Duration), true
}

// StatusTime is when s's status was last written, which for an ended
// sandbox is when it ended (the API server keeps the time per writer and
// subresource, in seconds); its creation when none was.
func (s *Sandbox) StatusTime() time.Time {
	var at time.Time
	for _, f := range s.ManagedFields {
		if f.Subresource == "status" && f.Time != nil && f.Time.After(at) {
			at = f.Time.Time
		}
	}
	if at.IsZero() {
		return s.CreationTimestamp.Time
	}
	return at
}

// SandboxErrorClass says what kind of failure a node's Error is, so that
// the API replica answers the create as a single host would (a request the
// node refuses is the client's 4xx, not the cluster's 500).
type SandboxErrorClass string

// The classes; none ("") is the node's own failure.
const (
	ErrorInvalid     SandboxErrorClass = "Invalid"     // the request: 400
	ErrorConflict    SandboxErrorClass = "Conflict"    // 409
	ErrorLimit       SandboxErrorClass = "Limit"       // the node's sandbox cap: 429
	ErrorUnavailable SandboxErrorClass = "Unavailable" // the template is being built: 503
)

// SandboxStatus is what the node holding the sandbox reports.
type SandboxStatus struct {
	State SandboxState `json:"state,omitempty"`
	// Node is the node that reported this status.
	Node string `json:"node,omitempty"`
	// Reason says why the sandbox is in State, for Killed, Lost and Error.
	Reason string `json:"reason,omitempty"`
	// ErrorClass, for Error, is the kind of the node's failure; Reason
	// is then meant for the client.
	ErrorClass SandboxErrorClass `json:"errorClass,omitempty"`
	StartedAt  *metav1.Time      `json:"startedAt,omitempty"`
	// EnvdAccessToken is what clients present to the sandbox's envd
	// (X-Access-Token), made by the node when it starts the sandbox; the
	// API replicas return it from create, connect and get, as a single
	// host does. Whoever may read Sandboxes reads it.
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	// TrafficAccessToken guards the sandbox's other ports when it does not
	// allow public traffic; empty otherwise.
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
	// TemplateID and Alias are the template the node started the sandbox
	// from: its built ID and its name, which spec.template may give either
	// of. The API answers with them as a single host does.
	TemplateID string `json:"templateID,omitempty"`
	Alias      string `json:"alias,omitempty"`
	// CPUCount, MemoryMB and DiskSizeMB are the sandbox's resources, as
	// its template gave them on the node.
	CPUCount   int `json:"cpuCount,omitempty"`
	MemoryMB   int `json:"memoryMB,omitempty"`
	DiskSizeMB int `json:"diskSizeMB,omitempty"`
	// ObservedGeneration is the object's generation whose spec.pause the
	// node last acted on: with Reason and ErrorClass set and State
	// unchanged, it could not.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// SandboxList is a page of Sandboxes.
type SandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sandbox `json:"items"`
}

// SandboxNode is one node agent: where to reach it and what it can hold. Its
// liveness is not here but in the coordination.k8s.io Lease of the same
// name and namespace, which the agent renews far more often than this
// object changes.
type SandboxNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SandboxNodeSpec   `json:"spec"`
	Status SandboxNodeStatus `json:"status,omitempty"`
}

// SandboxNodeSpec is set by the agent when it starts.
type SandboxNodeSpec struct {
	// Address is the host:port API replicas proxy this node's sandbox
	// traffic to.
	Address string `json:"address"`
}

// SandboxNodeStatus is the node's capacity and what it holds, published by
// the agent when it changes.
type SandboxNodeStatus struct {
	Capacity NodeCapacity `json:"capacity"`
	// Sandboxes is how many sandboxes the node holds now.
	Sandboxes int32 `json:"sandboxes"`
	// Templates are the templates built on the node, which placement
	// prefers (no build, no copy before the first create).
	Templates []string `json:"templates,omitempty"`
	// Warm are the IDs of the node's ready warm pool members, by template
	// name, oldest first: an API replica names a new Sandbox of that
	// template by one of them, and the node hands out that member rather
	// than booting a sandbox (a member's ID is fixed when it boots).
	Warm map[string][]string `json:"warm,omitempty"`
	// Unschedulable is the Kubernetes Node's of the same name, as the
	// agent last read it: a cordoned (or draining) node takes no new
	// placements; what runs there goes on.
	Unschedulable bool `json:"unschedulable,omitempty"`
}

// NodeCapacity is the most a node takes.
type NodeCapacity struct {
	Sandboxes int32 `json:"sandboxes"`
	CPUs      int32 `json:"cpus"`
	MemoryMiB int64 `json:"memoryMiB"`
}

// SandboxNodeList is a page of SandboxNodes.
type SandboxNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxNode `json:"items"`
}
