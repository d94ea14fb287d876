package codeinterp

import (
	"bytes"
	"encoding/json"
	"time"
)

// unexpectedEnd is the error name of an execution that ended abnormally.
const unexpectedEnd = "UnexpectedEndOfExecution"

var (
	keepaliveLine = []byte(`{"type":"keepalive"}` + "\n")
	endLine       = []byte(`{"type":"end_of_execution"}` + "\n")
)

// resultFields maps the MIME types with a field of their own in a result
// line to that field; any other MIME type goes inside "extra".
var resultFields = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

// outputLine encodes o as a line of the /execute stream.
func outputLine(o Output, now time.Time) []byte {
	switch o.Kind {
	case Stdout, Stderr:
		return encodeLine(map[string]any{
			"type":      o.Kind.String(),
			"text":      o.Text,
			"timestamp": now.Format(time.RFC3339Nano),
		})
	case Count:
		return encodeLine(map[string]any{"type": o.Kind.String(), "execution_count": o.Count})
	case Error:
		return encodeLine(map[string]any{"type": "error", "name": o.Name, "value": o.Value, "traceback": o.Traceback})
	case Result:
		return encodeLine(resultLine(o.Data, o.IsMain))
	}
	return nil
}

// resultLine maps a MIME bundle to the keys of a result line. Null values
// are left out, and text/plain loses one pair of surrounding single quotes
// (the repr of a Python str or util.inspect of a JS string), as the official
// server does.
func resultLine(data map[string]any, isMain bool) map[string]any {
	line := map[string]any{"type": "result", "is_main_result": isMain}
	extra := map[string]any{}
	for mime, v := range data {
		if v == nil {
			continue
		}
		field, ok := resultFields[mime]
		if !ok {
			extra[mime] = v
			continue
		}
		if s, ok := v.(string); ok && field == "text" {
			v = stripQuotes(s)
		}
		line[field] = v
	}
	if len(extra) > 0 {
		line["extra"] = extra
	}
	return line
}

func stripQuotes(s string) string {
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		return s[1 : len(s)-1]
	}
	return s
}

func errorLine(name, value string) []byte {
	return encodeLine(map[string]any{"type": "error", "name": name, "value": value, "traceback": ""})
}

// encodeLine encodes v as one JSON line. Values come from runtimes and
// are JSON-encodable; one that is not is replaced by an error line, so
// the stream stays well-formed.
func encodeLine(v map[string]any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		buf.Reset()
		_ = enc.Encode(map[string]any{"type": "error", "name": "EncodingError", "value": err.Error(), "traceback": ""})
	}
	return buf.Bytes()
}
