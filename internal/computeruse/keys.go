package computeruse

import (
	"regexp"
	"strings"
)

// keyAliases maps key names the vendors' models use, lower-cased, to X
// keysym names xdotool knows. Anthropic's tool speaks xdotool already
// ("Return", "ctrl+s"), but models also write "Enter" or "cmd"; OpenAI's
// actions name keys in capitals ("ENTER", "CTRL", "ARROWLEFT").
var keyAliases = map[string]string{
	"enter": "Return", "return": "Return", "esc": "Escape", "escape": "Escape",
	"backspace": "BackSpace", "tab": "Tab", "space": "space", "spacebar": "space",
	"delete": "Delete", "del": "Delete", "insert": "Insert", "home": "Home", "end": "End",
	"pageup": "Page_Up", "page_up": "Page_Up", "pgup": "Page_Up",
	"pagedown": "Page_Down", "page_down": "Page_Down", "pgdn": "Page_Down",
	"up": "Up", "down": "Down", "left": "Left", "right": "Right",
	"arrowup": "Up", "arrowdown": "Down", "arrowleft": "Left", "arrowright": "Right",
	"ctrl": "ctrl", "control": "ctrl", "alt": "alt", "option": "alt", "shift": "shift",
	"cmd": "super", "command": "super", "meta": "super", "super": "super", "win": "super", "windows": "super",
	"capslock": "Caps_Lock", "caps_lock": "Caps_Lock", "printscreen": "Print", "print": "Print",
	"f1": "F1", "f2": "F2", "f3": "F3", "f4": "F4", "f5": "F5", "f6": "F6",
	"f7": "F7", "f8": "F8", "f9": "F9", "f10": "F10", "f11": "F11", "f12": "F12",
}

// punctuation maps printable characters that are not keysym names of
// their own to the names xdotool takes.
var punctuation = map[string]string{
	" ": "space", "/": "slash", "\\": "backslash", "-": "minus", "=": "equal", "+": "plus",
	",": "comma", ".": "period", ";": "semicolon", ":": "colon", "'": "apostrophe", "\"": "quotedbl",
	"`": "grave", "~": "asciitilde", "[": "bracketleft", "]": "bracketright", "{": "braceleft",
	"}": "braceright", "!": "exclam", "@": "at", "#": "numbersign", "$": "dollar", "%": "percent",
	"^": "asciicircum", "&": "ampersand", "*": "asterisk", "(": "parenleft", ")": "parenright",
	"_": "underscore", "|": "bar", "<": "less", ">": "greater", "?": "question",
}

// keysymName is what xdotool may be handed as a key name as it stands.
var keysymName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_]*$`)

// xdotoolKey maps one key name to xdotool's, or reports that it is none.
func xdotoolKey(name string) (string, bool) {
	if k, ok := keyAliases[strings.ToLower(name)]; ok {
		return k, true
	}
	if k, ok := punctuation[name]; ok {
		return k, true
	}
	if keysymName.MatchString(name) {
		return name, true
	}
	return "", false
}

// xdotoolCombo maps keys pressed together ("ctrl", "s") to xdotool's
// "ctrl+s"; field names the part of the request they came from.
func xdotoolCombo(keys []string, field string) (string, error) {
	if len(keys) == 0 {
		return "", inputErrorf(field, "no key")
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		x, ok := xdotoolKey(k)
		if !ok {
			return "", inputErrorf(field, "%q is not a key name", k)
		}
		out[i] = x
	}
	return strings.Join(out, "+"), nil
}

// splitCombo splits Anthropic's "ctrl+shift+t" into its keys; "ctrl++"
// is ctrl and plus.
func splitCombo(combo string) []string {
	if combo == "+" {
		return []string{"+"}
	}
	parts := strings.Split(combo, "+")
	if n := len(parts); n >= 2 && parts[n-1] == "" && parts[n-2] == "" {
		parts = append(parts[:n-2], "+")
	}
	return parts
}
