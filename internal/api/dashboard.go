package api

import (
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// The dashboard (/dashboard) is pages and scripts embedded here,
// which call the API routes below under /dashboard/api with the session
// cookie in place of the X-API-Key header. The session is the API key
// itself, in a cookie scripts cannot read (HttpOnly), sent only on
// same-site requests (SameSite=Strict) and only over TLS when the server
// has it; a revoked key ends every session at once.
//
//go:embed dashboard
var dashboardFiles embed.FS

// sessionCookie holds a signed-in dashboard's API key.
const sessionCookie = "agent_sandbox_session"

// sessionAge is how long a sign-in lasts.
const sessionAge = 12 * time.Hour

// signInPage is the one dashboard page served without a session.
var signInPage = template.Must(template.ParseFS(dashboardFiles, "dashboard/sign-in.html"))

// Each other page is its own title, head and main in the shared layout;
// their scripts fill them in from the API.
var (
	sandboxesPage = layoutPage("sandboxes.html")
	sandboxPage   = layoutPage("sandbox.html")
	templatesPage = layoutPage("templates.html")
	keysPage      = layoutPage("keys.html")
	hostPage      = layoutPage("host.html")
)

func layoutPage(name string) *template.Template {
	return template.Must(template.ParseFS(dashboardFiles, "dashboard/layout.html", "dashboard/"+name)).Lookup("layout")
}

// dashboardRoutes registers the dashboard. Every route but the sign-in
// form needs a session; every unsafe method is refused cross-origin
// (Sec-Fetch-Site, else Origin against Host), the sign-in included.
func (h *Handler) dashboardRoutes() {
	csrf := http.NewCrossOriginProtection()
	handle := func(pattern string, next http.Handler) { h.mux.Handle(pattern, csrf.Handler(next)) }
	assets, err := fs.Sub(dashboardFiles, "dashboard/static")
	if err != nil {
		panic(err) // the embedded directory is there at build time
	}
	files := http.StripPrefix("/dashboard/static/", http.FileServerFS(assets))
	static := func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			writeError(w, http.StatusNotFound, "no route for "+r.Method+" "+r.URL.Path) // no listings
			return
		}
		files.ServeHTTP(w, r)
	}
	page := func(t *template.Template) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { h.render(w, http.StatusOK, t, nil) }
	}

	handle("GET /dashboard/sign-in", http.HandlerFunc(h.signInForm))
	handle("POST /dashboard/sign-in", http.HandlerFunc(h.signIn))
	handle("POST /dashboard/sign-out", h.page(h.signOut))
	handle("GET /dashboard/{$}", h.page(page(sandboxesPage)))
	// The link the E2B CLI prints for every sandbox it connects to.
	handle("GET /dashboard/inspect/sandbox/{id}", h.page(page(sandboxPage)))
	handle("GET /dashboard/static/", h.page(static))

	handle("GET /dashboard/api/v2/sandboxes", h.session(h.listV2))
	handle("GET /dashboard/api/sandboxes/{id}", h.session(h.getInfo))
	handle("DELETE /dashboard/api/sandboxes/{id}", h.session(h.kill))
	handle("POST /dashboard/api/sandboxes/{id}/pause", h.session(h.pause))
	handle("POST /dashboard/api/sandboxes/{id}/connect", h.session(h.connectV1))
	handle("POST /dashboard/api/sandboxes/{id}/timeout", h.session(h.setTimeout))
	handle("GET /dashboard/api/sandboxes/{id}/metrics", h.session(h.metrics))
	handle("GET /dashboard/api/sandboxes/{id}/terminal", h.session(h.terminal))
	handle("GET /dashboard/api/sandboxes/{id}/files", h.session(h.listFiles))
	handle("GET /dashboard/api/sandboxes/{id}/files/content", h.session(h.downloadFile))
	handle("POST /dashboard/api/sandboxes/{id}/files/content", h.session(h.uploadFile))
	handle("GET /dashboard/api/sandboxes/{id}/network/audit", h.session(h.egressAudit))
	if h.liveView != nil {
		handle("POST /dashboard/api/sandboxes/{id}/live-view", h.session(h.createLiveView))
	}

	handle("GET /dashboard/host", h.page(page(hostPage)))
	handle("GET /dashboard/api/host", h.session(h.host))
	if h.apiKeys != nil {
		handle("GET /dashboard/keys", h.page(page(keysPage)))
		handle("GET /dashboard/api/keys", h.session(h.listKeys))
		handle("POST /dashboard/api/keys", h.session(h.createKey))
		handle("DELETE /dashboard/api/keys/{keyID}", h.session(h.revokeKey))
	}
	if h.templates != nil {
		handle("GET /dashboard/templates", h.page(page(templatesPage)))
		handle("GET /dashboard/api/templates", h.session(h.listTemplates))
		handle("GET /dashboard/api/template-builds", h.session(h.templateBuilds))
		handle("GET /dashboard/api/templates/{templateID}/builds/{buildID}/status", h.session(h.templateBuildStatus))
	}
}

