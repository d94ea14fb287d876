package template

import "slices"

// DesktopName is the built-in template @e2b/desktop creates sandboxes from
// by default.
const DesktopName = "desktop"

// DesktopDisplay is the X display sandboxes of the desktop template use:
// the @e2b/desktop SDK's default, which it also passes as DISPLAY.
const DesktopDisplay = ":0"

// Desktop returns the spec of the built-in "desktop" template: base with
// what @e2b/desktop runs in the sandbox (spec §5), all from Debian, and
// Chromium. Sandbox.create in the SDK starts Xvfb on DesktopDisplay and
// then startxfce4, and stream.start runs x11vnc and noVNC's novnc_proxy
// from /opt/noVNC; the template does not start the display itself, since
// the SDK chooses its size.
//
// What the template starts is Chromium, headful on the display as soon as
// it is up (and again whenever it is up after Chromium exits), with the
// DevTools protocol on DevToolsPort as in the browser template: the
// DevTools endpoint, the browser action API, the computer-use executors
// and the live view all see the one browser. A create does not wait for
// it, since the display comes after the create.
//
// XFCE is cut down to what the SDK waits for (xfce4-session, xfwm4,
// xfdesktop) with dbus-launch for its session bus; xterm is the one other
// application, for typing into a window. DISPLAY is also a template
// default so that plain e2b sandboxes of this template reach the display.
func Desktop() Spec {
	packages := []string{
		// The X server, the fonts it cannot start without, and the
		// probes the SDK runs: xdpyinfo (x11-utils), xrandr
		// (x11-xserver-utils).
		"xvfb", "xfonts-base", "x11-utils", "x11-xserver-utils",
		// The desktop: startxfce4 is in xfce4-session.
		"xfce4-session", "xfwm4", "xfdesktop4", "dbus-x11",
		// Input, screenshots, xdg-open and gtk-launch.
		"xdotool", "scrot", "xdg-utils", "libgtk-3-bin", "xterm",
		// The stream: x11vnc, noVNC with websockify, and netstat, which
		// the SDK polls for the noVNC port.
		"x11vnc", "novnc", "python3-websockify", "net-tools",
		// Recordings of the display (x11grab), internal/computeruse.
		"ffmpeg",
	}
	return Spec{
		Name:     DesktopName,
		From:     BaseName,
		Packages: slices.Concat(packages, chromiumPackages),
		Steps: []Step{
			// The SDK runs `cd /opt/noVNC/utils && ./novnc_proxy --web
			// /opt/noVNC`, where E2B's image has its noVNC checkout; Debian
			// installs the same tree under /usr/share/novnc.
			{Symlink: &SymlinkStep{Path: "/opt/noVNC", Target: "/usr/share/novnc"}},
			chromiumNoSandbox,
		},
		Env: map[string]string{"DISPLAY": DesktopDisplay},
		StartCmd: chromiumStartCmd(
			"until xdpyinfo -display "+DesktopDisplay+" >/dev/null 2>&1; do sleep 0.5; done",
			[]string{"DISPLAY=" + DesktopDisplay},
			// A window over the whole display, without the first run's
			// dialogs or the keyring's, drawn without a GPU.
			[]string{"--start-maximized", "--no-first-run", "--no-default-browser-check", "--password-store=basic", "--disable-gpu"},
		),
	}
}
