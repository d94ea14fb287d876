package api

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/agent-sandbox/agent-sandbox/internal/template/oci"
)

// TestTemplateBuildFromImage checks what the SDK's fromImage(image,
// credentials) and fromGCPRegistry send becomes: a spec from the image,
// with the credentials for its registry.
func TestTemplateBuildFromImage(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       template.Spec
	}{
		{
			name: "anonymous",
			body: `{"fromImage":"python:3.12","steps":[{"type":"RUN","args":["pip install x"]}]}`,
			want: template.Spec{Name: "img", FromImage: "python:3.12",
				Instructions: []template.Instruction{{Op: "RUN", Args: []string{"pip install x"}}}},
		},
		{
			name: "with credentials",
			body: `{"fromImage":"registry.example.com/team/app:v2","fromImageRegistry":{"type":"registry","username":"u","password":"p"}}`,
			want: template.Spec{Name: "img", FromImage: "registry.example.com/team/app:v2", RegistryAuth: &oci.Auth{Username: "u", Password: "p"}},
		},
		{
			name: "GCP service account",
			body: `{"fromImage":"europe-docker.pkg.dev/p/r/app:1","fromImageRegistry":{"type":"gcp","serviceAccountJson":"{\"type\":\"service_account\"}"}}`,
			want: template.Spec{Name: "img", FromImage: "europe-docker.pkg.dev/p/r/app:1",
				RegistryAuth: &oci.Auth{Username: "_json_key", Password: `{"type":"service_account"}`}},
		},
		{
			name: "recording (this server's own field)",
			body: `{"fromTemplate":"desktop","recording":"webm"}`,
			want: template.Spec{Name: "img", From: template.DesktopName, Recording: "webm"},
		},
		{
			name: "E2B's base image is the base template",
			body: `{"fromImage":"e2bdev/base"}`,
			want: template.Spec{Name: "img", From: template.BaseName},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeBuilder{}
			h := newTemplateAPI(t, f)
			var req templateView
			if code := call(t, h, "POST", "/v3/templates", `{"name":"img"}`, nil, &req); code != 202 {
				t.Fatalf("request: %d", code)
			}
			if code := call(t, h, "POST", "/v2/templates/img/builds/"+req.BuildID, c.body, nil, nil); code != 202 {
				t.Fatalf("trigger: %d", code)
			}
			if st := waitBuild(t, h, "img", req.BuildID); st.Status != "ready" {
				t.Fatalf("status %+v", st)
			}
			if diff := cmp.Diff([]template.Spec{c.want}, f.specs); diff != "" {
				t.Errorf("spec built (-want +got):\n%s", diff)
			}
		})
	}
}
