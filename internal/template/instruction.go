package template

import (
	"path/filepath"
	"regexp"
)

// Instruction is one build step run inside a sandbox of the image built so
// far: what a Dockerfile line or an E2B Template SDK step becomes. Both the
// Dockerfile front end and the E2B template build API produce these; the
// build engine executes them with a cache keyed by everything before them.
type Instruction struct {
	// Op is one of the Op* constants.
	Op string `json:"op"`
	// Args depend on Op:
	//   RUN:     [command] — run by /bin/sh -c as the current USER in the current WORKDIR
	//   COPY:    [src..., dest] — src paths are relative to the build context
	//            named by FilesHash; dest is absolute or relative to WORKDIR
	//   ENV:     [key, value, key, value, ...]
	//   WORKDIR: [dir]
	//   USER:    [name]
	Args []string `json:"args"`
	// FilesHash names the build context archive of a COPY (see
	// [Builder.ContextArchive]); empty for other ops.
	FilesHash string `json:"filesHash,omitempty"`
	// Force reruns this step, and every one after it, even when cached.
	Force bool `json:"force,omitempty"`
}

// The instruction ops.
const (
	OpRun     = "RUN"
	OpCopy    = "COPY"
	OpEnv     = "ENV"
	OpWorkdir = "WORKDIR"
	OpUser    = "USER"
)

var filesHashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ValidFilesHash reports whether h can name a build context archive: a
// lower-case hex SHA-256, as the E2B SDK computes it.
func ValidFilesHash(h string) bool { return filesHashRE.MatchString(h) }

// ContextArchive is where the build context (a tar, optionally gzipped)
// with content hash h is stored: what the E2B SDK uploads for a COPY step
// and what the Dockerfile front end packs from its context directory. h
// must satisfy [ValidFilesHash].
func (b *Builder) ContextArchive(h string) string {
	return filepath.Join(b.DataDir, "template-files", h+".tar")
}
