package dockerfile

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agent-sandbox/agent-sandbox/internal/template"
)

// fakeHash is what the test packer returns for every COPY.
var fakeHash = strings.Repeat("ab", 32)

// translate runs Translate with a packer that records what it was asked
// to pack.
func translate(t *testing.T, src string, buildArgs map[string]string) (*Result, [][]string, error) {
	t.Helper()
	var packed [][]string
	res, err := Translate(strings.NewReader(src), Options{
		Name: "img", BuildArgs: buildArgs,
		Pack: func(srcs []string) (string, error) {
			packed = append(packed, srcs)
			return fakeHash, nil
		},
	})
	return res, packed, err
}

func run(cmd string) template.Instruction {
	return template.Instruction{Op: template.OpRun, Args: []string{cmd}}
}

func TestTranslate(t *testing.T) {
	debian := DebianBase("bookworm")
	tests := []struct {
		name       string
		dockerfile string
		buildArgs  map[string]string
		want       template.Spec
		wantBase   *template.Spec
		wantLines  []int
		wantPacked [][]string
	}{
		{
			name:       "RUN shell form",
			dockerfile: "FROM base\nRUN echo hi && ls -l \"/a b\"\n",
			want:       template.Spec{Name: "img", From: "base", Instructions: []template.Instruction{run(`echo hi && ls -l "/a b"`)}},
			wantLines:  []int{2},
		},
		{
			name:       "RUN exec form is quoted for the shell",
			dockerfile: "FROM base\nRUN [\"printf\", \"%s\", \"a b\", \"it's\", \"$HOME\"]\n",
			want:       template.Spec{Name: "img", From: "base", Instructions: []template.Instruction{run(`printf %s 'a b' 'it'\''s' '$HOME'`)}},
			wantLines:  []int{2},
		},
		{
			name:       "line continuation and comments",
			dockerfile: "# a comment\nFROM base\n\nRUN apt-get update \\\n  # inside\n  && apt-get install -y curl\nRUN true\n",
			want: template.Spec{Name: "img", From: "base", Instructions: []template.Instruction{
				run("apt-get update   && apt-get install -y curl"), run("true"),
			}},
			wantLines: []int{4, 7},
		},
		{
			name:       "COPY and ADD with --chown",
			dockerfile: "FROM base\nCOPY --chown=user:user src/ a.txt /dst/\nADD b.txt rel\n",
			want: template.Spec{Name: "img", From: "base", Instructions: []template.Instruction{
				{Op: template.OpCopy, Args: []string{"src/", "a.txt", "/dst/"}, FilesHash: fakeHash, Chown: "user:user"},
				{Op: template.OpCopy, Args: []string{"b.txt", "rel"}, FilesHash: fakeHash},
			}},
			wantLines:  []int{2, 3},
			wantPacked: [][]string{{"src/", "a.txt"}, {"b.txt"}},
		},
		{
			name:       "COPY exec form keeps spaces",
			dockerfile: "FROM base\nCOPY [\"my file\", \"/opt/my dir/\"]\n",
			want: template.Spec{Name: "img", From: "base", Instructions: []template.Instruction{
				{Op: template.OpCopy, Args: []string{"my file", "/opt/my dir/"}, FilesHash: fakeHash},
			}},
			wantLines:  []int{2},
			wantPacked: [][]string{{"my file"}},
		},
		{
			name:       "ENV both forms, quoting and expansion",
			dockerfile: "FROM base\nENV A=1 B=\"two words\" C='$A'\nENV OLD value with spaces\nENV P=/opt\nENV Q=${P}/bin:$A\nWORKDIR $P/app\nUSER user\n",
			want: template.Spec{Name: "img", From: "base", Instructions: []template.Instruction{
				{Op: template.OpEnv, Args: []string{"A", "1", "B", "two words", "C", "$A"}},
				{Op: template.OpEnv, Args: []string{"OLD", "value with spaces"}},
				{Op: template.OpEnv, Args: []string{"P", "/opt"}},
				{Op: template.OpEnv, Args: []string{"Q", "/opt/bin:1"}},
				{Op: template.OpWorkdir, Args: []string{"/opt/app"}},
				{Op: template.OpUser, Args: []string{"user"}},
			}},
			wantLines: []int{2, 3, 4, 5, 6, 7},
		},
		{
			name:       "ARG default is exported to RUN and expanded elsewhere",
			dockerfile: "FROM base\nARG V=1\nARG EMPTY\nRUN echo $V\nENV X=v$V\n",
			want: template.Spec{Name: "img", From: "base", Instructions: []template.Instruction{
				run("export EMPTY='' V=1; echo $V"),
				{Op: template.OpEnv, Args: []string{"X", "v1"}},
			}},
			wantLines: []int{4, 5},
		},
		{
			name:       "--build-arg overrides the default",
			dockerfile: "FROM base\nARG V=1\nARG EMPTY\nRUN echo $V\nENV X=v$V\n",
			buildArgs:  map[string]string{"V": "two words", "EMPTY": "e", "UNDECLARED": "x"},
			want: template.Spec{Name: "img", From: "base", Instructions: []template.Instruction{
				run("export EMPTY=e V='two words'; echo $V"),
				{Op: template.OpEnv, Args: []string{"X", "vtwo words"}},
			}},
			wantLines: []int{4, 5},
		},
		{
			name:       "ENV shadows an ARG in RUN",
			dockerfile: "FROM base\nARG V=1\nENV V=2\nRUN echo $V\n",
			want: template.Spec{Name: "img", From: "base", Instructions: []template.Instruction{
				{Op: template.OpEnv, Args: []string{"V", "2"}},
				run("echo $V"),
			}},
			wantLines: []int{3, 4},
		},
		{
			name:       "ARG before FROM is for FROM, and redeclared takes its value",
			dockerfile: "ARG BASE=tiny\nARG VER=3\nFROM ${BASE}\nRUN echo $BASE\nARG VER\nRUN echo $VER\n",
			want: template.Spec{Name: "img", From: "tiny", Instructions: []template.Instruction{
				run("echo $BASE"), run("export VER=3; echo $VER"),
			}},
			wantLines: []int{4, 6},
		},
		{
			name:       "--build-arg sets FROM",
			dockerfile: "ARG BASE=tiny\nFROM $BASE\nRUN true\n",
			buildArgs:  map[string]string{"BASE": "code-interpreter-v1"},
			want:       template.Spec{Name: "img", From: "code-interpreter-v1", Instructions: []template.Instruction{run("true")}},
			wantLines:  []int{3},
		},
		{
			name:       "FROM debian builds the Debian base",
			dockerfile: "FROM debian:bookworm AS build\nRUN true\n",
			want:       template.Spec{Name: "img", From: "debian-bookworm", Instructions: []template.Instruction{run("true")}},
			wantBase:   &debian,
			wantLines:  []int{2},
		},
		{
			name:       "FROM debian slim is the same base",
			dockerfile: "from debian:bookworm-slim\n",
			want:       template.Spec{Name: "img", From: "debian-bookworm"},
			wantBase:   &debian,
		},
		{
			name:       "FROM an image: any other reference, or a tarball",
			dockerfile: "ARG PY=3.12\nFROM python:${PY}-slim\nRUN true\n",
			want:       template.Spec{Name: "img", FromImage: "python:3.12-slim", Instructions: []template.Instruction{run("true")}},
			wantLines:  []int{3},
		},
		{
			name:       "FROM a numbered Debian release is Docker's image",
			dockerfile: "FROM debian:12\n",
			want:       template.Spec{Name: "img", FromImage: "debian:12"},
		},
		{
			name:       "FROM an image tarball",
			dockerfile: "FROM oci-archive:/srv/images/app.tar\n",
			want:       template.Spec{Name: "img", FromImage: "oci-archive:/srv/images/app.tar"},
		},
		{
			name:       "ENTRYPOINT and CMD, exec form",
			dockerfile: "FROM base\nENTRYPOINT [\"python3\", \"-m\"]\nCMD [\"http.server\", \"--directory\", \"/srv/my files\"]\n",
			want:       template.Spec{Name: "img", From: "base", StartCmd: "python3 -m http.server --directory '/srv/my files'"},
		},
		{
			name:       "CMD shell form, the last one wins",
			dockerfile: "FROM base\nCMD echo first\nCMD node server.js > /tmp/log 2>&1\n",
			want:       template.Spec{Name: "img", From: "base", StartCmd: "node server.js > /tmp/log 2>&1"},
		},
		{
			name:       "escape directive",
			dockerfile: "# escape=`\nFROM base\nRUN echo a `\n  b\n",
			want:       template.Spec{Name: "img", From: "base", Instructions: []template.Instruction{run("echo a   b")}},
			wantLines:  []int{3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, packed, err := translate(t, tt.dockerfile, tt.buildArgs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, res.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantBase, res.Base); diff != "" {
				t.Errorf("base (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantLines, res.Lines); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantPacked, packed); diff != "" {
				t.Errorf("packed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTranslateErrors(t *testing.T) {
	tests := []struct {
		name       string
		dockerfile string
		wantLine   int // 0: an error not about one line
		wantErr    string
	}{
		{name: "EXPOSE", dockerfile: "FROM base\nRUN true\nEXPOSE 80\n", wantLine: 3,
			wantErr: "EXPOSE is not supported (supported: " + Supported + ")"},
		{name: "HEALTHCHECK", dockerfile: "FROM base\nHEALTHCHECK CMD curl -f http://localhost/\n", wantLine: 2,
			wantErr: "HEALTHCHECK is not supported (supported: " + Supported + ")"},
		{name: "LABEL", dockerfile: "FROM base\nLABEL a=b\n", wantLine: 2, wantErr: "LABEL is not supported"},
		{name: "unknown instruction", dockerfile: "FROM base\nFROBNICATE x\n", wantLine: 2, wantErr: "FROBNICATE is not supported"},
		{name: "multi-stage", dockerfile: "FROM base AS build\nRUN make\n\nFROM base\nCOPY --from=build /out /out\n", wantLine: 4,
			wantErr: "multi-stage builds are not supported (one FROM; supported: " + Supported + ")"},
		{name: "COPY --from", dockerfile: "FROM base\nCOPY --from=other /a /b\n", wantLine: 2, wantErr: "COPY --from=other is not supported (only --chown)"},
		{name: "COPY --chmod", dockerfile: "FROM base\nCOPY --chmod=755 a /b\n", wantLine: 2, wantErr: "--chmod=755 is not supported"},
		{name: "RUN --mount", dockerfile: "FROM base\nRUN --mount=type=cache,target=/c true\n", wantLine: 2, wantErr: "RUN --mount=type=cache,target=/c is not supported"},
		{name: "ADD URL", dockerfile: "FROM base\nADD https://example.com/f /f\n", wantLine: 2, wantErr: "only local files of the build context"},
		{name: "ADD archive", dockerfile: "FROM base\nADD app.tar.gz /opt/\n", wantLine: 2, wantErr: "unpacking archives is not supported"},
		{name: "COPY outside the context", dockerfile: "FROM base\nCOPY ../secret /s\n", wantLine: 2, wantErr: "outside the build context"},
		{name: "COPY one word", dockerfile: "FROM base\nCOPY onlyone\n", wantLine: 2, wantErr: "at least one source and a destination"},
		{name: "bad USER", dockerfile: "FROM base\nUSER Not-A-User\n", wantLine: 2, wantErr: `USER "Not-A-User"`},
		{name: "bad ENV name", dockerfile: "FROM base\nENV 1A=x\n", wantLine: 2, wantErr: `ENV name "1A" is not valid`},
		{name: "WORKDIR without a directory", dockerfile: "FROM base\nWORKDIR\n", wantLine: 2, wantErr: "WORKDIR wants one argument"},
		{name: "instruction before FROM", dockerfile: "RUN true\nFROM base\n", wantLine: 1, wantErr: "RUN before FROM"},
		{name: "bad image reference", dockerfile: "FROM Ubuntu:22.04\n", wantLine: 1, wantErr: `image reference "Ubuntu:22.04"`},
		{name: "relative image tarball", dockerfile: "FROM docker-archive:img.tar\n", wantLine: 1, wantErr: "want a clean absolute path"},
		{name: "FROM scratch", dockerfile: "FROM scratch\n", wantLine: 1, wantErr: "a sandbox needs at least /bin/sh"},
		{name: "FROM itself", dockerfile: "FROM img\n", wantLine: 0, wantErr: `from "img" is not another template's name`},
		{name: "heredoc", dockerfile: "# syntax=docker/dockerfile:1\nFROM base\nRUN <<EOF\necho hi\nEOF\n", wantLine: 3, wantErr: "here-document is not supported"},
		{name: "bad expansion", dockerfile: "FROM base\nENV A=${B:?required}\n", wantLine: 2, wantErr: "required"},
		{name: "parse error", dockerfile: "FROM base\nRUN true\nENV A=1 B\n", wantLine: 3, wantErr: "can't find = in \"B\""},
		{name: "no FROM", dockerfile: "ARG A=1\n", wantErr: "Dockerfile has no FROM"},
		{name: "empty", dockerfile: "# nothing\n", wantLine: 1, wantErr: "file with no instructions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := translate(t, tt.dockerfile, nil)
			if err == nil {
				t.Fatalf("Translate succeeded, want an error with %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
			var e *Error
			switch {
			case tt.wantLine == 0 && errors.As(err, &e):
				t.Errorf("error %q names line %d, want no line", err, e.Line)
			case tt.wantLine != 0 && !errors.As(err, &e):
				t.Errorf("error %q names no line, want line %d", err, tt.wantLine)
			case tt.wantLine != 0 && e.Line != tt.wantLine:
				t.Errorf("error %q names line %d, want %d", err, e.Line, tt.wantLine)
			}
		})
	}
}
