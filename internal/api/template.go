package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// The E2B template build API (spec §2.8, docs/TEMPLATES.md). A template
// is known by its name, which is also its template ID on the wire; each
// Template.build() is one build: requested (POST /v3/templates), its COPY
// contexts uploaded, triggered (POST /v2/templates/{id}/builds/{build}),
// run in the background, polled for status and logs.

// TemplateBuilder builds templates; the server adapts *template.Builder.
type TemplateBuilder interface {
	// Build builds spec (or finds it in the cache), logging to log.
	Build(ctx context.Context, spec template.Spec, log *slog.Logger) (*template.Template, error)
	// ContextArchive is where the build context with files hash h is kept.
	ContextArchive(h string) string
	// Lookup finds a built template by name or ID.
	Lookup(ref string) (*template.Template, error)
	// List returns every built template version, by name, newest first.
	List() ([]template.Template, error)
	// Remove deletes every version of template ref.
	Remove(ctx context.Context, ref string) ([]template.Template, error)
}

// TemplateRecords stores builds and tags; *store.Store implements it.
type TemplateRecords interface {
	CreateTemplateBuild(ctx context.Context, template string, tags []string, res store.BuildResources) (store.TemplateBuild, error)
	GetTemplateBuild(ctx context.Context, template, id string) (store.TemplateBuild, error)
	TemplateKnown(ctx context.Context, template string) (bool, error)
	StartTemplateBuild(ctx context.Context, template, id string) error
	FinishTemplateBuild(ctx context.Context, id string, res store.BuildResult) error
	TemplateBuildLogs(ctx context.Context, id string, offset, limit int) ([]store.BuildLogEntry, error)
	FailUnfinishedTemplateBuilds(ctx context.Context, message string) (int64, error)
	TemplateVersion(ctx context.Context, ref string) (string, error)
	TemplateTags(ctx context.Context, template string) ([]store.TemplateTag, error)
	AssignTemplateTags(ctx context.Context, template, from string, tags []string) (string, error)
	RemoveTemplateTags(ctx context.Context, template string, tags []string) error
	AllTemplateBuilds(ctx context.Context) ([]store.TemplateBuild, error)
	TemplateSpawns(ctx context.Context) (map[string]store.TemplateSpawn, error)
	DeleteTemplateBuilds(ctx context.Context, template string) error
}

var _ TemplateRecords = (*store.Store)(nil)

// Defaults of TemplateConfig.
const (
	DefaultMaxContextBytes = 2 << 30
	DefaultMaxQueuedBuilds = 8
)

// TemplateConfig configures NewTemplateBuilds.
type TemplateConfig struct {
	Builder TemplateBuilder
	Records TemplateRecords
	// MaxContextBytes bounds one uploaded build context, both its upload
	// and its tar uncompressed (default DefaultMaxContextBytes).
	MaxContextBytes int64
	// ContextRetention is how long a build context no build holds is
	// kept unused (default DefaultContextRetention; template_contexts.go).
	ContextRetention time.Duration
	// MaxQueuedBuilds bounds the builds triggered and not finished; one
	// runs at a time (default DefaultMaxQueuedBuilds).
	MaxQueuedBuilds int
	Log             *slog.Logger
	// Now returns the current time (default time.Now).
	Now func() time.Time

	// Max bounds the cpuCount and memoryMB a build may ask for (the
	// operator's maxima); zero fields: no bound.
	Max sandbox.Maxima
	// SandboxDiskMB is the disk every sandbox starts with, all of it free
	// (the template is a read-only layer under it): the most minFreeDiskMb
	// a build may ask for.
	SandboxDiskMB int
	// Defaults are the cpuCount and memoryMB of a template that sets
	// none (the server's), for the template list.
	Defaults sandbox.Maxima
	// BuiltIns, when set, returns the templates the server builds itself
	// (built-in ones) that are being built or whose build failed, with
	// that status, for the template list; nil: none.
	BuiltIns func() map[string]store.BuildStatus
}

// TemplateBuilds runs the builds of the template build API in the
// background, one at a time, and keeps the logs of the builds in progress
// and the pending upload tokens. Close stops it.
type TemplateBuilds struct {
	builder    TemplateBuilder
	records    TemplateRecords
	maxContext int64
	maxQueued  int
	max        sandbox.Maxima
	defaults   sandbox.Maxima
	builtIns   func() map[string]store.BuildStatus
	diskMB     int
	log        *slog.Logger
	now        func() time.Time
	contexts   *contexts

	ctx    context.Context // cancelled by Close; the builds run under it
	cancel context.CancelFunc
	wg     sync.WaitGroup
	slot   chan struct{} // held by the build that runs

	mu      sync.Mutex               // guards runs and uploads
	runs    map[string]*buildRun     // by build ID: triggered, not yet finished
	uploads map[string]pendingUpload // by token
}

