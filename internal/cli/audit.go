package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
)

var sandboxAuditCommand = &command{
	name:    "sandbox audit",
	args:    "ID",
	summary: "show a sandbox's egress decisions (DNS, proxy, firewall)",
	detail: `Show the egress audit trail of a sandbox, oldest first: every DNS query
and whether its name was allowed, every answer address removed (a name
pointing at a private or host address), every connection to ports 80 and
443 through the egress proxy, and the packets the firewall dropped (other
protocols, the host, other sandboxes, blocked ranges). RULE names what
decided. The server keeps the most recent decisions of each sandbox.`,
	env:          true,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		server := addServerFlags(fs)
		follow := fs.Bool("follow", false, "keep printing new decisions until interrupted")
		denied := fs.Bool("denied", false, "only the denied decisions")
		asJSON := fs.Bool("json", false, "print one JSON object per line instead of a table")
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) != 1 {
				return errors.New("want exactly one sandbox ID")
			}
			c, err := server.client()
			if err != nil {
				return err
			}
			p := newAuditPrinter(std.stdout, *asJSON)
			var after uint64
			for {
				events, next, err := c.EgressAudit(ctx, args[0], after, 0)
				if err != nil {
					if ctx.Err() != nil && *follow {
						return nil
					}
					return explain(c, err)
				}
				for _, e := range events {
					if !*denied || !e.Allowed {
						p.print(e)
					}
				}
				after = next
				if len(events) > 0 {
					continue // there may be more at once
				}
				// Caught up: print what came, in aligned columns.
				if err := p.flush(); err != nil {
					return err
				}
				if !*follow {
					return nil
				}
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(500 * time.Millisecond):
				}
			}
		}
	},
}

// auditPrinter writes egress events as a table or as JSON lines.
type auditPrinter struct {
	enc    *json.Encoder
	tw     *tabwriter.Writer
	header bool
}

func newAuditPrinter(w io.Writer, asJSON bool) *auditPrinter {
	if asJSON {
		return &auditPrinter{enc: json.NewEncoder(w)}
	}
	return &auditPrinter{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
}

func (p *auditPrinter) print(e client.EgressEvent) {
	if p.enc != nil {
		_ = p.enc.Encode(e)
		return
	}
	if !p.header {
		fmt.Fprintln(p.tw, "TIME\tKIND\tVERDICT\tNAME\tADDRESS\tPORT\tRULE")
		p.header = true
	}
	verdict := "denied"
	if e.Allowed {
		verdict = "allowed"
	}
	kind := e.Kind
	if e.Proto != "" {
		kind += "/" + e.Proto
	} else if e.Type != "" {
		kind += "/" + e.Type
	}
	port := "-"
	if e.Port != 0 {
		port = fmt.Sprint(e.Port)
	}
	fmt.Fprintf(p.tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.UTC().Format("15:04:05.000"), kind, verdict,
		dash(e.Name), dash(strings.Join(e.Addrs, ",")), port, e.Rule)
}

func (p *auditPrinter) flush() error {
	if p.tw != nil {
		return p.tw.Flush()
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
