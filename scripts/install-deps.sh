#!/usr/bin/env bash
# Installs what the server needs on a fresh Debian 12 machine (root, Go and
# Node present) and, with --test, what the test suite needs too.
#
#   scripts/install-deps.sh [--test] [--vm]
#
# runsc (Debian's package) is always installed: `serve --backend auto`
# prefers the gvisor backend where there is no usable KVM.
# The vm backend's pieces (QEMU, qemu-img and the guest kernel, unpacked
# into /var/lib/agent-sandbox/kernels/) come with --vm, with --test (the
# tests run VMs under TCG), and without either where /dev/kvm is usable,
# since `serve --backend auto` then picks the vm backend.
# Idempotent: fast when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

test=false vm=false
for arg in "$@"; do
	case "$arg" in
	--test) test=true vm=true ;;
	--vm) vm=true ;;
	*) echo "install-deps: unknown argument $arg (want --test or --vm)" >&2; exit 2 ;;
	esac
done
# Roughly what the server's --backend auto tests (vm.DetectKVM): /dev/kvm
# opens read-write and is hardware virtualisation (kvm_intel or kvm_amd).
if ! $vm && (: <>/dev/kvm) 2>/dev/null && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then
	vm=true
fi

for cmd in go node npm; do
	command -v "$cmd" >/dev/null 2>&1 || { echo "install-deps: $cmd is not on PATH" >&2; exit 1; }
done

# Debian packages: debootstrap builds template root filesystems; e2fsprogs
# (mkfs.ext4) makes each sandbox's disk; runsc runs the gvisor backend's
# sandboxes; for the vm backend, qemu-system-x86 runs the VMs and qemu-utils
# (qemu-img) makes their copy-on-write disks.
missing=()
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
command -v runsc >/dev/null 2>&1 || missing+=(runsc)
if $vm; then
	command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=(qemu-system-x86)
	command -v qemu-img >/dev/null 2>&1 || missing+=(qemu-utils)
fi
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-deps: missing ${missing[*]}; install them as root: apt-get install ${missing[*]}" >&2
		exit 1
	fi
	echo "install-deps: installing ${missing[*]}..."
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
	echo "install-deps: installed ${missing[*]}"
fi

# The guest kernel: the package Debian's linux-image-cloud-amd64 depends on
# (the cloud kernel, small, virtio drivers as modules), unpacked with dpkg-deb
# into kernels/<version>/ and pointed at by kernels/current, the default of
# internal/isolation/vm/kernel. Nothing is installed into the host's /boot.
# Each step is atomic: the version dir appears (rename) only once complete,
# and current is replaced by a rename, so a reader sees the old kernel or the
# new one, never half of one.
install_kernel() {
	local kernels=/var/lib/agent-sandbox/kernels pkg version
	resolve() { apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }'; }
	pkg=$(resolve)
	if [ -z "$pkg" ] || [ ! -f "$kernels/${pkg#linux-image-}/boot/vmlinuz-${pkg#linux-image-}" ]; then
		if [ "$(id -u)" -ne 0 ]; then
			echo "install-deps: the vm backend's guest kernel is missing; run this script as root" >&2
			exit 1
		fi
		apt-get update -qq # the package lists name the current version
		pkg=$(resolve)
		[ -n "$pkg" ] || { echo "install-deps: apt-cache names no package that linux-image-cloud-amd64 depends on" >&2; exit 1; }
	fi
	version=${pkg#linux-image-}
	if [ ! -f "$kernels/$version/boot/vmlinuz-$version" ]; then
		mkdir -p "$kernels"
		local dl unpack
		dl=$(mktemp -d) unpack=$(mktemp -d "$kernels/.unpack-$version.XXXXXX")
		trap 'rm -rf "$dl" "$unpack"' EXIT
		# apt downloads as the user _apt, which must be able to write there.
		chown _apt "$dl" 2>/dev/null || true
		echo "install-deps: guest kernel $version: downloading..."
		(cd "$dl" && apt-get download -qq "$pkg")
		echo "install-deps: guest kernel $version: unpacking..."
		dpkg-deb -x "$dl"/"$pkg"_*.deb "$unpack"
		chmod 755 "$unpack"
		mv -T "$unpack" "$kernels/$version"
		rm -rf "$dl"
		trap - EXIT
		echo "install-deps: guest kernel $version: done"
	fi
	if [ "$(readlink "$kernels/current" 2>/dev/null)" != "$version" ]; then
		ln -sfn "$version" "$kernels/.current.new"
		mv -T "$kernels/.current.new" "$kernels/current"
		echo "install-deps: guest kernel $version: $kernels/current points at it"
	fi
}
if $vm; then
	install_kernel
fi

$test || exit 0

# The code interpreter's tests run its Python side on the host's Debian
# Python: a real ipykernel, and matplotlib, pandas and PIL for charts, data
# and images; its Java side on Debian's Java 17, as in the template. Under
# CI=true a test that lacks them fails (internal/testenv). Chromium is the
# browser playwright-core launches to load the live view page (it downloads
# none of its own). etcd is the cluster tests' store (make test-cluster).
# bubblewrap's start is the bench's baseline for a create without the pool
# (make bench-smoke; without it that target is printed as not judged).
test_pkgs=()
for p in python3-ipykernel python3-matplotlib python3-pandas python3-pil openjdk-17-jre-headless chromium etcd-server bubblewrap; do
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
