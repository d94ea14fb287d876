package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		panic(err) // a kind registered twice: a programming error
	}
	return serializer.NewCodecFactory(s)
}()

// NewClient is a REST client for the kinds here, from the API server's
// config: client.Get().Namespace(ns).Resource(SandboxResource)...
func NewClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &GroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("making the %s client: %w", GroupVersion, err)
	}
	return rc, nil
}
