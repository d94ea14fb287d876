package api

import (
	"net/http"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// templateBuildView is one build as the dashboard's templates page lists it.
type templateBuildView struct {
	TemplateID string     `json:"templateID"`
	BuildID    string     `json:"buildID"`
	Status     string     `json:"status"`
	Tags       []string   `json:"tags"`
	CreatedAt  time.Time  `json:"createdAt"`
	StartedAt  *time.Time `json:"startedAt"`
	FinishedAt *time.Time `json:"finishedAt"`
	// Reason is why the build failed.
	Reason string `json:"reason,omitempty"`
}

// templateBuilds implements GET /dashboard/api/template-builds: every
// build of every template, by template and then oldest first; a build
// that runs is "building". Its log is read from the template build API's
// status route (logsOffset), as the E2B CLI reads it.
func (h *Handler) templateBuilds(w http.ResponseWriter, r *http.Request) {
	builds, err := h.templates.records.AllTemplateBuilds(r.Context())
	if err != nil {
		h.templateFail(w, r, err)
		return
	}
	h.templates.mu.Lock()
	running := make(map[string]bool, len(h.templates.runs))
	for id := range h.templates.runs {
		running[id] = true
	}
	h.templates.mu.Unlock()
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	out := make([]templateBuildView, 0, len(builds))
	for _, b := range builds {
		v := templateBuildView{
			TemplateID: b.Template, BuildID: b.ID, Status: string(b.Status), Tags: b.Tags,
			CreatedAt: b.CreatedAt.UTC(), StartedAt: opt(b.StartedAt), FinishedAt: opt(b.FinishedAt), Reason: b.Reason.Message,
		}
		if running[b.ID] {
			v.Status = string(store.BuildBuilding)
		}
		if v.Tags == nil {
			v.Tags = []string{}
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, out)
}
