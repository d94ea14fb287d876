package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/client"
	"github.com/agent-sandbox/agent-sandbox/internal/store"
)

// acceptKey is a Keys that knows testKey only; the fuzz targets use it to
// keep SQLite out of the loop.
type acceptKey struct{}

func (acceptKey) VerifyAPIKey(_ context.Context, key string) (store.APIKey, error) {
	if key != testKey {
		return store.APIKey{}, store.ErrNotFound
	}
	return store.APIKey{Name: "test"}, nil
}

// bodyEndpoints are the calls whose JSON bodies FuzzRequestBodies sends;
// isb1 exists (running) and isb2 is paused.
var bodyEndpoints = []struct{ method, target string }{
	{"POST", "/sandboxes"},
	{"POST", "/v2/sandboxes"},
	{"POST", "/sandboxes/isb1/connect"},
	{"POST", "/v2/sandboxes/isb2/connect"},
	{"POST", "/sandboxes/isb1/timeout"},
	{"PUT", "/sandboxes/isb1/network"},
}

// fuzzMaxBody is small so that fuzzed bodies reach the limit.
const fuzzMaxBody = 512

// countingReader counts what the handler reads of a request body.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// checkAnswer fails t unless w is a 2xx (with a JSON body, or none for 202
// and 204), or a 4xx with the E2B error body whose code is the status.
func checkAnswer(t *testing.T, w *httptest.ResponseRecorder, what string) {
	t.Helper()
	if w.Code >= 200 && w.Code < 300 {
		empty := w.Body.Len() == 0 && (w.Code == http.StatusNoContent || w.Code == http.StatusAccepted)
		if !empty && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s: %d with a body that is not JSON: %q", what, w.Code, w.Body)
		}
		return
	}
	if w.Code < 400 || w.Code >= 500 {
		t.Fatalf("%s: status %d, want 2xx or 4xx; body %s", what, w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: error with Content-Type %q", what, ct)
	}
	var e map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("%s: error body %q is not JSON: %v", what, w.Body, err)
	}
	code, ok := e["code"].(float64)
	msg, _ := e["message"].(string)
	if !ok || int(code) != w.Code || msg == "" {
		t.Fatalf("%s: error body %s, want {code: %d, message}", what, w.Body, w.Code)
	}
}

