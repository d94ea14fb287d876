package template

import (
	"fmt"
	"strings"
	"time"
)

// BuildingError answers a lookup of a template that is not there yet
// because it is being built: a built-in template the server builds on
// first use. The caller should retry after RetryAfter.
type BuildingError struct {
	Name string
	// Since is when the build was asked for.
	Since time.Time
	// Progress says what the build is doing (Describe); empty while it
	// waits for another build (After) to end.
	Progress string
	After    string
	// Failed is the last build's error when it failed and the next one
	// has not started yet (it does after RetryAfter).
	Failed     error
	RetryAfter time.Duration
}

// Error implements error.
func (e *BuildingError) Error() string {
	ago := time.Since(e.Since).Round(time.Second)
	retry := e.RetryAfter.Round(time.Second)
	switch {
	case e.Failed != nil:
		return fmt.Sprintf("building template '%s' failed %s ago: %v; a create after %s starts a new build", e.Name, ago, e.Failed, retry)
	case e.Progress == "":
		return fmt.Sprintf("template '%s' is built in and is being built on this server: asked for %s ago, it waits for the build of %s to end; retry in %s",
			e.Name, ago, e.After, retry)
	}
	return fmt.Sprintf("template '%s' is built in and is being built on this server: started %s ago, now %s; retry in %s",
		e.Name, ago, e.Progress, retry)
}

// Describe says in a few words what a build is doing: its stage and the
// stage's progress, e.g. "packages: installing 120/415 (29%) python3-numpy".
func Describe(stage string, ev Event) string {
	parts := []string{stage + ":"}
	if ev.Phase != "" {
		parts = append(parts, ev.Phase)
	}
	switch {
	case ev.Total > 0:
		parts = append(parts, fmt.Sprintf("%d/%d", ev.Done, ev.Total))
	case ev.Done > 0:
		parts = append(parts, fmt.Sprint(ev.Done))
	}
	if ev.Percent >= 0 && ev.Phase != "done" {
		parts = append(parts, fmt.Sprintf("(%.0f%%)", ev.Percent))
	}
	if ev.Item != "" {
		parts = append(parts, shorten(ev.Item, 60))
	}
	return strings.TrimSuffix(strings.Join(parts, " "), ":")
}

// shorten collapses the white space of s and cuts it to n bytes.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}
