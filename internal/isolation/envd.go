package isolation

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Readiness polling of WaitEnvd. envd usually listens a few ms after a
// jail's Start returns, and a create waits for every ms between that and
// the poll that sees it: the first fastPolls polls are 1 ms apart, then
// the delay doubles up to maxPollDelay. A VM's guest that has not brought
// its interface up yet drops the connection attempt rather than refusing
// it, so no attempt waits longer than attemptTimeout.
const (
	fastPolls      = 20
	maxPollDelay   = 50 * time.Millisecond
	attemptTimeout = time.Second
)

// WaitEnvd polls envd's GET /health in a started sandbox through
// inst.Dial until it answers 2xx, the sandbox ends, or ctx ends. The
// manager runs it after every Start (readiness is not the backend's
// job); it sits beside the contract so that a backend's own tests wait
// the same way.
func WaitEnvd(ctx context.Context, inst Instance) error {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return inst.Dial(ctx, EnvdPort)
		},
		DisableKeepAlives: true,
	}}
	delay := time.Millisecond
	var last error
	for attempt := 1; ; attempt++ {
		err := healthy(ctx, client)
		if err == nil {
			return nil
		}
		// An attempt cut short by ctx says only that ctx ended; the
		// answer before it is what tells the caller why envd never came.
		if last == nil || ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for envd: %w (last: %w)", ctx.Err(), last)
		case <-inst.Done():
			return fmt.Errorf("waiting for envd: %w: %s", ErrGone, inst.Exit().Reason)
		case <-time.After(delay):
		}
		if attempt >= fastPolls {
			delay = min(2*delay, maxPollDelay)
		}
	}
}

// healthy makes one GET /health attempt.
func healthy(ctx context.Context, client *http.Client) error {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://envd/health", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET /health: %s", resp.Status)
	}
	return nil
}
