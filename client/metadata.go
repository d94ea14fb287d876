package client

import (
	"slices"
	"strings"
)

// EncodeMetadata encodes a metadata filter for GET /v2/sandboxes the way the
// official SDKs do before the query string is built: each key and value is
// escaped with JavaScript's encodeURIComponent, and the pairs are then
// serialized as URLSearchParams does (application/x-www-form-urlencoded,
// which escapes the "%" signs again). Pairs are sorted by key. The result is
// escaped once more when it is put into the query; ListSandboxes does that.
//
// For {"sandbox Id": "x&y=z"} the result is "sandbox%2520Id=x%2526y%253Dz".
func EncodeMetadata(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = formEncode(encodeURIComponent(k)) + "=" + formEncode(encodeURIComponent(m[k]))
	}
	return strings.Join(pairs, "&")
}

// encodeURIComponent is JavaScript's function of that name: it escapes every
// UTF-8 byte except A-Z a-z 0-9 - _ . ! ~ * ' ( ).
func encodeURIComponent(s string) string {
	return escape(s, func(c byte) bool { return alnum(c) || strings.IndexByte("-_.!~*'()", c) >= 0 }, false)
}

// formEncode is the application/x-www-form-urlencoded serializer of the URL
// standard (used by URLSearchParams): it keeps A-Z a-z 0-9 * - . _, turns a
// space into "+" and escapes every other byte.
func formEncode(s string) string {
	return escape(s, func(c byte) bool { return alnum(c) || strings.IndexByte("*-._", c) >= 0 }, true)
}

func alnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func escape(s string, keep func(byte) bool, spaceAsPlus bool) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case keep(c):
			b.WriteByte(c)
		case c == ' ' && spaceAsPlus:
			b.WriteByte('+')
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}