// pageHeaders are a dashboard page's: never cached, never framed, scripts
// from the server only (styles may be inline: xterm.js writes its own).
// The only frames it shows are sandboxes' live views, under the sandbox
// domain.
func (h *Handler) pageHeaders(w http.ResponseWriter) {
	frames := "'none'"
	if h.domain != "" {
		frames = "*." + h.domain
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-src "+frames+"; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// page wraps a dashboard page: without a valid session it redirects to
// the sign-in form.
func (h *Handler) page(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h.signedIn(r)
		if err == nil {
			next(w, r)
			return
		}
		if !errors.Is(err, store.ErrNotFound) {
			h.log.Error("verifying a dashboard session", "err", err)
			writeError(w, http.StatusInternalServerError, internalMessage)
			return
		}
		h.pageHeaders(w)
		http.Redirect(w, r, "/dashboard/sign-in", http.StatusSeeOther)
	})
}

// session wraps an API route the dashboard calls: it takes the API key
// from the session cookie, and answers 401 without one.
func (h *Handler) session(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(sessionCookie)
		if err != nil || c.Value == "" {
			writeError(w, http.StatusUnauthorized, "not signed in to the dashboard")
			return
		}
		if r, ok := h.verify(w, r, c.Value); ok {
			next(w, r)
		}
	})
}

// signedIn checks r's session; store.ErrNotFound when there is no valid
// one.
func (h *Handler) signedIn(r *http.Request) error {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return store.ErrNotFound
	}
	_, err = h.keys.VerifyAPIKey(r.Context(), c.Value)
	return err
}

// signInForm implements GET /dashboard/sign-in.
func (h *Handler) signInForm(w http.ResponseWriter, r *http.Request) {
	h.renderSignIn(w, http.StatusOK, "")
}

// signIn implements POST /dashboard/sign-in: a form with the API key in
// field key.
func (h *Handler) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, h.maxBody)
	key := r.PostFormValue("key")
	if key == "" {
		h.renderSignIn(w, http.StatusBadRequest, "Enter an API key (field key).")
		return
	}
	if _, err := h.keys.VerifyAPIKey(r.Context(), key); err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			h.log.Error("verifying api key", "err", err)
			writeError(w, http.StatusInternalServerError, internalMessage)
			return
		}
		h.renderSignIn(w, http.StatusUnauthorized, "That API key is not valid on this server.")
		return
	}
	h.setSession(w, r, key, int(sessionAge.Seconds()))
	http.Redirect(w, r, "/dashboard/", http.StatusSeeOther)
}

// signOut implements POST /dashboard/sign-out.
func (h *Handler) signOut(w http.ResponseWriter, r *http.Request) {
	h.setSession(w, r, "", -1)
	http.Redirect(w, r, "/dashboard/sign-in", http.StatusSeeOther)
}

// setSession sets the session cookie to key for maxAge seconds (-1
// deletes it).
func (h *Handler) setSession(w http.ResponseWriter, r *http.Request, key string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    key,
		Path:     "/dashboard",
		MaxAge:   maxAge,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
}

func (h *Handler) renderSignIn(w http.ResponseWriter, status int, problem string) {
	h.render(w, status, signInPage, problem)
}

// render answers with page t executed with data.
func (h *Handler) render(w http.ResponseWriter, status int, t *template.Template, data any) {
	h.pageHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := t.Execute(w, data); err != nil {
		h.log.Debug("writing a dashboard page", "page", t.Name(), "err", err)
	}
}
