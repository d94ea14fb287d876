// Package control is the control plane of cluster mode, what the API
// replicas (`serve --cluster kubernetes --role api`) run beside the E2B
// API:
//
//   - Cache: the namespace's Leases, SandboxNodes and Sandboxes, kept
//     current by watches, which placement and the API read;
//   - Place and Placer: the node a new sandbox goes to (a live Lease, a free
//     slot, the template built there);
//   - Elector: leader election among the replicas on one Lease, so that
//     one of them, and one only, runs the cluster's chores;
//   - LostMarker: the leader's chore of marking Lost the sandboxes of a
//     node whose Lease expired.
//
// Writes go to the API server; nothing here is stored in the replica, so a
// replica that dies loses nothing.
package control
