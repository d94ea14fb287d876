package kubetest

import (
	"encoding/base64"
	"fmt"

	"k8s.io/client-go/rest"
)

// kubeconfig is a kubeconfig file with cfg's server, CA and token.
func kubeconfig(cfg *rest.Config) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: kubetest-admin
  user:
    token: %s
contexts:
- name: kubetest
  context: {cluster: kubetest, user: kubetest-admin}
current-context: kubetest
`, cfg.Host, base64.StdEncoding.EncodeToString(cfg.CAData), cfg.BearerToken)
}

// As is admin acting as user in groups, by impersonation: how a test
// checks what a role's RBAC allows without minting its tokens.
func As(admin *rest.Config, user string, groups ...string) *rest.Config {
	c := rest.CopyConfig(admin)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return c
}
