// Package sandboxtest assembles, for tests outside internal/sandbox, a
// sandbox manager wired as the server wires it: host networking (an
// address pool and the firewall), egress gateways for sandboxes and for
// template build steps, an isolation backend chosen by name (jail, vm or
// gvisor), the store and envd. What the tests that use it differ in is a
// field of Config; Start builds the stack and has the test remove all of
// it when it ends, also when it fails.
//
// The vm backend needs the guest kernel (kernel.DefaultDir), QEMU and
// qemu-img; a host without them skips the test with the reason, and fails
// it under CI=true (testenv.Require). Its sandboxes boot from the
// template as an ext4 image, which the stack makes as the server does
// (template.Builder.Ext4, once per template). The gvisor backend needs
// runsc, likewise.
//
// It is imported only by tests, so it never ships in a binary; a test
// binary that uses it must call jail.ExitIfInit first in its TestMain
// (the jail re-executes it as each sandbox's init).
package sandboxtest