// NewTemplateBuilds marks builds an earlier process left running as failed
// and returns the build service.
func NewTemplateBuilds(ctx context.Context, cfg TemplateConfig) (*TemplateBuilds, error) {
	if cfg.Builder == nil || cfg.Records == nil {
		return nil, errors.New("template builds: Builder and Records are required")
	}
	t := &TemplateBuilds{
		builder: cfg.Builder, records: cfg.Records,
		maxContext: cfg.MaxContextBytes, maxQueued: cfg.MaxQueuedBuilds,
		max: cfg.Max, defaults: cfg.Defaults, builtIns: cfg.BuiltIns, diskMB: cfg.SandboxDiskMB,
		log: cfg.Log, now: cfg.Now,
		slot: make(chan struct{}, 1), runs: map[string]*buildRun{}, uploads: map[string]pendingUpload{},
	}
	if t.maxContext <= 0 {
		t.maxContext = DefaultMaxContextBytes
	}
	if t.maxQueued <= 0 {
		t.maxQueued = DefaultMaxQueuedBuilds
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	if t.now == nil {
		t.now = time.Now
	}
	t.contexts = &contexts{archive: cfg.Builder.ContextArchive, retention: cfg.ContextRetention, now: t.now, held: map[string]int{}}
	if t.contexts.retention <= 0 {
		t.contexts.retention = DefaultContextRetention
	}
	n, err := t.records.FailUnfinishedTemplateBuilds(ctx, "the server stopped during the build")
	if err != nil {
		return nil, err
	}
	if n > 0 {
		t.log.Warn("template builds interrupted by the last shutdown marked failed", "builds", n)
	}
	t.ctx, t.cancel = context.WithCancel(context.WithoutCancel(ctx))
	t.wg.Add(1)
	go t.sweepContexts()
	return t, nil
}

// Close cancels the builds in progress (they end failed) and the
// collection of build contexts, and waits for them.
func (t *TemplateBuilds) Close() error {
	t.cancel()
	t.wg.Wait()
	return nil
}

// templateRoutes registers the template build API.
func (h *Handler) templateRoutes() {
	h.mux.Handle("GET /templates", h.auth(h.listTemplates))
	h.mux.Handle("POST /v3/templates", h.auth(h.requestTemplateBuild))
	h.mux.Handle("GET /templates/{templateID}/files/{hash}", h.auth(h.templateFileLink))
	// The upload carries the token the link gave out, not an API key.
	h.mux.HandleFunc("PUT /templates/{templateID}/files/{hash}", h.uploadTemplateFile)
	h.mux.Handle("POST /v2/templates/{templateID}/builds/{buildID}", h.auth(h.startTemplateBuild))
	h.mux.Handle("GET /templates/{templateID}/builds/{buildID}/status", h.auth(h.templateBuildStatus))
	// GET /templates/aliases/{alias} and GET /templates/{templateID}/tags
	// overlap (/templates/aliases/tags), which ServeMux refuses: one
	// pattern takes both, the alias first.
	h.mux.Handle("GET /templates/{templateID}/{sub}", h.auth(h.templateAliasOrTags))
	h.mux.Handle("POST /templates/tags", h.auth(h.assignTemplateTags))
	h.mux.Handle("DELETE /templates/tags", h.auth(h.removeTemplateTags))
}

// templateAliasOrTags routes GET /templates/aliases/{alias} and GET
// /templates/{templateID}/tags.
func (h *Handler) templateAliasOrTags(w http.ResponseWriter, r *http.Request) {
	switch first, sub := r.PathValue("templateID"), r.PathValue("sub"); {
	case first == "aliases":
		h.templateAlias(w, r, sub)
	case sub == "tags":
		h.templateTags(w, r)
	default:
		writeError(w, http.StatusNotFound, "no route for "+r.Method+" "+r.URL.Path)
	}
}

// tagRE is the shape of a template tag.
var tagRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// parseTemplateName splits "name[:tag]" and checks both; the message is
// empty when ref is acceptable. A name of a built-in template is refused:
// building it would shadow what the server builds itself.
func parseTemplateName(field, ref string) (name, tag, msg string) {
	name, tag, hasTag := strings.Cut(ref, ":")
	if !template.ValidName(name) {
		return "", "", fmt.Sprintf("%s %q: want a template name of 1-63 of [a-z0-9._-], starting with a letter or digit, optionally followed by :tag", field, ref)
	}
	if hasTag && !tagRE.MatchString(tag) {
		return "", "", fmt.Sprintf("%s %q: tag %q: want 1-128 of [A-Za-z0-9._-], starting with a letter or digit", field, ref, tag)
	}
	if _, builtIn := template.BuiltIn()[name]; builtIn {
		return "", "", fmt.Sprintf("%s %q: %s is a built-in template and cannot be rebuilt through the API", field, ref, name)
	}
	return name, tag, ""
}

// checkTags validates a list of tags; the message is empty when they are
// acceptable.
func checkTags(tags []string) string {
	if len(tags) > 32 {
		return fmt.Sprintf("tags: at most 32, got %d", len(tags))
	}
	for _, t := range tags {
		if !tagRE.MatchString(t) {
			return fmt.Sprintf("tag %q: want 1-128 of [A-Za-z0-9._-], starting with a letter or digit", t)
		}
	}
	return ""
}

// requestBody is TemplateBuildRequestV3. cpuCount and memoryMB are what
// the template's sandboxes get (0 or absent: the server's defaults);
// minFreeDiskMb is met by every sandbox's whole, empty disk, up to its
// size.
type requestBody struct {
	Name          string   `json:"name"`
	Alias         string   `json:"alias"`
	Tags          []string `json:"tags"`
	CPUCount      *int64   `json:"cpuCount"`
	MemoryMB      *int64   `json:"memoryMB"`
	MinFreeDiskMB *int64   `json:"minFreeDiskMb"`
}

// templateView is TemplateRequestResponseV3.
type templateView struct {
	TemplateID string   `json:"templateID"`
	BuildID    string   `json:"buildID"`
	Public     bool     `json:"public"`
	Names      []string `json:"names"`
	Tags       []string `json:"tags"`
	Aliases    []string `json:"aliases"`
}

// requestTemplateBuild implements POST /v3/templates: a new build of the
// template named by name (or alias), "name:tag" or name plus tags.
func (h *Handler) requestTemplateBuild(w http.ResponseWriter, r *http.Request) {
	var body requestBody
	if !h.decodeRequiredBody(w, r, &body) {
		return
	}
	ref := body.Name
	if ref == "" {
		ref = body.Alias
	}
	if ref == "" {
		writeError(w, http.StatusBadRequest, "name is required")
		return
	}
	name, tag, msg := parseTemplateName("name", ref)
	if msg == "" {
		msg = checkTags(body.Tags)
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"cpuCount", body.CPUCount}, {"memoryMB", body.MemoryMB}, {"minFreeDiskMb", body.MinFreeDiskMB}} {
		if f.v != nil && *f.v < 0 && msg == "" {
			msg = fmt.Sprintf("%s must not be negative, got %d", f.name, *f.v)
		}
	}
	if msg == "" {
		msg = h.templates.checkResources(body)
	}
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	tags := slices.Clone(body.Tags)
	if tag != "" {
		tags = append(tags, tag)
	}
	if len(tags) == 0 {
		tags = []string{store.DefaultTag}
	}
	slices.Sort(tags)
	tags = slices.Compact(tags)
	res := store.BuildResources{CPUCount: int(deref(body.CPUCount)), MemoryMB: int(deref(body.MemoryMB))}
	b, err := h.templates.records.CreateTemplateBuild(r.Context(), name, tags, res)
	if err != nil {
		h.templateFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, templateView{
		TemplateID: name, BuildID: b.ID, Names: []string{name}, Tags: tags, Aliases: []string{name},
	})
}

