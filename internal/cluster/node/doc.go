// Package node is the cluster-mode side of a sandbox host (`serve --cluster
// kubernetes`): it keeps the host's coordination.k8s.io Lease renewed as its
// heartbeat and publishes the host as a SandboxNode (address, capacity,
// sandboxes held, templates built). The control plane reads the Lease with
// Expired to stop placing on a node that went silent.
package node
