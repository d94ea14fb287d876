package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of every kind here.
const GroupName = "agent-sandbox.dev"

// GroupVersion is the API group and version of every kind here.
var GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Resources, as REST paths and RBAC rules name them.
const (
	SandboxResource     = "sandboxes"
	SandboxNodeResource = "sandboxnodes"
)

// AddToScheme registers the kinds with a scheme, for typed clients.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Sandbox{}, &SandboxList{}, &SandboxNode{}, &SandboxNodeList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
