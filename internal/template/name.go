package template

// ValidName reports whether s can name a template: 1-63 of [a-z0-9._-],
// starting with a letter or digit, as [Spec.Validate] requires. Front ends
// check names they are given before building a spec from them.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// NameOf returns the name of the template ref refers to: the name part of
// a template ID (name-<12 hex digits>), else ref itself.
func NameOf(ref string) string {
	if idRE.MatchString(ref) {
		return ref[:len(ref)-13]
	}
	return ref
}
