// Package template builds, caches and lists sandbox templates: Debian root
// filesystems made with debootstrap, extended with apt packages and a short
// list of declarative steps (create a user, write a file, make a directory or
// a symlink), plus the defaults a sandbox inherits (user, workdir, env).
// A template may instead start from another template or from an OCI image
// (package oci) and run Dockerfile-like instructions over it.
//
// A template is addressed by the content hash of its [Spec] and the builder
// version, so changing a spec or the builder makes a new directory and never
// edits an old one. On disk, under the builder's data directory:
//
//	templates/<name>/<hash>/rootfs          the root filesystem
//	templates/<name>/<hash>/template.json   metadata, written last: the completion marker
//	templates/<name>/<hash>.lock            flock held while building or removing
//	templates/.build/<name>-<hash12>-*      build in progress (same filesystem, renamed into place)
//	templates/.cache/debs                   downloaded .debs shared by debootstrap runs
//	templates/.layers/<key>/diff            a cached step's changes, or a debootstrapped system
//	templates/.images/<digest>/rootfs       an unpacked OCI image (see image_linux.go)
//
// Building needs root. Every step that runs a command (RUN, a spec's
// Packages, a user step) goes to the Builder's StepRunner, which the
// server wires to a sandbox per step (sandbox.Manager.RunStep): this
// package never runs an image's programs itself. What it does on the host
// is debootstrap (a Debian system from the configured mirror, cached as the
// bottom layer of the spec's build), writing COPY, file, directory and
// symlink steps through an os.Root over an overlay, unpacking OCI images,
// and flattening layers. Anything a killed debootstrap mounted is undone
// on every path out of a build, including a cancelled context; a tree is
// only ever removed after checking that nothing is mounted beneath it and
// without crossing into another filesystem.
//
// The templates do not contain envd: the isolation backends bind-mount it.
package template
