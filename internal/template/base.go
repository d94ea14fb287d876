package template

// Default identity of a sandbox, as the E2B SDKs expect it.
const (
	DefaultUser     = "user"
	DefaultUID      = 1000
	DefaultGID      = 1000
	DefaultWorkdir  = "/home/user"
	DefaultHostname = "e2b.local"
)

// BaseName is the name of the built-in template the server builds first.
const BaseName = "base"

// Base returns the spec of the built-in "base" template: Debian bookworm
// (minbase) with Python 3 (also as "python"), Node.js and npm, git, curl,
// sudo and the usual process and network tools, and the E2B identity: user
// "user" (uid/gid 1000, bash, passwordless sudo, password deleted) owning
// /home/user, world-writable /usr/local and /code, hostname e2b.local;
// and a lean /etc/profile (LeanProfile).
func Base() Spec {
	return Spec{
		Name:    BaseName,
		Suite:   "bookworm",
		Variant: "minbase",
		Packages: []string{
			"bash", "ca-certificates", "curl", "git", "iproute2",
			"ncurses-bin", "nodejs", "npm", "procps", "python-is-python3",
			"python3", "sudo",
		},
		Steps:   append(DefaultUserSteps(), Step{File: &FileStep{Path: "/etc/profile", Content: LeanProfile, Mode: 0o644}}),
		User:    DefaultUser,
		Workdir: DefaultWorkdir,
		Env:     map[string]string{"LANG": "C.UTF-8"},
	}
}

// DefaultUserSteps returns the steps that give a template the E2B identity:
// the default user with passwordless sudo, its home, /usr/local and /code
// writable by everyone, and the hostname files. The spec must install sudo
// (the sudo group exists in every Debian base system).
func DefaultUserSteps() []Step {
	return []Step{
		{User: &UserStep{
			Name: DefaultUser, UID: DefaultUID, GID: DefaultGID,
			Home: DefaultWorkdir, Shell: "/bin/bash", Groups: []string{"sudo"},
		}},
		{Dir: &DirStep{Path: DefaultWorkdir, Mode: 0o755, UID: DefaultUID, GID: DefaultGID}},
		{File: &FileStep{
			Path:    "/etc/sudoers.d/" + DefaultUser,
			Content: DefaultUser + " ALL=(ALL:ALL) NOPASSWD: ALL\n",
			Mode:    0o440,
		}},
		{Dir: &DirStep{Path: "/usr/local", Mode: 0o777}},
		{Dir: &DirStep{Path: "/code", Mode: 0o777}},
		{File: &FileStep{Path: "/etc/hostname", Content: DefaultHostname + "\n", Mode: 0o644}},
		{File: &FileStep{
			Path: "/etc/hosts",
			Content: "127.0.0.1\tlocalhost\n" +
				"127.0.1.1\t" + DefaultHostname + "\n" +
				"::1\tlocalhost ip6-localhost ip6-loopback\n",
			Mode: 0o644,
		}},
	}
}

// LeanProfile replaces Debian's /etc/profile in the base template: the
// same PATH and prompt for sh and bash, without forking id(1) in bash.
// Every commands.run is a login shell (bash -l -c), and Debian's
// "$(id -u)" made each one fork and exec id before the command ran. bash
// knows its effective uid ($EUID); other shells still ask id. bash takes
// an EUID exported into its environment as its own (as a dash script
// would), which picks the PATH below and nothing else.
const LeanProfile = `# /etc/profile: the system-wide profile of login shells (sh, bash, ...).
# Debian's, except that bash takes the user id from $EUID instead of
# forking id(1): commands in agent-sandbox run as login shells.

if [ "${EUID:-$(id -u)}" -eq 0 ]; then
  PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
else
  PATH="/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
fi
export PATH

if [ "${PS1-}" ]; then
  if [ "${BASH-}" ] && [ "$BASH" != "/bin/sh" ]; then
    # /etc/bash.bashrc sets bash's prompt.
    if [ -f /etc/bash.bashrc ]; then
      . /etc/bash.bashrc
    fi
  elif [ "${EUID:-$(id -u)}" -eq 0 ]; then
    PS1='# '
  else
    PS1='$ '
  fi
fi

if [ -d /etc/profile.d ]; then
  for i in /etc/profile.d/*.sh; do
    if [ -r "$i" ]; then
      . "$i"
    fi
  done
  unset i
fi
`
