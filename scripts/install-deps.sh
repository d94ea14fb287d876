#!/usr/bin/env bash
# Installs what the server needs on a fresh Debian 12 machine (root, Go and
# Node present) and, with --test, what the test suite needs too.
# Idempotent: fast when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

for cmd in go node npm; do
	command -v "$cmd" >/dev/null 2>&1 || { echo "install-deps: $cmd is not on PATH" >&2; exit 1; }
done

# Debian packages: debootstrap builds template root filesystems; e2fsprogs
# (mkfs.ext4) makes each sandbox's disk.
missing=()
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: missing ${missing[*]}; install them as root: apt-get install ${missing[*]}" >&2
		exit 1
	fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "${1:-}" = "--test" ] || exit 0

# The code interpreter's tests run its Python side on the host's Debian
# Python: a real ipykernel, and matplotlib, pandas and PIL for charts, data
# and images. Under CI=true a test that lacks them fails (internal/testenv).
test_pkgs=()
for p in python3-ipykernel python3-matplotlib python3-pandas python3-pil; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || test_pkgs+=("$p")
done
if [ ${#test_pkgs[@]} -gt 0 ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${test_pkgs[@]}"
fi

# The SDK suite's node_modules must match its lockfile exactly.
lock=test/sdk/package-lock.json
stamp=test/sdk/node_modules/.lock-stamp
if [ ! -f "$stamp" ] || ! cmp -s "$lock" "$stamp"; then
	npm ci --prefix test/sdk --no-audit --no-fund
	cp "$lock" "$stamp"
fi
