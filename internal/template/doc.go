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
//	templates/.images/<digest>/rootfs       an unpacked OCI image (see image_linux.go)
//
// Building needs root and debootstrap. The chroot mounts (/proc, /sys, /dev)
// and anything debootstrap mounted are undone on every path out of a build,
// including a cancelled context; a tree is only ever removed after checking
// that nothing is mounted beneath it and without crossing into another
// filesystem, so a failed build can never delete the host's /dev.
//
// The templates do not contain envd: the isolation backends bind-mount it.
package template
