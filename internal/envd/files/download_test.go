package files

import (
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestDownloadErrors(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "a.txt")
	writeTestFile(t, file, "a")
	tests := []struct {
		name    string
		query   string
		header  http.Header
		status  int
		message string
	}{
		{name: "missing", query: query("path", filepath.Join(dir, "nope.txt")),
			status: 404, message: "path '" + filepath.Join(dir, "nope.txt") + "' does not exist"},
		{name: "missing, path cleaned", query: query("path", dir+"/x/../nope.txt"),
			status: 404, message: "path '" + filepath.Join(dir, "nope.txt") + "' does not exist"},
		{name: "directory", query: query("path", dir+"/"), status: 400, message: "path '" + dir + "' is a directory"},
		{name: "fifo", query: query("path", fifo), status: 400, message: "path '" + fifo + "' is not a regular file"},
		{name: "identity refused", query: query("path", file), header: http.Header{"Accept-Encoding": {"identity;q=0"}},
			status: 406, message: "no acceptable content encoding: this endpoint serves gzip and identity"},
		{name: "everything refused", query: query("path", file), header: http.Header{"Accept-Encoding": {"*;q=0"}},
			status: 406, message: "no acceptable content encoding: this endpoint serves gzip and identity"},
		{name: "only br", query: query("path", file), header: http.Header{"Accept-Encoding": {"br, identity;q=0"}},
			status: 406, message: "no acceptable content encoding: this endpoint serves gzip and identity"},
		{name: "gzip and identity refused", query: query("path", file), header: http.Header{"Accept-Encoding": {"gzip;q=0, identity;q=0"}},
			status: 406, message: "no acceptable content encoding: this endpoint serves gzip and identity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkError(t, serve(newHandler(t, ""), "GET", tt.query, tt.header, nil), tt.status, tt.message)
		})
	}
}

