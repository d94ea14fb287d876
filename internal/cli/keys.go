package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/server"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// addDataDirFlag defines --data-dir, with serve's default.
func addDataDirFlag(fs *flag.FlagSet) *string {
	return fs.String("data-dir", server.DefaultConfig().DataDir, "the server's data `DIR` (as given to serve); the database is in it")
}

// openStore opens the server's database in dataDir (the file serve uses).
// Unless create is set, a missing database is an error rather than a new
// empty one.
func openStore(ctx context.Context, dataDir string, create bool) (*store.Store, error) {
	path := server.DBPath(dataDir)
	if !create {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no database at %s (is --data-dir right?)", path)
		}
	}
	return store.Open(ctx, path)
}

const keysDetail = `
The keys commands work on the server's database directly, so they run on the
server host, as a user that can read and write the data directory (usually
root). They work whether or not the server is running.`

var keysCreateCommand = &command{
	name:    "keys create",
	summary: "create an API key",
	detail: `Create an API key and print it. The key is shown only this once: the
database keeps only its hash. Clients send it as E2B_API_KEY.
` + keysDetail,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		dataDir := addDataDirFlag(fs)
		name := fs.String("name", "", "a `NAME` for the key, to tell keys apart (required)")
		var maxTimeout time.Duration
		fs.Var(funcValue{set: func(v string) (err error) { maxTimeout, err = parseLongDuration(v); return err }, get: func() string { return formatLongDuration(maxTimeout) }},
			"max-timeout", "longest sandbox lifetime a request with this key may ask for: `DURATION` like 1h or 7d; 0 = the server's --max-timeout alone (the tighter of the two applies)")
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q", args[0])
			}
			if *name == "" {
				return errors.New("--name is required")
			}
			st, err := openStore(ctx, *dataDir, true)
			if err != nil {
				return err
			}
			defer st.Close()
			key, info, err := st.CreateAPIKey(ctx, *name, maxTimeout)
			if err != nil {
				return err
			}
			fmt.Fprintln(std.stdout, key)
			fmt.Fprintf(std.stderr, "Created API key %s (%q). It is not shown again: store it now.\n", info.ID, info.Name)
			return nil
		}
	},
}

var keysListCommand = &command{
	name:    "keys list",
	summary: "list API keys",
	detail: `List the API keys, oldest first: ID (for keys revoke), NAME, KEY (masked),
CREATED and LAST USED.
` + keysDetail,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		dataDir := addDataDirFlag(fs)
		asJSON := fs.Bool("json", false, "print JSON instead of a table")
		return func(ctx context.Context, args []string, std streams) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q", args[0])
			}
			st, err := openStore(ctx, *dataDir, false)
			if err != nil {
				return err
			}
			defer st.Close()
			keys, err := st.ListAPIKeys(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				type keyJSON struct {
					ID         string     `json:"id"`
					Name       string     `json:"name"`
					Key        string     `json:"key"` // masked
					CreatedAt  time.Time  `json:"createdAt"`
					LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
					// MaxTimeout is in seconds; absent: no limit of the key's own.
					MaxTimeout int64 `json:"maxTimeout,omitempty"`
				}
				out := []keyJSON{}
				for _, k := range keys {
					j := keyJSON{ID: k.ID, Name: k.Name, Key: k.Masked(), CreatedAt: k.CreatedAt, MaxTimeout: int64(k.MaxTimeout / time.Second)}
					if !k.LastUsedAt.IsZero() {
						j.LastUsedAt = &k.LastUsedAt
					}
					out = append(out, j)
				}
				enc := json.NewEncoder(std.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			tw := tabwriter.NewWriter(std.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tKEY\tCREATED\tLAST USED\tMAX TIMEOUT")
			for _, k := range keys {
				limit := "-"
				if k.MaxTimeout > 0 {
					limit = formatLongDuration(k.MaxTimeout)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, k.Masked(), formatTime(k.CreatedAt), formatTime(k.LastUsedAt), limit)
			}
			return tw.Flush()
		}
	},
}

var keysRevokeCommand = &command{
	name:    "keys revoke",
	args:    "ID...",
	summary: "revoke API keys",
	detail: `Revoke the API keys with the given IDs (see keys list). Requests with a
revoked key are refused from then on.
` + keysDetail,
	interspersed: true,
	setup: func(fs *flag.FlagSet) func(context.Context, []string, streams) error {
		dataDir := addDataDirFlag(fs)
		return func(ctx context.Context, ids []string, std streams) error {
			if len(ids) == 0 {
				return errors.New("no key ID given")
			}
			st, err := openStore(ctx, *dataDir, false)
			if err != nil {
				return err
			}
			defer st.Close()
			failed := 0
			for _, id := range ids {
				if err := st.RevokeAPIKey(ctx, id); err != nil {
					if errors.Is(err, store.ErrNotFound) {
						err = fmt.Errorf("no key with ID %s", id)
					}
					fmt.Fprintf(std.stderr, "agent-sandbox: %v\n", err)
					failed++
					continue
				}
				fmt.Fprintln(std.stdout, id)
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d keys not revoked", failed, len(ids))
			}
			return nil
		}
	},
}
