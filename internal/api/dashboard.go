package api

import (
	"html/template"
	"net/http"
)

// inspectPage is what https://<domain>/dashboard/inspect/sandbox/<id>
// answers, the link the E2B CLI prints for every sandbox it connects to,
// until this server has a dashboard. A browser sends no API key, so the
// page holds nothing about the sandbox itself: it says how to inspect it,
// and loads GET /sandboxes/<id> from this same server with a key the
// reader types in (kept in the page only).
var inspectPage = template.Must(template.New("inspect").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Sandbox {{.}} — agent-sandbox</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 48rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.5 }
code, pre { background: #f3f3f3; padding: 0.1rem 0.3rem }
pre { padding: 0.8rem; overflow-x: auto }
</style>
</head>
<body>
<h1>Sandbox <code>{{.}}</code></h1>
<p>This agent-sandbox server has no dashboard yet. Inspect the sandbox with the E2B CLI:</p>
<pre>e2b sandbox info {{.}}
e2b sandbox logs {{.}}
e2b sandbox metrics {{.}}
e2b sandbox connect {{.}}</pre>
<p>or load what <code>GET /sandboxes/{{.}}</code> answers with an API key of this server:</p>
<form id="load"><input id="key" type="password" placeholder="API key" size="48" autocomplete="off"> <button>Load</button></form>
<pre id="out" hidden></pre>
<script>
document.getElementById('load').addEventListener('submit', async (e) => {
  e.preventDefault()
  const out = document.getElementById('out')
  out.hidden = false
  out.textContent = 'loading…'
  try {
    const res = await fetch('/sandboxes/' + encodeURIComponent({{.}}), { headers: { 'X-API-Key': document.getElementById('key').value } })
    out.textContent = res.status + ' ' + res.statusText + '\n' + JSON.stringify(await res.json(), null, 2)
  } catch (err) {
    out.textContent = String(err)
  }
})
</script>
</body>
</html>
`))

// inspectSandbox implements GET /dashboard/inspect/sandbox/{id}.
func (h *Handler) inspectSandbox(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page's own script only; no framing.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'none'; frame-ancestors 'none'")
	if err := inspectPage.Execute(w, r.PathValue("id")); err != nil {
		h.log.Debug("writing the sandbox page", "err", err)
	}
}
