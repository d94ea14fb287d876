package template

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestExt4 makes the ext4 image of a small template, checks it with fsck
// and reads a file and an owner back out of it, and gets the same image
// on a second call.
func TestExt4(t *testing.T) {
	data := t.TempDir()
	tmpl := tinyBase(t, data)
	b := testBuilder(t, data)
	image, err := b.Ext4(t.Context(), tmpl)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(image)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("e2fsck", "-fn", image).CombinedOutput(); err != nil {
		t.Fatalf("e2fsck -fn: %v\n%s", err, out)
	}
	want, err := os.ReadFile(tmpl.RootFS + "/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command("debugfs", "-R", "cat /etc/passwd", image).Output()
	if err != nil || string(got) != string(want) {
		t.Errorf("/etc/passwd in the image = %q, %v; want %q", got, err, want)
	}
	out, err := exec.Command("debugfs", "-R", "stat /home/user", image).Output()
	if err != nil || !strings.Contains(string(out), "User:  1000") {
		t.Errorf("/home/user in the image is not owned by 1000: %v\n%s", err, out)
	}
	again, err := b.Ext4(t.Context(), tmpl)
	if err != nil || again != image {
		t.Fatalf("second Ext4 = %q, %v; want %q", again, err, image)
	}
	if st2, _ := os.Stat(image); !os.SameFile(st, st2) {
		t.Error("the second call made a new image")
	}
}