// checkResources checks a build request's resources against the
// operator's maxima; the message is empty when they fit. A value above one
// is refused, never lowered.
func (t *TemplateBuilds) checkResources(body requestBody) string {
	cpu, mem := deref(body.CPUCount), deref(body.MemoryMB)
	if cpu > math.MaxInt32 || mem > math.MaxInt32 {
		return fmt.Sprintf("cpuCount %d or memoryMB %d is out of range", cpu, mem)
	}
	if err := t.max.Check(int(cpu), int(mem), isolation.DiskIO{}); err != nil {
		return err.Error()
	}
	if free := deref(body.MinFreeDiskMB); t.diskMB > 0 && free > int64(t.diskMB) {
		return fmt.Sprintf("minFreeDiskMb %d is more than this server gives: every sandbox starts with its whole disk of %d MiB free", free, t.diskMB)
	}
	return ""
}

// deref returns *v, or 0 for nil.
func deref(v *int64) int64 {
	if v == nil {
		return 0
	}
	return *v
}

// templateAlias implements GET /templates/aliases/{alias}: 200 when a
// template of that name is built, 404 otherwise (a failed build leaves
// none).
func (h *Handler) templateAlias(w http.ResponseWriter, r *http.Request, alias string) {
	if !template.ValidName(alias) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("alias %q is not a template name", alias))
		return
	}
	if _, err := h.templates.builder.Lookup(alias); err != nil {
		if errors.Is(err, template.ErrNotFound) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("template alias %q not found", alias))
			return
		}
		h.templateFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		TemplateID string `json:"templateID"`
		Public     bool   `json:"public"`
	}{alias, false})
}

