// Package kubetest starts a real etcd and kube-apiserver on loopback for one
// test, as envtest does: its own CA and serving certificate, a token file
// with an admin in system:masters, RBAC authorization, everything under the
// test's temporary directory and stopped, by PID, when the test ends.
//
// The binaries come from `make kube-tools` (tools/kube), found through
// $AGENT_SANDBOX_KUBE_APISERVER and $AGENT_SANDBOX_KUBE_ETCD, which
// `make test-cluster` sets. Without them a test skips, naming the make
// target, or fails under CI=true.
package kubetest
