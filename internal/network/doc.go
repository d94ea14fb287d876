// Package network gives each sandbox its own network namespace and reaches
// into it from the host.
//
// A Namespace is created with only its loopback interface up and is kept
// alive by a bind mount of its nsfs file at <runDir>/netns/<name> (the
// iproute2 convention, in a directory of our own), so that a restarted
// server can Open it again by name. The directory is made a shared mount on
// first use, as `ip netns add` does, so that unmounting a namespace also
// removes the copies that mount namespaces cloned since then still hold.
//
// Do runs a function on an OS thread that has entered the namespace, and
// Dial uses it to open a TCP connection from inside: the socket belongs to
// the sandbox's namespace for its whole life, so it reaches services bound
// only to the sandbox's 127.0.0.1 without any relay process. A process
// started by a function given to Do (exec.Cmd.Start) inherits the
// namespace, which is how the jail backend puts its init there.
//
// Only loopback exists for now. A veth pair is to be added later by moving
// one end into the namespace with netlink (LinkSetNsFd with Namespace.Fd's
// file) and configuring it inside Do.
package network
