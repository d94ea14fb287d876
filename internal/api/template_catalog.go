package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// The template list (GET /templates, what `e2b template list` shows) and
// template deletion (DELETE /templates/{id}, `e2b template delete` and the
// SDK's deleteSnapshot). Templates come from two places: the template
// engine's cache (built-in templates, those the CLI built, and every
// version the API built) and the API's build records.

// templateListItem is E2B's Template.
type templateListItem struct {
	TemplateID  string   `json:"templateID"`
	BuildID     string   `json:"buildID"`
	BuildStatus string   `json:"buildStatus"`
	BuildCount  int      `json:"buildCount"`
	CPUCount    int      `json:"cpuCount"`
	MemoryMB    int      `json:"memoryMB"`
	DiskSizeMB  int      `json:"diskSizeMB"`
	EnvdVersion string   `json:"envdVersion"`
	Public      bool     `json:"public"`
	Aliases     []string `json:"aliases"`
	Names       []string `json:"names"`
	// CreatedBy is E2B's team user; this server has none.
	CreatedBy     *struct{}  `json:"createdBy"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int64      `json:"spawnCount"`
	// Recording is this server's own: the format of the recording every
	// sandbox of the template starts with (template.Spec.Recording).
	Recording string `json:"recording,omitempty"`
}

// listTemplates implements GET /templates: every template, by name. The
// CLI sends teamID, which names no team here: every key sees every
// template.
func (h *Handler) listTemplates(w http.ResponseWriter, r *http.Request) {
	list, err := h.templates.catalog(r.Context(), h.envdVersion)
	if err != nil {
		h.templateFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// catalog lists every template: for one the API builds, its builds (the
// newest's status, the build its default tag points at); for any other,
// its versions in the engine's cache.
func (t *TemplateBuilds) catalog(ctx context.Context, envdVersion string) ([]templateListItem, error) {
	cached, err := t.builder.List()
	if err != nil {
		return nil, err
	}
	builds, err := t.records.AllTemplateBuilds(ctx)
	if err != nil {
		return nil, err
	}
	spawns, err := t.records.TemplateSpawns(ctx)
	if err != nil {
		return nil, err
	}
	items := map[string]*templateListItem{}
	item := func(name string) *templateListItem {
		it := items[name]
		if it == nil {
			it = &templateListItem{TemplateID: name, Aliases: []string{name}, Names: []string{name},
				DiskSizeMB: t.diskMB, EnvdVersion: envdVersion}
			items[name] = it
		}
		return it
	}
	apiBuilt := map[string]bool{}
	for _, b := range builds {
		apiBuilt[b.Template] = true
	}
	versions := make(map[string]template.Spec, len(cached))
	for _, v := range cached {
		versions[v.ID] = v.Spec
	}
	for _, v := range cached { // newest first within a name
		if apiBuilt[v.Name] {
			continue
		}
		it := item(v.Name)
		if it.BuildCount == 0 {
			it.BuildID, it.BuildStatus, it.UpdatedAt = v.ID, string(store.BuildReady), v.BuiltAt
			it.CPUCount, it.MemoryMB = t.resources(v.Spec.CPUCount, v.Spec.MemoryMB)
			it.Recording = v.Spec.Recording
		}
		it.BuildCount++
		it.CreatedAt = v.BuiltAt
	}
	t.mu.Lock()
	running := map[string]bool{}
	for _, run := range t.runs {
		running[run.template] = true
	}
	t.mu.Unlock()
	for _, b := range builds { // oldest first within a name
		it := item(b.Template)
		if it.BuildCount == 0 {
			it.CreatedAt = b.CreatedAt
		}
		it.BuildCount++
		it.BuildStatus = string(b.Status)
		it.UpdatedAt = cmp.Or(b.FinishedAt, b.StartedAt, b.CreatedAt)
		if b.Status == store.BuildReady {
			it.BuildID = b.ID
			it.CPUCount, it.MemoryMB = t.resources(b.Resources.CPUCount, b.Resources.MemoryMB)
			it.Recording = versions[b.VersionID].Recording
		}
	}
	// A built-in template the server builds itself: being built (perhaps
	// over an older version, which is served until then) or failed.
	if t.builtIns != nil {
		for name, st := range t.builtIns() {
			it := item(name)
			if it.BuildCount == 0 {
				it.CreatedAt, it.UpdatedAt = t.now(), t.now()
			}
			it.BuildStatus = string(st)
		}
	}
	out := make([]templateListItem, 0, len(items))
	for name, it := range items {
		if running[name] {
			it.BuildStatus = string(store.BuildBuilding)
		}
		if it.BuildID == "" { // never built: what it will get
			it.CPUCount, it.MemoryMB = t.resources(0, 0)
		}
		if sp, ok := spawns[name]; ok {
			it.SpawnCount, it.LastSpawnedAt = sp.Count, &sp.Last
		}
		out = append(out, *it)
	}
	slices.SortFunc(out, func(a, b templateListItem) int { return strings.Compare(a.TemplateID, b.TemplateID) })
	return out, nil
}

// resources are what a template's sandboxes get: its own, or the
// server's defaults.
func (t *TemplateBuilds) resources(cpu, mem int) (int, int) {
	return cmp.Or(cpu, t.defaults.CPUCount), cmp.Or(mem, t.defaults.MemoryMB)
}

// deleteTemplate implements DELETE /templates/{templateID}, E2B's delete
// of a template and of a snapshot (which is a template there): the
// snapshot of that name, else the template of that name, every tag of it
// (the tag of name:tag is dropped, as E2B does). 204; 404 when there is
// neither; 400 while sandboxes or snapshots need the template's files.
func (h *Handler) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("templateID")
	err := h.sandboxes.DeleteSnapshot(r.Context(), ref)
	name, _, _ := strings.Cut(ref, ":")
	if errors.Is(err, sandbox.ErrNotFound) && h.templates != nil && template.ValidName(name) {
		err = h.templates.deleteTemplate(r.Context(), h.sandboxes, name)
	}
	if err != nil {
		h.fail(w, r, "", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// deleteTemplate deletes template name, its files (every version in the
// engine's cache) and its builds and tags, once sbs finds that nothing
// runs over them.
func (t *TemplateBuilds) deleteTemplate(ctx context.Context, sbs Sandboxes, name string) error {
	if _, builtIn := template.BuiltIn()[name]; builtIn {
		return fmt.Errorf("%w: template '%s' is built in: the server builds it itself and keeps it", sandbox.ErrInvalid, name)
	}
	known, err := t.records.TemplateKnown(ctx, name)
	if err != nil {
		return err
	}
	_, lookupErr := t.builder.Lookup(name)
	if !known && errors.Is(lookupErr, template.ErrNotFound) {
		return fmt.Errorf("%w: template '%s' not found", sandbox.ErrNotFound, name)
	}
	t.mu.Lock()
	building := false
	for _, run := range t.runs {
		building = building || run.template == name || template.NameOf(run.from) == name
	}
	t.mu.Unlock()
	if building {
		return fmt.Errorf("%w: a build of template '%s', or of a template from it, is queued or running; delete it when the build has ended", sandbox.ErrConflict, name)
	}
	return sbs.DeleteTemplate(ctx, name, func(ctx context.Context) error {
		if _, err := t.builder.Remove(ctx, name); err != nil && !errors.Is(err, template.ErrNotFound) {
			return err
		}
		if err := t.records.DeleteTemplateBuilds(ctx, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		t.log.Info("template deleted", "template", name)
		return nil
	})
}
