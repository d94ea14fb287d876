package v1alpha1

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// The copies runtime.Object asks for. Written by hand: four kinds with a
// few maps, slices and pointers between them do not earn a generator; a
// field added to a kind needs its line here (TestDeepCopy checks by
// reflection that a copy shares no memory with the original).

// DeepCopyInto copies s into out.
func (s *Sandbox) DeepCopyInto(out *Sandbox) {
	*out = *s
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Metadata = maps.Clone(s.Spec.Metadata)
	out.Spec.EnvVars = maps.Clone(s.Spec.EnvVars)
	if s.Spec.AllowInternetAccess != nil {
		out.Spec.AllowInternetAccess = new(*s.Spec.AllowInternetAccess)
	}
	out.Spec.Network = slices.Clone(s.Spec.Network)
	out.Status.StartedAt = s.Status.StartedAt.DeepCopy()
}

// DeepCopy returns a copy of s.
func (s *Sandbox) DeepCopy() *Sandbox {
	if s == nil {
		return nil
	}
	out := new(Sandbox)
	s.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (s *Sandbox) DeepCopyObject() runtime.Object { return s.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *SandboxList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &SandboxList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Sandbox, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// DeepCopyInto copies n into out.
func (n *SandboxNode) DeepCopyInto(out *SandboxNode) {
	*out = *n
	n.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Templates = slices.Clone(n.Status.Templates)
	if n.Status.Warm != nil {
		out.Status.Warm = make(map[string][]string, len(n.Status.Warm))
		for t, ids := range n.Status.Warm {
			out.Status.Warm[t] = slices.Clone(ids)
		}
	}
}

// DeepCopy returns a copy of n.
func (n *SandboxNode) DeepCopy() *SandboxNode {
	if n == nil {
		return nil
	}
	out := new(SandboxNode)
	n.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (n *SandboxNode) DeepCopyObject() runtime.Object { return n.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *SandboxNodeList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &SandboxNodeList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]SandboxNode, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}
