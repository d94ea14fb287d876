package template

import "slices"

// BrowserName is the built-in template with a web browser.
const BrowserName = "browser"

// Browser returns the spec of the built-in "browser" template: base with
// Debian's Chromium, for headless use (`chromium --headless`, without
// Chromium's own sandbox: chromiumNoSandbox). Every sandbox runs one
// headless Chromium with the DevTools protocol on DevToolsPort, which a
// create waits for.
func Browser() Spec {
	return Spec{
		Name:      BrowserName,
		From:      BaseName,
		Packages:  slices.Clone(chromiumPackages),
		Steps:     []Step{chromiumNoSandbox},
		StartCmd:  chromiumStartCmd("", nil, []string{"--headless"}),
		ReadyPort: DevToolsPort,
	}
}
