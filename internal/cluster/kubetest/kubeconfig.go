package kubetest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
)

// kubeconfig is a kubeconfig file with cfg's server, CA and token, and
// its impersonation if any.
func kubeconfig(cfg *rest.Config) []byte {
	var as string
	if u := cfg.Impersonate.UserName; u != "" {
		groups, _ := json.Marshal(cfg.Impersonate.Groups) // strings: cannot fail
		as = fmt.Sprintf("\n    as: %q\n    as-groups: %s", u, groups)
	}
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
    token: %s%s
contexts:
- name: kubetest
  context: {cluster: kubetest, user: kubetest-admin}
current-context: kubetest
`, cfg.Host, base64.StdEncoding.EncodeToString(cfg.CAData), cfg.BearerToken, as)
}

// KubeconfigAs writes a kubeconfig file in which the admin acts as user in
// groups (As), for a process that must hold a role's rights alone.
func (c *Cluster) KubeconfigAs(user string, groups ...string) (string, error) {
	path := filepath.Join(c.Dir, "kubeconfig-"+strings.NewReplacer(":", "-", "/", "-").Replace(user))
	if err := os.WriteFile(path, kubeconfig(As(c.Admin, user, groups...)), 0o600); err != nil {
		return "", fmt.Errorf("writing the kubeconfig of %s: %w", user, err)
	}
	return path, nil
}

// As is admin acting as user in groups, by impersonation: how a test
// checks what a role's RBAC allows without minting its tokens.
func As(admin *rest.Config, user string, groups ...string) *rest.Config {
	c := rest.CopyConfig(admin)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return c
}
