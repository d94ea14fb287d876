// Package replica is the E2B API of cluster mode's API replicas (`serve
// --cluster kubernetes --role api`) over Sandbox objects: a create places
// the sandbox (control.Placer), writes its object with the placement in
// one API-server write, and waits for the node agent to report it Running;
// get, list, kill and setTimeout read and write the objects. The calls a
// single host serves beyond these (connect, pause, files, metrics, ...)
// are answered 501 until cluster mode has them; traffic to the sandboxes
// does not pass through a replica yet.
package replica
