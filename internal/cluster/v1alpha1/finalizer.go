package v1alpha1

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// NodeFinalizer holds a Sandbox's deletion (E2B's kill) until its node
// has killed the sandbox, so that a kill answers once nothing runs for it
// and no request reaches it after: an API replica creates every Sandbox
// with it; the node removes it when it has killed the sandbox, and the
// leader removes it for a node whose Lease expired, which nobody answers
// for any more.
const NodeFinalizer = GroupName + "/node"

// Deleting says whether s is being deleted: killed, as far as its clients
// go, while its node finishes the kill.
func (s *Sandbox) Deleting() bool { return s.DeletionTimestamp != nil }

// RemoveNodeFinalizer takes NodeFinalizer off s, as read: a merge patch
// with s's resourceVersion, so that it keeps any finalizer added since
// (the write fails with a conflict; the change brings s again). An object
// gone, or without the finalizer, is no error.
func RemoveNodeFinalizer(ctx context.Context, client *rest.RESTClient, s *Sandbox) error {
	if !slices.Contains(s.Finalizers, NodeFinalizer) {
		return nil
	}
	others := slices.DeleteFunc(slices.Clone(s.Finalizers), func(f string) bool { return f == NodeFinalizer })
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": s.ResourceVersion, "finalizers": others}})
	if err != nil {
		return fmt.Errorf("encoding the finalizers of Sandbox %s: %w", s.Name, err)
	}
	err = client.Patch(types.MergePatchType).Namespace(s.Namespace).Resource(SandboxResource).Name(s.Name).Body(body).Do(ctx).Error()
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing finalizer %s of Sandbox %s: %w", NodeFinalizer, s.Name, err)
	}
	return nil
}
