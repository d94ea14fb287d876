package isolation

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckVolumes(t *testing.T) {
	dirs := Capabilities{Volumes: true}
	images := Capabilities{Volumes: true, VolumeImages: true}
	for _, tc := range []struct {
		name    string
		caps    Capabilities
		mount   VolumeMount
		wantErr string
	}{
		{"directory", dirs, VolumeMount{Source: "/vol/a", Target: "/data"}, ""},
		{"image", images, VolumeMount{Image: "/vol/a.ext4", Target: "/data"}, ""},
		{"no volumes", Capabilities{}, VolumeMount{Source: "/vol/a", Target: "/data"}, "volumes: unsupported"},
		{"relative target", dirs, VolumeMount{Source: "/vol/a", Target: "data"}, "not a clean path"},
		{"unclean target", dirs, VolumeMount{Source: "/vol/a", Target: "/a/../b"}, "not a clean path"},
		{"over the root", images, VolumeMount{Image: "/vol/a.ext4", Target: "/"}, "not a clean path"},
		{"image for a backend of directories", dirs, VolumeMount{Image: "/vol/a.ext4", Target: "/data"}, "mounts a volume's host directory"},
		{"directory for a backend of images", images, VolumeMount{Source: "/vol/a", Target: "/data"}, "mounts a volume's image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckVolumes(Spec{Volumes: []VolumeMount{tc.mount}}, tc.caps)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("CheckVolumes: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("CheckVolumes: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
	if err := CheckVolumes(Spec{Volumes: []VolumeMount{{Source: "/v", Target: "/d"}}}, Capabilities{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("volumes on a backend without: %v, want ErrUnsupported", err)
	}
}
