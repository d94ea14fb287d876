// Package oci fetches an OCI or Docker image for linux/amd64 and unpacks it
// into a root filesystem directory: the base of a template built from an
// image.
//
// An image comes from a registry (anonymous, or with a user name and
// password) or from a local tarball, named by a transport prefix as in
// podman and skopeo:
//
//	docker.io/library/alpine:3.20     a registry reference
//	docker-archive:/abs/path.tar      `docker save` output
//	oci-archive:/abs/path.tar         a tar of an OCI image layout
//
// Either prefix accepts either format: the tarball's content decides.
//
// Unpacking applies the layers bottom first into one plain directory, as
// overlayfs would show them merged: a ".wh.<name>" entry deletes name from
// the layers below, a ".wh..wh..opq" entry hides everything the layers
// below put in its directory, and neither is kept. Every write goes through
// an [os.Root], so no entry (an absolute or ".." name, a hard link, a path
// through a symlink of an earlier layer) can reach outside the target.
// Device nodes and FIFOs are skipped; owners, modes (set-id bits included),
// modification times and file capabilities are kept. [Limits] bound the
// bytes and entries an image may write.
package oci
