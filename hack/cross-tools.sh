#!/usr/bin/env bash
# Installs what a board build of rkubelet needs, only what is missing (idempotent):
#   hack/cross-tools.sh TARGET [qemu]
# the rustup target, the Debian cross C toolchain that ring's C and assembly and the
# link need (.cargo/config.toml names them), and with `qemu`, Debian's qemu-user to
# run the result.
set -euo pipefail
target=${1:?usage: $0 TARGET [qemu]}
# rustup from the repository root: the target goes to the toolchain that
# rust-toolchain.toml pins, whatever directory this is called from.
cd "$(dirname "$0")/.."
want_qemu=${2:-}

need_update=1
apt_install() {
	if [ "$need_update" = 1 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		need_update=0
	fi
	echo "cross-tools: apt-get install -y $*" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
# have FILE-OR-COMMAND PACKAGE...: installs the packages when the thing is missing.
have() {
	local what=$1
	shift
	case "$what" in
	/*) [ -e "$what" ] && return 0 ;;
	*) command -v "$what" >/dev/null && return 0 ;;
	esac
	apt_install "$@"
}

case "$target" in
aarch64-unknown-linux-musl)
	have aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu
	qemu=qemu-aarch64
	;;
armv7-unknown-linux-gnueabihf | thumbv7neon-unknown-linux-gnueabihf)
	have arm-linux-gnueabihf-gcc gcc-arm-linux-gnueabihf
	# crt-static links glibc's libc.a.
	have /usr/arm-linux-gnueabihf/lib/libc.a libc6-dev-armhf-cross
	qemu=qemu-arm
	;;
armv7-unknown-linux-musleabihf)
	have arm-linux-gnueabihf-gcc gcc-arm-linux-gnueabihf
	qemu=qemu-arm
	;;
x86_64-unknown-linux-musl)
	have musl-gcc musl-tools
	qemu=
	;;
*)
	echo "cross-tools: unknown target $target" >&2
	exit 64
	;;
esac

if ! rustup target list --installed | grep -qx "$target"; then
	echo "cross-tools: rustup target add $target" >&2
	rustup target add "$target"
fi
if [ "$want_qemu" = qemu ] && [ -n "$qemu" ]; then
	have "$qemu" qemu-user
fi
