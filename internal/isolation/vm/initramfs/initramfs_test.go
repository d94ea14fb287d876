package initramfs

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agent-sandbox/agent-sandbox/internal/isolation/guest"
	"github.com/agent-sandbox/agent-sandbox/internal/isolation/vm/vminit"
	"github.com/google/go-cmp/cmp"
)

// entry is one cpio entry as readNewc parses it.
type entry struct {
	name         string
	mode         uint32
	rmajor       uint32
	rminor       uint32
	data         string
	afterTrailer bool // in an archive after the first
}

// readNewc parses concatenated newc archives the way the kernel does,
// checking the format as it goes: magic, hex fields, NUL-terminated names,
// 4-byte alignment, a trailer ending each archive.
func readNewc(t *testing.T, b []byte) []entry {
	t.Helper()
	var out []entry
	archives, ended := 0, false
	off := 0
	for off < len(b) {
		if off%4 != 0 {
			t.Fatalf("entry at %d: not 4-byte aligned", off)
		}
		if len(b)-off < 110 || string(b[off:off+6]) != "070701" {
			t.Fatalf("entry at %d: no newc header", off)
		}
		var f [13]uint32
		for i := range f {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("entry at %d: field %d: %v", off, i, err)
			}
			f[i] = uint32(v)
		}
		mode, size, rmajor, rminor, namesize := f[1], int(f[6]), f[9], f[10], int(f[11])
		nameEnd := off + 110 + namesize
		if b[nameEnd-1] != 0 {
			t.Fatalf("entry at %d: name not NUL-terminated", off)
		}
		name := string(b[off+110 : nameEnd-1])
		dataOff := nameEnd + int(pad(int64(nameEnd)))
		data := string(b[dataOff : dataOff+size])
		off = dataOff + size + int(pad(int64(dataOff+size)))
		ended = name == "TRAILER!!!"
		if ended {
			archives++
			continue
		}
		out = append(out, entry{name: name, mode: mode, rmajor: rmajor, rminor: rminor, data: data, afterTrailer: archives > 0})
	}
	if off != len(b) {
		t.Fatalf("archive ends at %d of %d bytes", off, len(b))
	}
	if !ended {
		t.Fatal("the last archive has no trailer")
	}
	return out
}

func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.File("/a/b/c.txt", 0o644, strings.NewReader("hello"), 5))
	must(w.Dir("a", 0o700)) // already written as c.txt's parent: not again
	must(w.File("a/d", 0o755, strings.NewReader("xyz1"), 4))
	must(w.CharDev("dev/console", 0o600, 5, 1))
	must(w.Close())
	got := readNewc(t, buf.Bytes())
	want := []entry{
		{name: "a", mode: 0o040755},
		{name: "a/b", mode: 0o040755},
		{name: "a/b/c.txt", mode: 0o100644, data: "hello"},
		{name: "a/d", mode: 0o100755, data: "xyz1"},
		{name: "dev", mode: 0o040755},
		{name: "dev/console", mode: 0o020600, rmajor: 5, rminor: 1},
	}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(entry{})); d != "" {
		t.Errorf("entries (-want +got):\n%s", d)
	}

	for _, bad := range []string{"", "/", "..", "../x", "TRAILER!!!"} {
		if err := NewWriter(&bytes.Buffer{}).File(bad, 0o644, strings.NewReader(""), 0); err == nil {
			t.Errorf("File(%q) succeeded", bad)
		}
	}
	if err := NewWriter(&bytes.Buffer{}).File("short", 0o644, strings.NewReader("ab"), 3); err == nil {
		t.Error("File with less data than its size succeeded")
	}
}

