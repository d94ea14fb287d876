// Command jailinit is PID 1 of every jail sandbox (and the jail's export
// helper): what the jail backend executes in a sandbox's new namespaces.
// The server binary can be that too (its hidden init command), but each
// start would then pay for the server's package initialisers and the heap
// they allocate, for the sandbox's whole life; this binary links the jail
// alone.
package main

import (
	"fmt"
	"os"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/jail"
)

func main() {
	jail.ExitIfInit()
	fmt.Fprintln(os.Stderr, "jailinit: the jail backend runs this as a sandbox's init; it is not run by hand")
	os.Exit(2)
}
