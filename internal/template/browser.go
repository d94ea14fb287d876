package template

// BrowserName is the built-in template with a web browser.
const BrowserName = "browser"

// Browser returns the spec of the built-in "browser" template: base with
// Debian's Chromium, for headless use (`chromium --headless`), and a font
// so that pages render text in screenshots and PDFs.
//
// Chromium's own sandbox cannot start in a sandbox (it needs user
// namespaces, which sandboxes may not create, or the setuid helper, which
// is not installed), so /usr/bin/chromium passes --no-sandbox by default:
// the sandbox is the isolation boundary. Programs that start
// /usr/lib/chromium/chromium itself must pass the flag.
func Browser() Spec {
	return Spec{
		Name:     BrowserName,
		From:     BaseName,
		Packages: []string{"chromium", "fonts-dejavu-core"},
		Steps: []Step{
			// Debian's wrapper script sources every file in /etc/chromium.d.
			{File: &FileStep{
				Path:    "/etc/chromium.d/agent-sandbox",
				Content: "# Chromium's sandbox cannot start inside an agent-sandbox sandbox.\nexport CHROMIUM_FLAGS=\"$CHROMIUM_FLAGS --no-sandbox\"\n",
				Mode:    0o644,
			}},
		},
	}
}
