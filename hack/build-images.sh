#!/usr/bin/env bash
# Builds the offline images that rkubelet's examples and integration tests use, through
# the docker CLI. No registry is reachable from the project's machines, so the images are
# made from local binaries and `docker import`ed. Idempotent: an image that already exists
# is left alone, and packages are installed (with one `apt-get update`) only when missing.
#
#   rkubelet/busybox:1.35  Debian's static busybox, one symlink per applet
#   rkubelet/pause:3.10    a static (musl) rkubelet alone in the image, ENTRYPOINT
#                          ["/rkubelet","pause"]: the image a node with no registry
#                          imports itself as (src/images/selfimport.rs)
#
# Usage: hack/build-images.sh   (as root, or as a user in the docker group with sudo for apt)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
busybox_image="rkubelet/busybox:1.35"
pause_image="${PAUSE_IMAGE:-rkubelet/pause:3.10}"

log() { printf 'build-images: %s\n' "$*" >&2; }

if ! docker version >/dev/null 2>&1; then
	log "cannot reach the Docker engine; start it (systemctl start docker, or: setsid dockerd >/var/log/dockerd.log 2>&1 &)"
	exit 1
fi

apt_updated=0
# Installs Debian packages, running `apt-get update` once and only when something is missing.
apt_install() {
	if [ "$apt_updated" = 0 ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Whether /bin/busybox is there and statically linked (ldd: "not a dynamic executable").
static_busybox() { [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; }

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

build_busybox() {
	if image_exists "$busybox_image"; then
		log "$busybox_image exists"
		return
	fi
	# The image has no libc: the busybox copied in must be the static one. Debian's
	# dynamic `busybox` (which a kernel package's initramfs-tools may pull in, replacing
	# busybox-static) would give an image whose every command is "no such file".
	if ! static_busybox; then
		log "installing busybox-static"
		apt_install busybox-static
	fi
	local root="$work/busybox"
	mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/root" "$root/var/www"
	chmod 1777 "$root/tmp"
	cp /bin/busybox "$root/bin/busybox"
	# One link per applet. Skip `busybox` itself, or the binary would become a link to itself.
	local applet
	for applet in $(/bin/busybox --list); do
		[ "$applet" = busybox ] && continue
		ln -sf busybox "$root/bin/$applet"
	done
	log "importing $busybox_image"
	# An imported image has no PATH of its own; without one, `sh` is not found.
	tar -C "$root" -c . | docker import \
		-c 'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin' \
		-c 'CMD ["/bin/sh"]' \
		- "$busybox_image" >/dev/null
}

# The static rkubelet the pause image holds (and tests/it/pause.rs runs): the dev
# profile, which builds in a fraction of a fat-LTO release build's time; stripped, it
# is ~30 MB. It is built for the host's architecture, so the quick start works on an
# arm64 or armv7 board too.
case "$(uname -m)" in
	x86_64) static_target="x86_64-unknown-linux-musl" ;;
	aarch64 | arm64) static_target="aarch64-unknown-linux-musl" ;;
	# armv7: glibc linked statically (.cargo/config.toml), as `make build-armv7`.
	armv7l | armv7*) static_target="armv7-unknown-linux-gnueabihf" ;;
	*)
		log "no static target known for $(uname -m)"
		exit 1
		;;
esac
# The rustup target and musl-tools, installed when missing; run even when the image
# exists, since tests/it/pause.rs builds the same static binary.
static_tools() {
	# From the repository root, so the target goes to the toolchain that
	# rust-toolchain.toml pins (the one the build below uses).
	if ! (cd "$here/.." && rustup target list --installed 2>/dev/null) | grep -qx "$static_target"; then
		log "adding the rustup target $static_target"
		(cd "$here/.." && rustup target add "$static_target" >/dev/null)
	fi
	if [ "$static_target" = x86_64-unknown-linux-musl ] && ! command -v musl-gcc >/dev/null 2>&1; then
		log "installing musl-tools"
		apt_install musl-tools
	fi
}

build_static_rkubelet() {
	# (ring's C compiler per target: .cargo/config.toml's [env], musl-gcc on x86_64.)
	(cd "$here/.." && cargo build --quiet --bin rkubelet --target "$static_target")
	local target_dir="${CARGO_TARGET_DIR:-$here/../target}"
	static_bin="$target_dir/$static_target/debug/rkubelet"
}

build_pause() {
	if image_exists "$pause_image"; then
		log "$pause_image exists"
		return
	fi
	build_static_rkubelet
	local root="$work/pause"
	mkdir -p "$root"
	strip -o "$root/rkubelet" "$static_bin" 2>/dev/null || cp "$static_bin" "$root/rkubelet"
	chmod 0755 "$root/rkubelet"
	log "importing $pause_image"
	tar -C "$root" --owner=0 --group=0 -c rkubelet \
		| docker import -c 'ENTRYPOINT ["/rkubelet","pause"]' - "$pause_image" >/dev/null
}

static_tools
build_busybox
build_pause
log "done: $busybox_image $pause_image"