func TestDownload(t *testing.T) {
	dir := t.TempDir()
	const hello = "hello, world\n"
	binary := string([]byte{0, 1, 2, 3, 0xff, 0xfe})
	files := map[string]string{"hello.txt": hello, "a b.txt": hello, "data": binary, "empty": ""}
	for name, content := range files {
		writeTestFile(t, filepath.Join(dir, name), content)
	}
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(dir, "hello.txt"), mtime, mtime); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name        string
		file        string
		header      http.Header
		status      int
		encoding    string // Content-Encoding
		body        string // decoded
		contentType string
		disposition string
	}{
		{name: "plain", file: "hello.txt", status: 200, body: hello,
			contentType: "text/plain; charset=utf-8", disposition: "inline; filename=hello.txt"},
		{name: "name needing quotes", file: "a b.txt", status: 200, body: hello,
			contentType: "text/plain; charset=utf-8", disposition: `inline; filename="a b.txt"`},
		{name: "sniffed type", file: "data", status: 200, body: binary,
			contentType: "application/octet-stream", disposition: "inline; filename=data"},
		{name: "empty", file: "empty", status: 200, body: "", disposition: "inline; filename=empty"},
		{name: "gzip", file: "hello.txt", header: http.Header{"Accept-Encoding": {"gzip"}}, status: 200, encoding: "gzip", body: hello,
			contentType: "text/plain; charset=utf-8", disposition: "inline; filename=hello.txt"},
		{name: "gzip, sniffed type", file: "data", header: http.Header{"Accept-Encoding": {"gzip, deflate"}}, status: 200, encoding: "gzip", body: binary,
			contentType: "application/octet-stream"},
		{name: "gzip, empty", file: "empty", header: http.Header{"Accept-Encoding": {"gzip"}}, status: 200, encoding: "gzip", body: ""},
		{name: "x-gzip", file: "hello.txt", header: http.Header{"Accept-Encoding": {"x-gzip"}}, status: 200, encoding: "gzip", body: hello},
		{name: "wildcard", file: "hello.txt", header: http.Header{"Accept-Encoding": {"*"}}, status: 200, encoding: "gzip", body: hello},
		{name: "gzip over wildcard refusal", file: "hello.txt", header: http.Header{"Accept-Encoding": {"*;q=0, gzip"}}, status: 200, encoding: "gzip", body: hello},
		{name: "gzip refused", file: "hello.txt", header: http.Header{"Accept-Encoding": {"gzip;q=0"}}, status: 200, body: hello},
		{name: "identity preferred", file: "hello.txt", header: http.Header{"Accept-Encoding": {"gzip;q=0.5, identity"}}, status: 200, body: hello},
		{name: "gzip preferred", file: "hello.txt", header: http.Header{"Accept-Encoding": {"gzip;q=1.0, identity;q=0.5"}}, status: 200, encoding: "gzip", body: hello},
		{name: "two header lines", file: "hello.txt", header: http.Header{"Accept-Encoding": {"br", "GZIP;Q=0.8"}}, status: 200, encoding: "gzip", body: hello},
		{name: "malformed q ignored", file: "hello.txt", header: http.Header{"Accept-Encoding": {"gzip;q=2"}}, status: 200, body: hello},
		{name: "unknown codings only", file: "hello.txt", header: http.Header{"Accept-Encoding": {"br, zstd"}}, status: 200, body: hello},
		{name: "range", file: "hello.txt", header: http.Header{"Range": {"bytes=0-4"}}, status: 206, body: "hello"},
		{name: "range wins over gzip", file: "hello.txt", header: http.Header{"Range": {"bytes=7-"}, "Accept-Encoding": {"gzip"}}, status: 206, body: "world\n"},
		{name: "range unsatisfiable", file: "hello.txt", header: http.Header{"Range": {"bytes=100-"}}, status: 416},
		{name: "range with identity refused gets all, gzip'ed", file: "hello.txt",
			header: http.Header{"Range": {"bytes=0-4"}, "Accept-Encoding": {"gzip, identity;q=0"}}, status: 200, encoding: "gzip", body: hello},
		{name: "not modified", file: "hello.txt",
			header: http.Header{"If-Modified-Since": {mtime.Format(http.TimeFormat)}, "Accept-Encoding": {"gzip"}}, status: 304},
		{name: "modified since", file: "hello.txt",
			header: http.Header{"If-Modified-Since": {mtime.Add(-time.Hour).Format(http.TimeFormat)}}, status: 200, body: hello},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := serve(newHandler(t, ""), "GET", query("path", filepath.Join(dir, tt.file)), tt.header, nil)
			if w.Code != tt.status {
				t.Fatalf("status = %d, want %d; body %q", w.Code, tt.status, w.Body)
			}
			if got := w.Header().Get("Content-Encoding"); got != tt.encoding {
				t.Errorf("Content-Encoding = %q, want %q", got, tt.encoding)
			}
			if got := w.Header().Get("Vary"); got != "Accept-Encoding" {
				t.Errorf("Vary = %q, want Accept-Encoding", got)
			}
			if tt.status >= 300 {
				return
			}
			body := io.Reader(w.Body)
			if tt.encoding == "gzip" {
				gz, err := gzip.NewReader(w.Body)
				if err != nil {
					t.Fatalf("gzip body: %v", err)
				}
				body = gz
			}
			got, err := io.ReadAll(body)
			if err != nil {
				t.Fatalf("reading body: %v", err)
			}
			if string(got) != tt.body {
				t.Errorf("body = %q, want %q", got, tt.body)
			}
			if tt.contentType != "" && w.Header().Get("Content-Type") != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", w.Header().Get("Content-Type"), tt.contentType)
			}
			if tt.disposition != "" && w.Header().Get("Content-Disposition") != tt.disposition {
				t.Errorf("Content-Disposition = %q, want %q", w.Header().Get("Content-Disposition"), tt.disposition)
			}
			if tt.file == "hello.txt" && w.Header().Get("Last-Modified") != mtime.Format(http.TimeFormat) {
				t.Errorf("Last-Modified = %q, want %q", w.Header().Get("Last-Modified"), mtime.Format(http.TimeFormat))
			}
			if tt.encoding == "" && tt.status == 200 && w.Header().Get("Content-Length") != strconv.Itoa(len(tt.body)) {
				t.Errorf("Content-Length = %q, want %d", w.Header().Get("Content-Length"), len(tt.body))
			}
		})
	}
}
