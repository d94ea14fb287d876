package template

// ValidName reports whether s can name a template: 1-63 of [a-z0-9._-],
// starting with a letter or digit, as [Spec.Validate] requires. Front ends
// check names they are given before building a spec from them.
func ValidName(s string) bool { return nameRE.MatchString(s) }
