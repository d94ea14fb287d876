package envd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// execAs runs the exec-as command; it returns only on error.
func execAs(args []string) error {
	s, err := parseExecAs(args)
	if err != nil {
		return err
	}
	if err := mkdirOwned(s.dir, int(s.uid), int(s.gid)); err != nil {
		return fmt.Errorf("%s: working directory %s: %w", ExecAsCommand, s.dir, err)
	}
	if err := os.Chdir(s.dir); err != nil {
		return fmt.Errorf("%s: %w", ExecAsCommand, err)
	}
	groups := make([]int, len(s.groups))
	for i, g := range s.groups {
		groups[i] = int(g)
	}
	// The syscall package changes every thread's ids, not just this one's.
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("%s: setting groups: %w", ExecAsCommand, err)
	}
	if err := syscall.Setresgid(int(s.gid), int(s.gid), int(s.gid)); err != nil {
		return fmt.Errorf("%s: becoming group %d: %w", ExecAsCommand, s.gid, err)
	}
	if err := syscall.Setresuid(int(s.uid), int(s.uid), int(s.uid)); err != nil {
		return fmt.Errorf("%s: becoming user %d: %w", ExecAsCommand, s.uid, err)
	}
	if s.merge {
		if err := syscall.Dup3(1, 2, 0); err != nil {
			return fmt.Errorf("%s: merging stderr into stdout: %w", ExecAsCommand, err)
		}
	}
	err = syscall.Exec(s.argv[0], s.argv, s.env)
	return fmt.Errorf("%s: executing %s: %w", ExecAsCommand, s.argv[0], err)
}

// mkdirOwned makes dir and its missing parents, each owned by uid:gid, as
// Docker does for a WORKDIR that does not exist. An existing dir is left
// alone.
func mkdirOwned(dir string, uid, gid int) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return errors.New("not a directory")
		}
		return nil
	}
	if err := mkdirOwned(filepath.Dir(dir), uid, gid); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Lchown(dir, uid, gid)
}
