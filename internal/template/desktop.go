package template

// DesktopName is the built-in template @e2b/desktop creates sandboxes from
// by default.
const DesktopName = "desktop"

// DesktopDisplay is the X display sandboxes of the desktop template use:
// the @e2b/desktop SDK's default, which it also passes as DISPLAY.
const DesktopDisplay = ":0"

// Desktop returns the spec of the built-in "desktop" template: base with
// what @e2b/desktop runs in the sandbox (spec §5), all from Debian. The
// template starts nothing itself: Sandbox.create in the SDK starts Xvfb on
// DesktopDisplay and then startxfce4, and stream.start runs x11vnc and
// noVNC's novnc_proxy from /opt/noVNC.
//
// XFCE is cut down to what the SDK waits for (xfce4-session, xfwm4,
// xfdesktop) with dbus-launch for its session bus; xterm is the one
// application, for typing into a window. DISPLAY is also a template
// default so that plain e2b sandboxes of this template reach the display.
func Desktop() Spec {
	return Spec{
		Name: DesktopName,
		From: BaseName,
		Packages: []string{
			// The X server, the fonts it cannot start without, and the
			// probes the SDK runs: xdpyinfo (x11-utils), xrandr
			// (x11-xserver-utils).
			"xvfb", "xfonts-base", "x11-utils", "x11-xserver-utils",
			// The desktop: startxfce4 is in xfce4-session.
			"xfce4-session", "xfwm4", "xfdesktop4", "dbus-x11", "fonts-dejavu-core",
			// Input, screenshots, xdg-open and gtk-launch.
			"xdotool", "scrot", "xdg-utils", "libgtk-3-bin", "xterm",
			// The stream: x11vnc, noVNC with websockify, and netstat, which
			// the SDK polls for the noVNC port.
			"x11vnc", "novnc", "python3-websockify", "net-tools",
			// Recordings of the display (x11grab), internal/computeruse.
			"ffmpeg",
		},
		Steps: []Step{
			// The SDK runs `cd /opt/noVNC/utils && ./novnc_proxy --web
			// /opt/noVNC`, where E2B's image has its noVNC checkout; Debian
			// installs the same tree under /usr/share/novnc.
			{Symlink: &SymlinkStep{Path: "/opt/noVNC", Target: "/usr/share/novnc"}},
		},
		Env: map[string]string{"DISPLAY": DesktopDisplay},
	}
}
