// Package gvinit is the gvisor backend's helper binary (cmd/gvinit), in
// three roles, chosen by its first argument:
//
//   - with none, it is PID 1 of a gVisor sandbox (Main): it reads its
//     Config, envd's access token among it, from its stdin (a pipe the
//     host filled and closed, so the token is in no command line or
//     environment and, once read, nowhere in the sandbox but in envd),
//     writes /etc/resolv.conf, confines itself as every backend's init
//     does (package guest: capability bounding set, no_new_privs if asked,
//     the seccomp deny list, here enforced by gVisor's kernel), starts
//     envd and reaps orphans until envd exits. Its last word, a line
//     starting "gvinit: ", is the sandbox's exit reason; envd's output is
//     copied after "envd: ", so that it cannot pass for one.
//   - "launch" runs on the host, in a mount namespace of its own that the
//     backend starts it in (Launch): it mounts the sandbox's disk image
//     and the overlay of the template under it, reports the disk's device
//     to the host, waits for the go-ahead and executes runsc, whose gofer
//     and sandbox keep that namespace, and with it the mounts, alive; the
//     mounts go with them.
//   - "probe" prints what it finds of the kernel it runs on (ProbeResult),
//     for the backend's check that a gVisor platform works here (runsc do)
//     and what it must make up for.
package gvinit