// fakeModule is a minimal relocatable ELF file with a .modinfo section
// holding info (key=value strings), as a kernel module has.
func fakeModule(t *testing.T, info ...string) []byte {
	t.Helper()
	modinfo := []byte(strings.Join(info, "\x00") + "\x00")
	shstr := []byte("\x00.modinfo\x00.shstrtab\x00")
	hdr := elf.Header64{
		Type: uint16(elf.ET_REL), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Ehsize: 64, Shentsize: 64, Shnum: 3, Shstrndx: 2,
		Shoff: uint64(64 + len(modinfo) + len(shstr)),
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS], hdr.Ident[elf.EI_DATA], hdr.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	secs := []elf.Section64{
		{},
		{Name: 1, Type: uint32(elf.SHT_PROGBITS), Off: 64, Size: uint64(len(modinfo)), Addralign: 1},
		{Name: 10, Type: uint32(elf.SHT_STRTAB), Off: uint64(64 + len(modinfo)), Size: uint64(len(shstr)), Addralign: 1},
	}
	var b bytes.Buffer
	for _, v := range []any{hdr, modinfo, shstr, secs} {
		if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// fakeKernel lays out a kernel directory as a Debian linux-image package
// unpacks: modules (file path under kernel/ → .modinfo strings) and the
// built-in list.
func fakeKernel(t *testing.T, modules map[string][]string, builtin ...string) string {
	t.Helper()
	dir := t.TempDir()
	mods := filepath.Join(dir, "lib/modules/6.1.0-test")
	for p, info := range modules {
		f := filepath.Join(mods, "kernel", p)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, fakeModule(t, info...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(mods, "modules.builtin"), []byte(strings.Join(builtin, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestResolve(t *testing.T) {
	kdir := fakeKernel(t, map[string][]string{
		"drivers/a.ko":      {"license=GPL", "depends=b,my_dash"},
		"drivers/b.ko":      {"depends=my_dash,ext4"},
		"net/my-dash.ko":    {"depends="},
		"net/soft.ko":       {"softdep=pre: crc32c b post: a", "depends="},
		"net/broken.ko":     {"depends=missing"},
		"net/cycle_one.ko":  {"depends=cycle_two"},
		"net/cycle_two.ko":  {"depends=cycle_one"},
		"net/noinfo.ko":     nil,
		"fs/ext4/other.ko2": nil, // not a module file
	}, "kernel/fs/ext4/ext4.ko", "kernel/crypto/crc32c_generic.ko")
	tree, err := readModuleTree(filepath.Join(kdir, "lib/modules/6.1.0-test"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		in      []string
		want    []string // module file names, in load order
		wantErr string
	}{
		{"deps first", []string{"a"}, []string{"my-dash.ko", "b.ko", "a.ko"}, ""},
		{"each once", []string{"b", "a", "my-dash"}, []string{"my-dash.ko", "b.ko", "a.ko"}, ""},
		{"built in", []string{"ext4"}, nil, ""},
		{"softdep pre, an alias skipped", []string{"soft"}, []string{"my-dash.ko", "b.ko", "soft.ko"}, ""},
		{"missing dependency", []string{"broken"}, nil, "module missing (needed by broken)"},
		{"missing module", []string{"nope"}, nil, "module nope is neither"},
		{"cycle", []string{"cycle_one"}, nil, "dependency cycle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := tree.resolve(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("resolve(%q) = %v, %v; want error %q", tc.in, files, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range files {
				got = append(got, filepath.Base(f))
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("resolve(%q) (-want +got):\n%s", tc.in, d)
			}
		})
	}
}

// TestBuild builds an initramfs with a config appended and reads both
// archives back: what the guest's init finds where it looks.
func TestBuild(t *testing.T) {
	kdir := fakeKernel(t, map[string][]string{
		"drivers/virtio/virtio.ko":      {"depends="},
		"drivers/virtio/virtio_mmio.ko": {"depends=virtio"},
	})
	if err := os.MkdirAll(filepath.Join(kdir, "boot"), 0o755); err != nil {
		t.Fatal(err)
	}
	init := filepath.Join(t.TempDir(), "vminit")
	if err := os.WriteFile(init, []byte("#!init"), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Build(&buf, kdir, init, []string{"virtio_mmio"}); err != nil {
		t.Fatal(err)
	}
	cfg := vminit.Config{Hostname: "sbx", EnvdToken: "tok", Binaries: map[string]string{guest.EnvdPath: "envd"}, Pids: 100}
	if err := AppendConfig(&buf, cfg); err != nil {
		t.Fatal(err)
	}
	got := map[string]entry{}
	var names []string
	for _, e := range readNewc(t, buf.Bytes()) {
		got[e.name] = e
		names = append(names, e.name)
		if dir := path.Dir(e.name); dir != "." {
			if _, ok := got[dir]; !ok {
				t.Errorf("%s comes before its directory %s", e.name, dir)
			}
		}
	}
	modules := strings.TrimPrefix(vminit.ModulesDir, "/")
	wantNames := []string{"dev", "dev/console", "init", modules, modules + "/virtio.ko", modules + "/virtio_mmio.ko", modules + "/order", "config.json"}
	if d := cmp.Diff(wantNames, names); d != "" {
		t.Errorf("entries (-want +got):\n%s", d)
	}
	if e := got["init"]; e.data != "#!init" || e.mode != 0o100755 {
		t.Errorf("init: %+v", e)
	}
	if e := got[modules+"/order"]; e.data != "virtio.ko\nvirtio_mmio.ko\n" {
		t.Errorf("order: %q", e.data)
	}
	c := got[strings.TrimPrefix(vminit.ConfigPath, "/")]
	if !c.afterTrailer || c.mode != 0o100400 {
		t.Errorf("config: %+v; want mode 0400 in the second archive", c)
	}
	var back vminit.Config
	if err := json.Unmarshal([]byte(c.data), &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(cfg, back); d != "" {
		t.Errorf("config read back (-want +got):\n%s", d)
	}
	if v, err := KernelVersion(kdir); v != "6.1.0-test" || err != nil {
		t.Errorf("KernelVersion = %q, %v", v, err)
	}
}

func TestAppendConfigValidates(t *testing.T) {
	err := AppendConfig(&bytes.Buffer{}, vminit.Config{Hostname: "x"})
	if err == nil || !strings.Contains(err.Error(), "no binary for envd") {
		t.Errorf("AppendConfig without envd: %v", err)
	}
}
