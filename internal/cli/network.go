package cli

import (
	"context"
	"errors"
	"flag"

	"github.com/agent-sandbox/agent-sandbox/client"
)

var sandboxNetworkCommand = &command{
	name:    "sandbox network",
	args:    "ID",
	summary: "replace a sandbox's egress rules, live",
	detail: `Replace the egress rules of a running sandbox (PUT /sandboxes/{id}/network):
the next DNS query and the next connection follow them. The rules replace
the old ones entirely, header rules (network.rules) included; with no
flags, the sandbox gets the server's policy back. Entries are CIDRs, IPs,
domains or *.wildcard domains; an allowance beats a denial, as in E2B
(--allow-out api.example.com --deny-out 0.0.0.0/0 reaches that name and
nothing else), and allowances beyond the server's policy take effect only
if the operator lets sandboxes widen it (see docs/NETWORK.md).`,
	env:          true,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		server := addServerFlags(fs)
		var allow, deny list
		fs.Var(&allow, "allow-out", "`ENTRY` the sandbox may reach (repeatable, or comma-separated)")
		fs.Var(&deny, "deny-out", "`ENTRY` the sandbox may not reach (repeatable, or comma-separated)")
		noInternet := fs.Bool("no-internet", false, "deny all egress (allow_internet_access: false)")
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) != 1 {
				return errors.New("want exactly one sandbox ID")
			}
			c, err := server.client()
			if err != nil {
				return err
			}
			rules := client.NetworkRules{AllowOut: allow, DenyOut: deny}
			if *noInternet {
				off := false
				rules.AllowInternetAccess = &off
			}
			if err := c.UpdateNetwork(ctx, args[0], rules); err != nil {
				return explain(c, err)
			}
			return nil
		}
	},
}