// assignTagsBody is AssignTemplateTagsRequest.
type assignTagsBody struct {
	Target string   `json:"target"`
	Tags   []string `json:"tags"`
}

// assignTemplateTags implements POST /templates/tags: the tags point at
// the build target ("name:tag", or "name" for its default tag) points at.
func (h *Handler) assignTemplateTags(w http.ResponseWriter, r *http.Request) {
	var body assignTagsBody
	if !h.decodeRequiredBody(w, r, &body) {
		return
	}
	name, from, msg := parseTemplateName("target", body.Target)
	if msg == "" && len(body.Tags) == 0 {
		msg = "tags: at least one tag is required"
	}
	if msg == "" {
		msg = checkTags(body.Tags)
	}
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if from == "" {
		from = store.DefaultTag
	}
	buildID, err := h.templates.records.AssignTemplateTags(r.Context(), name, from, body.Tags)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("template %s has no tag %q", name, from))
		return
	}
	if err != nil {
		h.templateFail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, struct {
		BuildID string   `json:"buildID"`
		Tags    []string `json:"tags"`
	}{buildID, body.Tags})
}

// removeTagsBody is the body of DELETE /templates/tags.
type removeTagsBody struct {
	Name string   `json:"name"`
	Tags []string `json:"tags"`
}

// removeTemplateTags implements DELETE /templates/tags.
func (h *Handler) removeTemplateTags(w http.ResponseWriter, r *http.Request) {
	var body removeTagsBody
	if !h.decodeRequiredBody(w, r, &body) {
		return
	}
	name, tag, msg := parseTemplateName("name", body.Name)
	if msg == "" && tag != "" {
		msg = fmt.Sprintf("name %q: give the tags to remove in tags, not in the name", body.Name)
	}
	if msg == "" && len(body.Tags) == 0 {
		msg = "tags: at least one tag is required"
	}
	if msg == "" {
		msg = checkTags(body.Tags)
	}
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	err := h.templates.records.RemoveTemplateTags(r.Context(), name, body.Tags)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	if err != nil {
		h.templateFail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// tagView is TemplateTag.
type tagView struct {
	Tag       string    `json:"tag"`
	BuildID   string    `json:"buildID"`
	CreatedAt time.Time `json:"createdAt"`
}

// templateTags implements GET /templates/{templateID}/tags.
func (h *Handler) templateTags(w http.ResponseWriter, r *http.Request) {
	name, ok := h.knownTemplate(w, r)
	if !ok {
		return
	}
	tags, err := h.templates.records.TemplateTags(r.Context(), name)
	if err != nil {
		h.templateFail(w, r, err)
		return
	}
	out := make([]tagView, 0, len(tags))
	for _, t := range tags {
		out = append(out, tagView{Tag: t.Tag, BuildID: t.BuildID, CreatedAt: t.CreatedAt})
	}
	writeJSON(w, http.StatusOK, out)
}

// knownTemplate returns the path's templateID when the API has builds of
// it; otherwise it has answered 400 or 404.
func (h *Handler) knownTemplate(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("templateID")
	if !template.ValidName(name) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("templateID %q is not a template name", name))
		return "", false
	}
	known, err := h.templates.records.TemplateKnown(r.Context(), name)
	if err != nil {
		h.templateFail(w, r, err)
		return "", false
	}
	if !known {
		writeError(w, http.StatusNotFound, fmt.Sprintf("template %q doesn't exist or you don't have access to it", name))
		return "", false
	}
	return name, true
}

// templateFail answers an unexpected error: 500, the detail only in the
// log.
func (h *Handler) templateFail(w http.ResponseWriter, r *http.Request, err error) {
	h.log.Error("api request", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, internalMessage)
}
