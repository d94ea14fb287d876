package template

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
)

// The step cache is content-addressed: the key of a step hashes the key of
// the step before it and what the step does (for a COPY, the files hash
// names the content copied), so a key names the whole history of an image
// and two builds that share a prefix share its layers.

// layerVersion is mixed into every layer key. Bump it when the way a step
// runs changes what it produces.
const layerVersion = 1

// rootKey is the key of the image a chain of steps starts from: the
// template named by From, identified by its content hash.
func rootKey(fromHash string) string {
	return hashStrings(fmt.Sprintf("agent-sandbox layer v%d", layerVersion), "from", fromHash)
}

// instructionKey is the key of the image after in ran on the image with
// key parent. Force is left out: it decides whether a cached result may be
// used, not what the step is. nonce is empty except for a forced step,
// where it makes the key (and every later one) new.
func instructionKey(parent string, in Instruction, nonce string) string {
	in.Force = false
	return hashStrings(parent, "instruction", mustJSON(in), nonce)
}

// packagesKey and stepsKey are the keys of the layers that install a
// derived spec's Packages and apply its Steps.
func packagesKey(parent string, pkgs []string) string {
	return hashStrings(parent, "packages", mustJSON(slices.Compact(slices.Sorted(slices.Values(pkgs)))))
}

func stepsKey(parent string, steps []Step) string {
	return hashStrings(parent, "steps", mustJSON(steps))
}

// hashStrings hashes parts unambiguously (each is length-prefixed).
func hashStrings(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s\n", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Instructions and steps are plain strings and numbers.
		panic(fmt.Sprintf("encoding %T: %v", v, err))
	}
	return string(b)
}

// derivedHash is the template hash of a spec built From the template with
// hash fromHash: a rebuilt base (a new hash) makes every template built on
// it new too.
func derivedHash(spec Spec, fromHash string) string {
	return hashStrings(spec.Hash(), "from", fromHash)
}
