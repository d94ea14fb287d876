package sandbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation"
	"github.com/agent-sandbox/agent-sandbox/internal/template"
	"github.com/google/go-cmp/cmp"
)

// TestCreateTakesTemplateResources checks E2B's semantics: a template's
// cpuCount and memoryMB (and disk I/O quota) are what its sandboxes get,
// the operator's defaults fill what it leaves out, and the record (which
// getInfo and list show) says the same as the backend was given.
func TestCreateTakesTemplateResources(t *testing.T) {
	const mib = 1 << 20
	defIO := isolation.DiskIO{ReadBytesPerSec: 200 * mib, WriteBytesPerSec: 100 * mib, ReadIOPS: 4000, WriteIOPS: 2000}
	tmpls := fakeTemplates{
		"base": testTemplates["base"],
		"big": {Name: "big", ID: "big-0123456789ab", RootFS: "/templates/big/rootfs", Spec: template.Spec{
			CPUCount: 4, MemoryMB: 2048, DiskIO: template.DiskIO{WriteMiBps: 20, ReadIOPS: 100},
		}},
	}
	e := newEnv(t, func(c *Config) {
		c.Templates = tmpls
		c.DefaultCPU, c.DefaultMemory = 2, 512
		c.DefaultDiskIO = defIO
		c.Max = Maxima{CPUCount: 8, MemoryMB: 4096}
	})
	tests := []struct {
		template string
		want     isolation.Resources
	}{
		{"base", isolation.Resources{CPUCount: 2, MemoryMB: 512, DiskSizeMB: DefaultDiskMB, DiskIO: defIO}},
		{"big", isolation.Resources{CPUCount: 4, MemoryMB: 2048, DiskSizeMB: DefaultDiskMB, DiskIO: isolation.DiskIO{
			ReadBytesPerSec: 200 * mib, WriteBytesPerSec: 20 * mib, ReadIOPS: 100, WriteIOPS: 2000,
		}}},
	}
	for _, tt := range tests {
		sb := e.create(t, CreateRequest{Template: tt.template})
		got := e.fake.Instance(sb.ID).Spec().Resources
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: backend resources (-want +got):\n%s", tt.template, diff)
		}
		if sb.CPUCount != tt.want.CPUCount || sb.MemoryMB != tt.want.MemoryMB {
			t.Errorf("%s: record has %d CPUs, %d MB; want %d, %d", tt.template, sb.CPUCount, sb.MemoryMB, tt.want.CPUCount, tt.want.MemoryMB)
		}
	}
}

// TestCreateRefusesTemplateAboveMaximum checks that a template above an
// operator maximum (lowered since it was built, or built by the CLI) is a
// 400-class error naming the limit, never a sandbox with less.
func TestCreateRefusesTemplateAboveMaximum(t *testing.T) {
	tmpls := fakeTemplates{
		"cpu":  {Name: "cpu", ID: "cpu-0123456789ab", Spec: template.Spec{CPUCount: 16}},
		"mem":  {Name: "mem", ID: "mem-0123456789ab", Spec: template.Spec{MemoryMB: 9000}},
		"disk": {Name: "disk", ID: "disk-0123456789ab", Spec: template.Spec{DiskIO: template.DiskIO{WriteMiBps: 1000}}},
	}
	e := newEnv(t, func(c *Config) {
		c.Templates = tmpls
		c.Max = Maxima{CPUCount: 8, MemoryMB: 8192, DiskIO: isolation.DiskIO{WriteBytesPerSec: 500 << 20}}
	})
	for name, want := range map[string]string{
		"cpu":  "cpuCount 16 is more than this server allows: at most 8 (serve --max-cpu-count)",
		"mem":  "memoryMB 9000 is more than this server allows: at most 8192 (serve --max-memory-mb)",
		"disk": "diskIO.writeMiBps 1000 is more than this server allows: at most 500 (serve --max-disk-io write)",
	} {
		_, err := e.m.Create(context.Background(), CreateRequest{Template: name, Timeout: time.Minute})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("create from %s: %v, want ErrInvalid saying %q", name, err, want)
		}
	}
	if running := e.fake.Running(); len(running) != 0 {
		t.Errorf("sandboxes started: %v", running)
	}
}

func TestMaximaCheck(t *testing.T) {
	m := Maxima{CPUCount: 4, MemoryMB: 1024, DiskIO: isolation.DiskIO{ReadIOPS: 100}}
	if err := m.Check(4, 1024, isolation.DiskIO{ReadIOPS: 100, WriteIOPS: 1 << 20}); err != nil {
		t.Errorf("at the maxima (and no write IOPS maximum): %v", err)
	}
	if err := (Maxima{}).Check(1000, 1<<20, isolation.DiskIO{ReadBytesPerSec: 1 << 40}); err != nil {
		t.Errorf("no maxima: %v", err)
	}
	if err := m.Check(0, 0, isolation.DiskIO{ReadIOPS: 101}); err == nil || !strings.Contains(err.Error(), "diskIO.readIOPS 101") {
		t.Errorf("read IOPS above the maximum: %v", err)
	}
}

func TestParseDiskIO(t *testing.T) {
	const mib = 1 << 20
	for _, tt := range []struct {
		in      string
		want    isolation.DiskIO
		wantErr bool
	}{
		{in: "none"},
		{in: ""},
		{in: "read=200,write=100,read-iops=4000,write-iops=2000", want: isolation.DiskIO{
			ReadBytesPerSec: 200 * mib, WriteBytesPerSec: 100 * mib, ReadIOPS: 4000, WriteIOPS: 2000}},
		{in: "write=50", want: isolation.DiskIO{WriteBytesPerSec: 50 * mib}},
		{in: "speed=1", wantErr: true},
		{in: "read=-1", wantErr: true},
		{in: "read", wantErr: true},
	} {
		got, err := ParseDiskIO(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseDiskIO(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil {
			if back, _ := ParseDiskIO(FormatDiskIO(got)); back != got {
				t.Errorf("FormatDiskIO(%+v) = %q does not parse back", got, FormatDiskIO(got))
			}
		}
	}
}
