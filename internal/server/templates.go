package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/agent-sandbox/agent-sandbox/internal/api"
	"github.com/agent-sandbox/agent-sandbox/internal/sandbox"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// templateRegistry resolves template references for sandboxes: the
// names the template build API gives out ("name:tag", or a name it built,
// meaning its default tag) through the store, anything else (built-in
// and CLI-built templates, IDs) through the builder's cache. A built-in
// template other than base that is not built yet is built on demand
// (builtIns), and answered with a *template.BuildingError meanwhile.
type templateRegistry struct {
	builder  *template.Builder
	store    *store.Store
	builtIns *builtIns
}

var _ sandbox.Templates = templateRegistry{}

// Lookup implements sandbox.Templates.
func (r templateRegistry) Lookup(ref string) (*template.Template, error) {
	// The manager's interface carries no context; the query is one
	// indexed read.
	v, err := r.store.TemplateVersion(context.Background(), ref)
	switch {
	case err == nil:
		return r.builder.Lookup(v)
	case !errors.Is(err, store.ErrNotFound):
		return nil, err
	}
	t, err := r.builder.Lookup(ref)
	if _, builtIn := template.BuiltIn()[ref]; builtIn && ref != template.BaseName && errors.Is(err, template.ErrNotFound) {
		return nil, r.builtIns.missing(ref)
	}
	return t, err
}

// apiBuilder gives the template build API builds with their own logger.
type apiBuilder struct{ *template.Builder }

var _ api.TemplateBuilder = apiBuilder{}

// Build implements api.TemplateBuilder. The copy of the builder shares
// its cache; only the logger differs, and no progress display is drawn.
func (b apiBuilder) Build(ctx context.Context, spec template.Spec, log *slog.Logger) (*template.Template, error) {
	c := *b.Builder
	c.Log, c.Progress = log, nil
	return c.Ensure(ctx, spec)
}
