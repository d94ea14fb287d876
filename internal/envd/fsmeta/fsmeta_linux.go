package fsmeta

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Read returns the metadata of path (following symlinks). A filesystem
// without xattr support has no metadata rather than an error.
func Read(path string) (map[string]string, error) {
	names, err := list(path)
	if err != nil {
		if unsupported(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing xattrs of %s: %w", path, err)
	}
	var md map[string]string
	for _, name := range names {
		key, ok := strings.CutPrefix(name, Prefix)
		if !ok {
			continue
		}
		val, err := get(path, name)
		if err != nil {
			if errors.Is(err, unix.ENODATA) {
				continue // removed since listed
			}
			return nil, fmt.Errorf("reading xattr %s of %s: %w", name, path, err)
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = val
	}
	return md, nil
}

// Replace makes md the whole metadata of path: keys not in md are removed.
func Replace(path string, md map[string]string) error {
	if err := Validate(md); err != nil {
		return err
	}
	names, err := list(path)
	if err != nil {
		if unsupported(err) && len(md) == 0 {
			return nil
		}
		return fmt.Errorf("listing xattrs of %s: %w", path, err)
	}
	for _, name := range names {
		if strings.HasPrefix(name, Prefix) {
			if err := unix.Removexattr(path, name); err != nil && !errors.Is(err, unix.ENODATA) {
				return fmt.Errorf("removing xattr %s of %s: %w", name, path, err)
			}
		}
	}
	for k, v := range md {
		if err := unix.Setxattr(path, Prefix+k, []byte(v), 0); err != nil {
			return fmt.Errorf("setting xattr %s%s of %s: %w", Prefix, k, path, err)
		}
	}
	return nil
}

func unsupported(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP)
}

func list(path string) ([]string, error) {
	size, err := unix.Listxattr(path, nil)
	for {
		if err != nil {
			return nil, err
		}
		if size == 0 {
			return nil, nil
		}
		buf := make([]byte, size)
		n, err2 := unix.Listxattr(path, buf)
		if errors.Is(err2, unix.ERANGE) { // grew since sized
			size, err = unix.Listxattr(path, nil)
			continue
		}
		if err2 != nil {
			return nil, err2
		}
		return strings.FieldsFunc(string(buf[:n]), func(r rune) bool { return r == 0 }), nil
	}
}

func get(path, name string) (string, error) {
	size, err := unix.Getxattr(path, name, nil)
	for {
		if err != nil {
			return "", err
		}
		buf := make([]byte, size)
		n, err2 := unix.Getxattr(path, name, buf)
		if errors.Is(err2, unix.ERANGE) {
			size, err = unix.Getxattr(path, name, nil)
			continue
		}
		if err2 != nil {
			return "", err2
		}
		return string(buf[:n]), nil
	}
}
