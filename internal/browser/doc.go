// Package browser drives the Chromium of a browser sandbox over the
// DevTools protocol: the browser action API of docs/BROWSER.md (navigate,
// click, fill, select, press, scroll, wait, extract, screenshot, PDF).
//
// It attaches to the page Chromium already shows (the one the external
// DevTools endpoint at getHost(9222) shares) rather than starting a
// browser of its own, and keeps one [Session] per sandbox in [Sessions],
// through which a sandbox's actions run one at a time. The protocol's
// types come from github.com/chromedp/cdproto; the connection is a
// [cdp.Session] over a WebSocket dialed through the sandbox manager.
package browser
