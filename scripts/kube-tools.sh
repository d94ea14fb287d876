#!/usr/bin/env bash
# kube-tools.sh: the control plane of the cluster tests (test/cluster).
# kube-apiserver is built from tools/kube at the k8s.io/kubernetes version
# its go.mod pins, into a cache keyed by that version
# ($AGENT_SANDBOX_KUBE_CACHE, default /var/cache/agent-sandbox/kube):
# <cache>/kube-apiserver/<version>/kube-apiserver, reused once there. etcd is
# Debian's (etcd-server, from scripts/install-deps.sh --test). It prints the
# env assignments the tests read; with --print it builds nothing.
#
# kube-apiserver takes some 8 to 10 minutes of two cores and 2.8 GB the
# first time, a few seconds when only its link is missing.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${AGENT_SANDBOX_KUBE_CACHE:-/var/cache/agent-sandbox/kube}
go=${GO:-go}
tools=$root/tools/kube

version=$(cd "$tools" && GOFLAGS=-mod=mod "$go" list -m -f '{{.Version}}' k8s.io/kubernetes)
apiserver=$cache/kube-apiserver/$version/kube-apiserver
etcd=$(command -v etcd || true)
if [[ -z $etcd ]]; then
	echo "kube-tools: no etcd: install Debian's etcd-server (scripts/install-deps.sh --test)" >&2
	exit 1
fi

if [[ ${1:-} != --print && ! -x $apiserver ]]; then
	mkdir -p "${apiserver%/*}"
	echo "kube-tools: building kube-apiserver $version (tools/kube) into $apiserver" >&2
	start=$SECONDS
	# The version it reports (/version, kubectl version): a module build has
	# no git tree to take it from.
	minor=${version#v1.}
	minor=${minor%%.*}
	v=k8s.io/component-base/version
	# Built to a temporary name and renamed, so a cut-short build leaves no
	# binary that the next run would take as done.
	(cd "$tools" && GOFLAGS=-mod=mod nice -n 19 "$go" build -trimpath \
		-ldflags "-X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=$minor" \
		-o "$apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
	mv "$apiserver.tmp" "$apiserver"
	echo "kube-tools: kube-apiserver $version built in $((SECONDS - start)) s" >&2
fi
echo "AGENT_SANDBOX_KUBE_APISERVER=$apiserver"
echo "AGENT_SANDBOX_KUBE_ETCD=$etcd"
