// Package disk makes and attaches sandbox disks, for the backends that
// run a sandbox from the template directory under a writable overlay
// (jail, gvisor): a sparse ext4 image of the sandbox's disk size holds
// the overlay's upper and work directories, so that the disk quota is the
// image's size, and is attached to a loop device that detaches itself
// once unmounted, so that a sandbox's mount namespace ending is enough to
// let it go.
package disk
