package template

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// owner is a USER or --chown value resolved against the image's
// /etc/passwd and /etc/group.
type owner struct {
	UID, GID int
	Groups   []uint32 // supplementary groups, for USER
	Name     string   // "" when the user has no passwd entry
	Home     string   // "" when the user has no passwd entry
}

// resolveOwner resolves spec ("user", "user:group", "uid", "uid:gid") the
// way Docker does: a name must exist in the image; a number need not, and
// then has gid = uid's primary group or, without a passwd entry, gid 0.
// readFile reads a file of the image by its path relative to the root.
func resolveOwner(readFile func(name string) ([]byte, error), spec string) (owner, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	passwd, err := readFile("etc/passwd")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return owner{}, fmt.Errorf("reading /etc/passwd: %w", err)
	}
	group, err := readFile("etc/group")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return owner{}, fmt.Errorf("reading /etc/group: %w", err)
	}
	var o owner
	name := ""
	found := false
	for line := range strings.Lines(string(passwd)) {
		f := strings.Split(strings.TrimRight(line, "\n"), ":")
		if len(f) < 7 || (f[0] != userPart && f[2] != userPart) {
			continue
		}
		uid, err1 := strconv.Atoi(f[2])
		gid, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil {
			continue
		}
		o, name, found = owner{UID: uid, GID: gid, Name: f[0], Home: f[5]}, f[0], true
		break
	}
	if !found {
		uid, err := strconv.Atoi(userPart)
		if err != nil {
			return owner{}, fmt.Errorf("user %q not found in /etc/passwd", userPart)
		}
		o = owner{UID: uid}
	}
	if hasGroup {
		gid, ok := lookupGroup(string(group), groupPart)
		if !ok {
			return owner{}, fmt.Errorf("group %q not found in /etc/group", groupPart)
		}
		o.GID = gid
	}
	if name != "" {
		o.Groups = memberOf(string(group), name)
	}
	return o, nil
}

func lookupGroup(group, ref string) (int, bool) {
	for line := range strings.Lines(group) {
		f := strings.Split(strings.TrimRight(line, "\n"), ":")
		if len(f) >= 3 && (f[0] == ref || f[2] == ref) {
			if gid, err := strconv.Atoi(f[2]); err == nil {
				return gid, true
			}
		}
	}
	if gid, err := strconv.Atoi(ref); err == nil {
		return gid, true
	}
	return 0, false
}

// memberOf returns the gids of the groups that list user as a member.
func memberOf(group, user string) []uint32 {
	var gids []uint32
	for line := range strings.Lines(group) {
		f := strings.Split(strings.TrimRight(line, "\n"), ":")
		if len(f) < 4 {
			continue
		}
		for m := range strings.SplitSeq(f[3], ",") {
			if m == user {
				if gid, err := strconv.ParseUint(f[2], 10, 32); err == nil {
					gids = append(gids, uint32(gid))
				}
				break
			}
		}
	}
	return gids
}
