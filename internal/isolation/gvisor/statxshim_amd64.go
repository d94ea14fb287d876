package gvisor

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
)

// statxShim returns a shared object that defines statx(3) as glibc's, but
// without AT_NO_AUTOMOUNT: runsc releases before 2023 refuse statx(2) (and
// fstatat(2), glibc's fallback) with that flag, which Debian 12's ls and
// stat pass on every file, so that both fail there with EINVAL. Preloaded
// into every dynamically linked program of a sandbox (/etc/ld.so.preload),
// it makes them work; the flag asks only not to trigger an automount,
// and a gVisor sandbox has no automounts.
//
// It is written here, not compiled, so that the build needs no C
// toolchain: one function that moves statx's arguments into place for
// glibc's syscall(2) and jumps to it through a GOT entry the dynamic
// linker fills (libc.so.6 is a DT_NEEDED of it), with a SysV hash table
// for the lookup and a non-executable stack (PT_GNU_STACK).
func statxShim() []byte {
	// statx(int dirfd, const char *path, int flags, unsigned mask,
	// struct statx *buf) → syscall(SYS_statx, dirfd, path, flags &^
	// AT_NO_AUTOMOUNT, mask, buf); the jump's displacement is patched in
	// below.
	code := []byte{
		0x4d, 0x89, 0xc1, // mov r9, r8: buf
		0x41, 0x89, 0xc8, // mov r8d, ecx: mask
		0x89, 0xd1, // mov ecx, edx: flags
		0x81, 0xe1, 0xff, 0xf7, 0xff, 0xff, // and ecx, ^AT_NO_AUTOMOUNT (0x800)
		0x48, 0x89, 0xf2, // mov rdx, rsi: path
		0x48, 0x63, 0xf7, // movsxd rsi, edi: dirfd, sign-extended (AT_FDCWD is -100)
		0xbf, 0x4c, 0x01, 0x00, 0x00, // mov edi, 332: SYS_statx
		0xff, 0x25, 0, 0, 0, 0, // jmp [rip+disp32]: the GOT entry of syscall
	}
	const (
		page      = 0x1000
		ehdrSize  = 64
		phdrSize  = 56
		nPhdr     = 4
		symSize   = 24
		relaSize  = 24
		dynSize   = 16
		statxSym  = 1
		syscalSym = 2
	)
	align := func(n, a uint64) uint64 { return (n + a - 1) &^ (a - 1) }
	strtab := []byte("\x00statx\x00syscall\x00libc.so.6\x00")
	nameStatx, nameSyscall, nameLibc := uint32(1), uint32(7), uint32(15)
	// SysV hash table: one bucket holding the chain 1 → 2.
	hash := []uint32{1, 3, 1, 0, 2, 0}

	hashOff := uint64(ehdrSize + nPhdr*phdrSize)
	symOff := align(hashOff+uint64(4*len(hash)), 8)
	strOff := symOff + 3*symSize
	relaOff := align(strOff+uint64(len(strtab)), 8)
	textOff := align(relaOff+relaSize, 16)
	textEnd := textOff + uint64(len(code))
	dynOff := uint64(page) // the writable segment, on its own page
	dyn := []elf.Dyn64{
		{Tag: int64(elf.DT_NEEDED), Val: uint64(nameLibc)},
		{Tag: int64(elf.DT_HASH), Val: hashOff},
		{Tag: int64(elf.DT_STRTAB), Val: strOff},
		{Tag: int64(elf.DT_SYMTAB), Val: symOff},
		{Tag: int64(elf.DT_STRSZ), Val: uint64(len(strtab))},
		{Tag: int64(elf.DT_SYMENT), Val: symSize},
		{Tag: int64(elf.DT_RELA), Val: relaOff},
		{Tag: int64(elf.DT_RELASZ), Val: relaSize},
		{Tag: int64(elf.DT_RELAENT), Val: relaSize},
		{Tag: int64(elf.DT_NULL)},
	}
	gotOff := dynOff + uint64(len(dyn)*dynSize)
	end := gotOff + 8
	// The jump reads the GOT entry relative to the next instruction.
	binary.LittleEndian.PutUint32(code[len(code)-4:], uint32(int32(int64(gotOff)-int64(textEnd))))

	var b bytes.Buffer
	w := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	pad := func(to uint64) { b.Write(make([]byte, int(to)-b.Len())) }
	hdr := elf.Header64{
		Type: uint16(elf.ET_DYN), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Phoff: ehdrSize, Ehsize: ehdrSize, Phentsize: phdrSize, Phnum: nPhdr, Shentsize: 64,
	}
	copy(hdr.Ident[:], elf.ELFMAG)
	hdr.Ident[elf.EI_CLASS], hdr.Ident[elf.EI_DATA], hdr.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	w(hdr)
	w(elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_X), Filesz: textEnd, Memsz: textEnd, Align: page})
	w(elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_W), Off: dynOff, Vaddr: dynOff, Paddr: dynOff,
		Filesz: end - dynOff, Memsz: end - dynOff, Align: page})
	w(elf.Prog64{Type: uint32(elf.PT_DYNAMIC), Flags: uint32(elf.PF_R | elf.PF_W), Off: dynOff, Vaddr: dynOff, Paddr: dynOff,
		Filesz: uint64(len(dyn) * dynSize), Memsz: uint64(len(dyn) * dynSize), Align: 8})
	w(elf.Prog64{Type: uint32(elf.PT_GNU_STACK), Flags: uint32(elf.PF_R | elf.PF_W), Align: 16})
	w(hash)
	pad(symOff)
	global := elf.ST_INFO(elf.STB_GLOBAL, elf.STT_FUNC)
	w([]elf.Sym64{
		{},
		// Any section index but SHN_UNDEF and SHN_ABS makes it defined
		// and relative to where the object is loaded.
		{Name: nameStatx, Info: global, Shndx: 1, Value: textOff, Size: uint64(len(code))},
		{Name: nameSyscall, Info: global},
	})
	b.Write(strtab)
	pad(relaOff)
	w(elf.Rela64{Off: gotOff, Info: elf.R_INFO(syscalSym, uint32(elf.R_X86_64_GLOB_DAT))})
	pad(textOff)
	b.Write(code)
	pad(dynOff)
	w(dyn)
	w(uint64(0)) // the GOT entry
	return b.Bytes()
}