// FuzzRequestBodies sends any body to create (v1, v2), connect (v1, v2),
// timeout and PUT /network through the real Handler: the answer is 2xx, or
// 4xx with {code, message}, never a 500; the handler never reads more than
// MaxBodyBytes (+1, to tell "at the limit" from "over it").
func FuzzRequestBodies(f *testing.F) {
	for i := range bodyEndpoints {
		ep := uint8(i)
		for _, body := range []string{
			``, `{}`, `null`, ` `, `[]`, `"x"`, `{"timeout":60}`, `{"timeout":0}`, `{"timeout":-1}`,
			`{"timeout":9223372036854775807}`, `{"timeout":1e3}`, `{"timeout":"60"}`, `{"timeout":60} {}`,
		} {
			f.Add(ep, []byte(body), false)
		}
	}
	for _, body := range []string{
		`{"templateID":"base"}`,
		`{"templateID":"base","timeout":300,"secure":true,"allow_internet_access":true,"metadata":{"a":"b"},"envVars":{"X":"1"}}`,
		`{"templateID":"base","network":{"allowOut":["example.com"],"denyOut":["0.0.0.0/0"],"allowPublicTraffic":false}}`,
		`{"templateID":"base","network":null}`, `{"templateID":"base","network":[1]}`, `{"templateID":"base","network":"x"}`,
		`{"templateID":"base","autoPause":true,"mcp":{"x":1},"autoResume":{"enabled":true}}`,
		`{"templateID":"missing"}`, `{"templateID":""}`, `{"templateID":1}`, `{"templateID":"base","metadata":{"k":1}}`,
		`{"templateID":"base","metadata":{"k":"` + strings.Repeat("x", fuzzMaxBody) + `"}}`,
	} {
		f.Add(uint8(0), []byte(body), false)
		f.Add(uint8(1), []byte(body), true)
	}
	for _, body := range []string{
		`{"allowOut":["example.com","*.example.org"],"denyOut":["10.0.0.0/8"]}`,
		`{"allow_internet_access":false}`, `{"rules":{}}`, `{"rules":{"example.com":[]}}`,
		`{"egressProxy":null}`, `{"egressProxy":{"address":"1.2.3.4:1080"}}`, `{"allowOut":"x"}`,
		`{"timeout":60,"memory":false}`, "{\"allowOut\":[\"\xff\"]}",
	} {
		f.Add(uint8(5), []byte(body), false)
		f.Add(uint8(3), []byte(body), true)
	}

	f.Fuzz(func(t *testing.T, ep uint8, body []byte, chunked bool) {
		e := bodyEndpoints[int(ep)%len(bodyEndpoints)]
		fake := newFake(running("isb1"), paused("isb2"))
		h, err := New(Config{Sandboxes: fake, Keys: acceptKey{}, EnvdVersion: "0.6.4", MaxBodyBytes: fuzzMaxBody})
		if err != nil {
			t.Fatal(err)
		}
		cr := &countingReader{r: bytes.NewReader(body)}
		r := httptest.NewRequest(e.method, e.target, cr)
		r.Header.Set("X-API-Key", testKey)
		r.Header.Set("Content-Type", "application/json")
		r.ContentLength = int64(len(body))
		if chunked {
			r.ContentLength = -1
			r.TransferEncoding = []string{"chunked"}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		what := fmt.Sprintf("%s %s %q", e.method, e.target, body)
		checkAnswer(t, w, what)
		if cr.n > fuzzMaxBody+1 {
			t.Fatalf("%s: handler read %d bytes of the body, limit %d", what, cr.n, fuzzMaxBody)
		}
		if len(body) > fuzzMaxBody+1 && w.Code < 300 {
			t.Fatalf("%s: %d-byte body accepted (%d), limit %d", what, len(body), w.Code, fuzzMaxBody)
		}
	})
}

// FuzzMetadataFilter checks the layered metadata filter of GET /v2/sandboxes
// (spec §2.5): any metadata query value gives 200 or a 400 JSON error, never
// a panic; what decodes re-encodes (as the SDKs do) to the same filter; and
// any map encoded the way the SDKs do arrives as that map.
func FuzzMetadataFilter(f *testing.F) {
	f.Add("sandbox%2520Id=x%2526y%253Dz", "sandbox Id", "x&y=z", "", "")
	f.Add("a=b&c=d", "a", "b", "c", "d")
	f.Add("a=b=c", "k", "", "", "")
	f.Add("a", "=", "&", "%", "+")
	f.Add("%zz=1", "ü", "\xff", " ", "%25")
	f.Add("a=%", "a b", "c+d", "e%2Bf", "")
	f.Add("=&=", "", "", "", "")
	f.Add("+=+", "k", "v\x00", "", "")

	f.Fuzz(func(t *testing.T, raw, k1, v1, k2, v2 string) {
		if raw != "" {
			md, msg := decodeMetadata(raw)
			if msg == "" {
				if md == nil {
					t.Fatalf("decodeMetadata(%q): nil map without a message", raw)
				}
				again, msg := decodeMetadata(client.EncodeMetadata(md))
				if msg != "" || !maps.Equal(again, md) {
					t.Fatalf("decodeMetadata(%q) = %q; re-encoded it decodes to %q, %q", raw, md, again, msg)
				}
			} else if md != nil {
				t.Fatalf("decodeMetadata(%q): a map and the message %q", raw, msg)
			}
		}

		want := map[string]string{k1: v1}
		if k2 != k1 {
			want[k2] = v2
		}
		// The query as the SDKs build it: the encoded filter is escaped
		// once more by the query serializer.
		target := "/v2/sandboxes?metadata=" + url.QueryEscape(client.EncodeMetadata(want))
		fake := newFake()
		h, err := New(Config{Sandboxes: fake, Keys: acceptKey{}, EnvdVersion: "0.6.4"})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", target, nil)
		r.Header.Set("X-API-Key", testKey)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		checkAnswer(t, w, target)
		if w.Code != http.StatusOK || len(fake.queries) != 1 {
			t.Fatalf("GET %s: status %d, %d list calls; body %s", target, w.Code, len(fake.queries), w.Body)
		}
		if got := fake.queries[0].Metadata; !maps.Equal(got, want) {
			t.Fatalf("GET %s: filter %q, want %q", target, got, want)
		}
	})
}

// TestOversizedBodies413: every endpoint with a body answers a body over
// the limit with 413 JSON, whether its length is announced or it arrives
// chunked over a real connection, and reads no further than the limit.
func TestOversizedBodies413(t *testing.T) {
	const limit = 1024
	big := `{"templateID":"base","timeout":60,"metadata":{"k":"` + strings.Repeat("x", 4*limit) + `"}}`
	for _, e := range bodyEndpoints {
		t.Run(e.method+" "+e.target, func(t *testing.T) {
			h := newHandler(t, newFake(running("isb1"), paused("isb2")), func(c *Config) { c.MaxBodyBytes = limit })
			cr := &countingReader{r: strings.NewReader(big)}
			r := httptest.NewRequest(e.method, e.target, cr)
			r.Header.Set("X-API-Key", testKey)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d, want 413; body %s", w.Code, w.Body)
			}
			assertJSON(t, w.Body.Bytes(), fmt.Sprintf(`{"code":413,"message":"request body is larger than %d bytes"}`, limit))
			if cr.n > limit+1 {
				t.Errorf("read %d bytes of the body, limit %d", cr.n, limit)
			}

			// Chunked, over the wire: no Content-Length to refuse early.
			srv := httptest.NewServer(h)
			defer srv.Close()
			req, err := http.NewRequest(e.method, srv.URL+e.target, io.MultiReader(strings.NewReader(big)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-API-Key", testKey)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), `"code":413`) {
				t.Errorf("chunked: %d %s, want 413 JSON", res.StatusCode, b)
			}
		})
	}
}

// TestSlowBodyCutOffByReadTimeout: a client that trickles its body is cut
// off by the handler's body deadline and answered 408, not a 500 and not a
// hang, behind a server configured like internal/server's (a header
// timeout only, since the router's streams must not have a body deadline).
func TestSlowBodyCutOffByReadTimeout(t *testing.T) {
	h := newHandler(t, newFake(), func(c *Config) { c.BodyTimeout = 300 * time.Millisecond })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"templateID":"base"}`
	fmt.Fprintf(conn, "POST /v2/sandboxes HTTP/1.1\r\nHost: api.example.test\r\nX-API-Key: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", testKey, len(body))
	start := time.Now()
	done := make(chan struct{})
	go func() { // one byte every 100 ms: 2 s for the whole body
		defer close(done)
		for i := range len(body) {
			if _, err := io.WriteString(conn, body[i:i+1]); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	reply, _ := io.ReadAll(conn)
	elapsed := time.Since(start)
	<-done
	if elapsed > 1500*time.Millisecond {
		t.Errorf("slow client held the connection for %v; want it cut off after about 300ms", elapsed)
	}
	t.Logf("slow client got, after %v: %q", elapsed, reply)
	if !strings.HasPrefix(string(reply), "HTTP/1.1 408 ") || !strings.Contains(string(reply), `"request body not received within 300ms"`) {
		t.Errorf("slow client got %q, want 408 with a JSON message", reply)
	}
}

// FuzzTemplateBodies sends any body to the template build API's calls that
// take one (create a template, start a build, tags) through the real
// Handler over a real store: the answer is 2xx, or 4xx with {code,
// message}, never a 500 or a panic. A build the fuzzer gets accepted runs
// on the fake builder.
func FuzzTemplateBodies(f *testing.F) {
	h := newTemplateAPI(f, &fakeBuilder{})
	var tv templateView
	w := serve(h, apiCase{method: "POST", target: "/v3/templates", body: `{"name":"fuzz"}`})
	if w.Code != http.StatusAccepted || json.Unmarshal(w.Body.Bytes(), &tv) != nil {
		f.Fatalf("creating the template to fuzz builds of: %d %s", w.Code, w.Body)
	}
	targets := []struct{ method, target string }{
		{"POST", "/v3/templates"},
		{"POST", "/v2/templates/fuzz/builds/" + tv.BuildID},
		{"POST", "/templates/tags"},
		{"DELETE", "/templates/tags"},
	}
	for _, body := range []string{
		``, `{}`, `null`, `[]`, `{"name":"a"}`, `{"name":"a:b","tags":["x"],"cpuCount":2,"memoryMB":1024}`,
		`{"name":"../etc"}`, `{"name":"A"}`, `{"name":"a","tags":[""]}`, `{"cpuCount":-1}`,
		`{"fromTemplate":"base","steps":[{"type":"RUN","args":["echo hi","root"]}]}`,
		`{"fromTemplate":"base","steps":[{"type":"COPY","args":["a","/b"],"filesHash":"` + testHash + `"}]}`,
		`{"fromTemplate":"base","steps":[{"type":"ENV","args":["K"]}]}`, `{"fromImage":"ubuntu","steps":[]}`,
		`{"fromTemplate":"base","steps":[{"type":"WORKDIR","args":[]}],"startCmd":"x","readyCmd":"sleep 1"}`,
		`{"target":"fuzz:default","tags":["v2"]}`, `{"name":"fuzz","tags":["v2"]}`, `{"target":":","tags":null}`,
	} {
		for i := range targets {
			f.Add(uint8(i), []byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, ep uint8, body []byte) {
		e := targets[int(ep)%len(targets)]
		w := serve(h, apiCase{method: e.method, target: e.target, body: string(body)})
		checkAnswer(t, w, fmt.Sprintf("%s %s %q", e.method, e.target, body))
	})
}
