package vm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
)

// makeOverlay makes the sandbox's disk at path: a qcow2 file of sizeMB
// that starts as image (the template's ext4, read-only) and takes the
// sandbox's writes, discarded with it. Its backing file is named as
// QEMU's fd set of the image (the VM opens no path), so qemu-img is told
// not to open it (-u) and given the size.
func makeOverlay(ctx context.Context, qemuImg, path, image string, sizeMB int) error {
	fi, err := os.Stat(image)
	if err != nil {
		return fmt.Errorf("making the disk overlay: %w", err)
	}
	if need := int((fi.Size() + 1<<20 - 1) >> 20); sizeMB < need {
		return fmt.Errorf("making the disk overlay: the template's file system is %d MiB, more than the disk size of %d MiB", need, sizeMB)
	}
	cmd := exec.CommandContext(ctx, qemuImg, "create", "-q", "-f", "qcow2", "-u",
		"-b", fdsetPath(imageSet), "-F", "raw", path, strconv.Itoa(sizeMB)+"M")
	cmd.Env = []string{}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("making the disk overlay: qemu-img: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
