package template

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// ext4File is the image beside a template's rootfs directory.
const ext4File = "rootfs.ext4"

// Ext4 returns the path of t's root filesystem as an ext4 image: the form
// a microVM boots from, where the jail mounts the directory. The image is
// made on first request with mkfs.ext4 -d (owners, modes, hard links and
// extended attributes kept), with a quarter of free space and inodes over
// what the tree holds, and kept beside the directory; concurrent callers
// wait for one another.
func (b *Builder) Ext4(ctx context.Context, t *Template) (string, error) {
	image := filepath.Join(filepath.Dir(t.RootFS), ext4File)
	if _, err := os.Stat(image); err == nil {
		return image, nil
	}
	unlock, err := lockFile(ctx, image+".lock")
	if err != nil {
		return "", fmt.Errorf("ext4 image of %s: %w", t.ID, err)
	}
	defer unlock()
	if _, err := os.Stat(image); err == nil { // made while we waited
		return image, nil
	}
	bytesUsed, inodes, err := diskUsage(t.RootFS)
	if err != nil {
		return "", fmt.Errorf("ext4 image of %s: measuring the rootfs: %w", t.ID, err)
	}
	// Data and metadata with a quarter to spare, at least 64 MiB.
	sizeMB := max(64, (bytesUsed+bytesUsed/4)>>20+32)
	tmp := image + ".new"
	defer os.Remove(tmp)
	f, err := os.Create(tmp)
	if err == nil {
		err = f.Truncate(sizeMB << 20)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return "", fmt.Errorf("ext4 image of %s: %w", t.ID, err)
	}
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "agent-sandbox",
		"-N", strconv.FormatInt(inodes+inodes/4+1024, 10), "-E", "root_owner=0:0", "-d", t.RootFS, tmp)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("ext4 image of %s: mkfs.ext4: %w: %s", t.ID, err, bytes.TrimSpace(out))
	}
	if err := os.Rename(tmp, image); err != nil {
		return "", fmt.Errorf("ext4 image of %s: %w", t.ID, err)
	}
	return image, nil
}
