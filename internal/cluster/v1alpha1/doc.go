// Package v1alpha1 is cluster mode's API: the kinds agent-sandbox keeps in
// Kubernetes under the group agent-sandbox.dev, version v1alpha1. Their
// CustomResourceDefinitions are deploy/kubernetes/crds; docs/KUBERNETES.md
// says who writes which field.
package v1alpha1
