package v1alpha1

import (
	"k8s.io/client-go/rest"

	"github.com/agent-sandbox/agent-sandbox/internal/cluster/kubeclient"
)

// NewClient is a REST client for the kinds here, from the API server's
// config: client.Get().Namespace(ns).Resource(SandboxResource)...
func NewClient(cfg *rest.Config) (*rest.RESTClient, error) {
	return kubeclient.New(cfg, GroupVersion, AddToScheme)
}
