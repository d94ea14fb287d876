package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"time"
)

// migrateFD is the name under which Save and MigrateIncoming hand QEMU the
// snapshot file (getfd), to be named in the migration URI fd:<name>.
const migrateFD = "agent-sandbox-migrate"

// Stop pauses the VM's CPUs (QMP stop); QEMU then sends STOP.
func (c *Client) Stop(ctx context.Context) error {
	return c.Execute(ctx, "stop", nil, nil)
}

// Cont resumes the VM's CPUs (QMP cont), also after Save or
// MigrateIncoming left it paused; QEMU then sends RESUME.
func (c *Client) Cont(ctx context.Context) error {
	return c.Execute(ctx, "cont", nil, nil)
}

// StatusInfo is QEMU's run state (query-status).
type StatusInfo struct {
	Running bool `json:"running"`
	// Status is QEMU's RunState: "running", "paused" (after Stop, or a
	// restore of a paused VM), "prelaunch" (-S), "inmigrate" (-incoming,
	// not yet restored), "postmigrate" (after Save), "shutdown",
	// "guest-panicked", "internal-error", ...
	Status string `json:"status"`
}

// Status returns the VM's run state.
func (c *Client) Status(ctx context.Context) (StatusInfo, error) {
	var s StatusInfo
	err := c.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// Quit ends QEMU (QMP quit) and returns once QEMU has closed the
// connection; the caller still waits for the process.
func (c *Client) Quit(ctx context.Context) error {
	if err := c.Execute(ctx, "quit", nil, nil); err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("qmp quit: waiting for QEMU to close the connection: %w", ctx.Err())
	}
}

// Save writes the VM's whole state (CPU, devices, RAM; not its disks) to f,
// which must be open for writing, by migrating to it, and returns when the
// migration has completed. Stop the VM first for a snapshot of one
// instant: a running VM is migrated live, which takes longer and ends
// stopped all the same. Either way the VM is left paused ("postmigrate");
// Cont resumes it. The disks are the caller's: they must be kept as they
// are at this point for a restore to be consistent.
func (c *Client) Save(ctx context.Context, f *os.File) error {
	sub := c.Subscribe()
	defer sub.Close()
	if err := c.prepareMigration(ctx); err != nil {
		return err
	}
	// Without a limit: QEMU 7.2 caps migration at 128 MiB/s by default,
	// which is meant for a live link, not for a file.
	if err := c.Execute(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(math.MaxInt64)}, nil); err != nil {
		return err
	}
	if err := c.passFD(ctx, f); err != nil {
		return err
	}
	if err := c.Execute(ctx, "migrate", map[string]any{"uri": "fd:" + migrateFD}, nil); err != nil {
		c.dropFD()
		return err
	}
	if err := c.waitMigration(ctx, sub); err != nil {
		// Best effort, so that QEMU does not go on writing to f.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = c.Execute(cctx, "migrate_cancel", nil, nil)
		return fmt.Errorf("saving the VM: %w", err)
	}
	return c.waitPostmigrate(ctx)
}

// waitPostmigrate waits for the run state to leave finish-migrate: QEMU
// announces the completed migration before its main loop moves the VM to
// postmigrate, and sends no event when it does.
func (c *Client) waitPostmigrate(ctx context.Context) error {
	for {
		s, err := c.Status(ctx)
		if err != nil {
			return fmt.Errorf("saving the VM: %w", err)
		}
		if s.Status != "finish-migrate" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("saving the VM: waiting for QEMU to leave finish-migrate: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// MigrateIncoming restores into this QEMU the state Save wrote to f, which
// must be open for reading. QEMU must have been started with
// -incoming defer and the same machine and devices as the saved one. The
// VM is left paused if it was paused when saved (as after Stop and Save)
// or if QEMU was started with -S, and running otherwise.
//
// QEMU 7.2 exits (status 1) when the stream cannot be loaded, saying why
// on its stderr only: MigrateIncoming then returns an error wrapping
// ErrClosed.
func (c *Client) MigrateIncoming(ctx context.Context, f *os.File) error {
	sub := c.Subscribe()
	defer sub.Close()
	if err := c.prepareMigration(ctx); err != nil {
		return err
	}
	if err := c.passFD(ctx, f); err != nil {
		return err
	}
	if err := c.Execute(ctx, "migrate-incoming", map[string]any{"uri": "fd:" + migrateFD}, nil); err != nil {
		c.dropFD()
		return err
	}
	if err := c.waitMigration(ctx, sub); err != nil {
		if errors.Is(err, ErrClosed) {
			return fmt.Errorf("restoring the VM: QEMU exited while loading the snapshot (its stderr says why): %w", err)
		}
		return fmt.Errorf("restoring the VM: %w", err)
	}
	return nil
}

// prepareMigration turns on the MIGRATION event, by which waitMigration
// learns that a migration ended.
func (c *Client) prepareMigration(ctx context.Context) error {
	caps := map[string]any{"capabilities": []map[string]any{{"capability": "events", "state": true}}}
	return c.Execute(ctx, "migrate-set-capabilities", caps, nil)
}

// passFD hands f to QEMU under the name migrateFD.
func (c *Client) passFD(ctx context.Context, f *os.File) error {
	return c.ExecuteWithFile(ctx, "getfd", map[string]any{"fdname": migrateFD}, f, nil)
}

// dropFD closes QEMU's copy of the descriptor passFD handed it, when the
// migration that was to consume it did not start. Best effort: the error
// worth returning is the one that came first.
func (c *Client) dropFD() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.Execute(ctx, "closefd", map[string]any{"fdname": migrateFD}, nil)
}

// waitMigration waits for the MIGRATION event that ends a migration. When
// it failed, QEMU's reason comes from query-migrate (the event has none).
func (c *Client) waitMigration(ctx context.Context, sub *Subscription) error {
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		if e.Name != "MIGRATION" {
			continue
		}
		var d struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return fmt.Errorf("decoding the MIGRATION event %s: %w", e.Data, err)
		}
		switch d.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			var info struct {
				ErrorDesc string `json:"error-desc"`
			}
			err := c.Execute(ctx, "query-migrate", nil, &info)
			if errors.Is(err, ErrClosed) { // as QEMU 7.2 exits after a failed incoming migration
				return fmt.Errorf("migration %s: %w", d.Status, err)
			}
			if err != nil || info.ErrorDesc == "" {
				return fmt.Errorf("migration %s", d.Status)
			}
			return fmt.Errorf("migration %s: %s", d.Status, info.ErrorDesc)
		}
	}
}
