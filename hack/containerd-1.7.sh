#!/usr/bin/env bash
# Unpacks Debian 13's containerd (1.7) beside the machine's own, for the tests of what
# only 1.7 has (CRI's GetContainerEvents: the evented PLEG on CRI), idempotently:
#   hack/containerd-1.7.sh [DIR]     (default /opt/rkubelet-test/containerd-1.7)
# The binaries land in DIR/usr/bin (containerd, ctr, containerd-shim-runc-v2); nothing
# is installed, so the machine's containerd (Debian 12's 1.6, which the other CRI tests
# run on) stays as it is. The package comes through apt from trixie with a sources list
# and lists of its own, verified with Debian's archive keyring as any apt download.
set -euo pipefail
dir=${1:-/opt/rkubelet-test/containerd-1.7}
if "$dir/usr/bin/containerd" --version 2>/dev/null | grep -q ' 1\.7\.'; then
	exit 0
fi
work=$(mktemp -d /tmp/rkubelet-containerd17.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
	>"$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o Dir::State::status=/dev/null
	-o APT::Sandbox::User=root -o "APT::Architecture=$(dpkg --print-architecture)")
apt-get "${apt_opts[@]}" -qq update
(cd "$work" && apt-get "${apt_opts[@]}" -qq download containerd)
mkdir -p "$dir"
dpkg-deb -x "$work"/containerd_*.deb "$dir"
"$dir/usr/bin/containerd" --version
