// Package cluster holds the tests of cluster mode against a real
// kube-apiserver and etcd started on loopback (internal/cluster/kubetest):
// the kustomize base of deploy/kubernetes applied server-side, its RBAC
// checked role by role, a Sandbox listed by kubectl with its printer
// columns, and a node agent, in a process of its own, whose Lease is
// created, renewed and left to expire once the process is killed.
// `make test-cluster` runs them (not part of `make test`: kube-apiserver
// is built first, minutes of CPU the first time).
package cluster
