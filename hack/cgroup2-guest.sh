#!/usr/bin/env bash
# Runs one command of the host inside a qemu guest whose /sys/fs/cgroup is a real
# cgroup v2 hierarchy set up as systemd sets it up, and exits with the command's status:
#   hack/cgroup2-guest.sh [-k KERNEL-ARG]... [-e NAME=VALUE]... -- PROGRAM [ARGS...]
#
# Why a guest: a host that binds its controllers to cgroup v1 (this project's machines)
# cannot hand cpu, memory or pids to a cgroup2 mount of a test's own, and the memory
# controller cannot be taken away from a running kernel. The guest boots Debian's
# kernel (linux-image-amd64, from /boot and /lib/modules) with an initramfs built
# here: busybox and the virtio/9p modules. It mounts the host's root read-only over
# virtio-9p and runs PROGRAM chrooted there, so the host's glibc build and its
# libraries run unchanged; /tmp, /run and /var/tmp are the guest's tmpfs. cgroup2 is
# mounted at /sys/fs/cgroup (a fresh kernel with no v1 mount: every controller is on
# v2) and, as systemd does at boot, every controller is enabled in the root's
# cgroup.subtree_control and PROGRAM runs in /init.scope. `-k cgroup_disable=memory`
# boots the kernel without the memory controller (Raspberry Pi OS's default).
#
# KVM when /dev/kvm works and the CPU shows vmx or svm, TCG (emulation) otherwise;
# CGROUP2_GUEST_ACCEL=kvm or tcg forces one. Needs qemu-system-x86 and
# linux-image-amd64 (apt) and /bin/busybox (busybox-static, or Debian's dynamic
# busybox with its libraries); CGROUP2_GUEST_TIMEOUT (seconds, default 900) bounds
# the whole run.
set -euo pipefail

kargs=()
envs=()
while [ $# -gt 0 ]; do
	case "$1" in
	-k) kargs+=("$2"); shift 2 ;;
	-e) envs+=("$2"); shift 2 ;;
	--) shift; break ;;
	*) echo "usage: $0 [-k KERNEL-ARG]... [-e NAME=VALUE]... -- PROGRAM [ARGS...]" >&2; exit 2 ;;
	esac
done
[ $# -gt 0 ] || { echo "$0: no program given" >&2; exit 2; }

log() { printf 'cgroup2-guest: %s\n' "$*" >&2; }

qemu=$(command -v qemu-system-x86_64) || { log "no qemu-system-x86_64: apt-get install -y qemu-system-x86"; exit 1; }
[ -x /bin/busybox ] || { log "no /bin/busybox: apt-get install -y busybox-static"; exit 1; }
for tool in cpio modprobe; do
	command -v "$tool" >/dev/null || { log "no $tool: apt-get install -y cpio kmod"; exit 1; }
done
# The newest Debian kernel installed (vmlinuz-<version>, its modules beside it).
kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)
[ -n "$kernel" ] || { log "no kernel in /boot: apt-get install -y linux-image-amd64"; exit 1; }
kver=${kernel#/boot/vmlinuz-}
[ -d "/lib/modules/$kver" ] || { log "no /lib/modules/$kver for $kernel"; exit 1; }

work=$(mktemp -d /tmp/rkubelet-cgroup2-guest.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/initramfs
mkdir -p "$root/bin" "$root/lib/modules" "$root/proc" "$root/sys" "$root/dev" "$root/newroot"
cp /bin/busybox "$root/bin/busybox"
# A dynamic busybox (Debian's `busybox` rather than `busybox-static`) brings its libraries.
for lib in $(ldd /bin/busybox 2>/dev/null | grep -o '/[^ ]*'); do
	mkdir -p "$root$(dirname "$lib")"
	cp -L "$lib" "$root$lib"
done

# The virtio PCI transport and the 9p filesystem, in dependency order (modprobe's), for
# a kernel that builds them as modules; none when built in.
: >"$root/modules"
for m in virtio_pci 9pnet_virtio 9p; do
	modprobe -S "$kver" --show-depends "$m" | while read -r verb path _; do
		[ "$verb" = insmod ] || continue
		name=$(basename "$path")
		case "$name" in
		*.ko.xz) xz -dc "$path" >"$root/lib/modules/${name%.xz}"; name=${name%.xz} ;;
		*.ko.zst) zstd -qdc "$path" >"$root/lib/modules/${name%.zst}"; name=${name%.zst} ;;
		*) cp "$path" "$root/lib/modules/$name" ;;
		esac
		grep -qx "$name" "$root/modules" || echo "$name" >>"$root/modules"
	done
done

# The command, quoted for bash (the host's, which runs it in the guest), with a clean
# environment.
cmd="exec /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp TMPDIR=/tmp"
for e in "${envs[@]}"; do cmd+=" $(printf '%q' "$e")"; done
for a in "$@"; do cmd+=" $(printf '%q' "$a")"; done
# The test binary's working directory: where it was started on the host, if the guest
# sees it (the host's root is the guest's).
printf 'cd %q 2>/dev/null || cd /\n%s\n' "$PWD" "$cmd" >"$root/run.sh"

cat >"$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules); do insmod "/lib/modules/$m" || echo "guest: insmod $m failed"; done
fail() { echo "guest: $*"; echo "RKUBELET-GUEST-EXIT=99"; reboot -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot /newroot \
	|| fail "cannot mount the host's root over 9p"
n=/newroot
mount -t proc proc $n/proc
mount -t sysfs sysfs $n/sys
mount -t devtmpfs devtmpfs $n/dev
mkdir -p $n/dev/pts $n/dev/shm 2>/dev/null
mount -t devpts devpts $n/dev/pts 2>/dev/null
mount -t tmpfs tmpfs $n/dev/shm
for d in tmp run var/tmp; do mount -t tmpfs -o mode=1777 tmpfs $n/$d; done
# As systemd mounts it: cgroup2 alone (nsdelegate, memory_recursiveprot), every
# controller of the root handed down, this process in init.scope.
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 $n/sys/fs/cgroup \
	|| mount -t cgroup2 cgroup2 $n/sys/fs/cgroup || fail "cannot mount cgroup2"
cg=$n/sys/fs/cgroup
for c in $(cat $cg/cgroup.controllers); do echo "+$c" >$cg/cgroup.subtree_control; done
mkdir -p $cg/init.scope $cg/system.slice
echo $$ >$cg/init.scope/cgroup.procs
ip link set lo up 2>/dev/null
echo "guest: kernel $(uname -r); cgroup2 controllers: $(cat $cg/cgroup.controllers); \
subtree_control: $(cat $cg/cgroup.subtree_control); cmdline: $(cat /proc/cmdline)"
cp /run.sh $n/run/rkubelet-guest.sh
chroot $n /bin/bash /run/rkubelet-guest.sh
echo "RKUBELET-GUEST-EXIT=$?"
sync
reboot -f
EOF
chmod +x "$root/init" "$root/bin/busybox"
(cd "$root" && find . | cpio -o -H newc --quiet) | gzip -1 >"$work/initrd.gz"

case "${CGROUP2_GUEST_ACCEL:-auto}" in
tcg) accel=(-accel tcg) ;;
kvm) accel=(-accel kvm) ;;
*)
	# KVM needs the CPU's virtualization extensions: a VM (this project's machines)
	# may have a /dev/kvm without them, where a KVM guest hangs before its first line.
	accel=(-accel tcg)
	if [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qw 'vmx\|svm' /proc/cpuinfo; then
		accel=(-accel kvm -accel tcg)
	fi
	;;
esac
timeout_s=${CGROUP2_GUEST_TIMEOUT:-900}
log "booting $kernel ($kver), ${kargs[*]:-no extra kernel arguments}"
start=$(date +%s.%N)
set +e
timeout --foreground -k 10 "$timeout_s" "$qemu" "${accel[@]}" -m 2048 -smp 2 \
	-nographic -no-reboot -nodefaults -serial stdio -display none \
	-kernel "$kernel" -initrd "$work/initrd.gz" \
	-append "console=ttyS0 panic=-1 ${CGROUP2_GUEST_QUIET-quiet loglevel=3} ${kargs[*]}" \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
	</dev/null 2>"$work/qemu.err" | tee "$work/console"
qrc=${PIPESTATUS[0]}
set -e
end=$(date +%s.%N)
if grep -q 'falling back\|failed to initialize kvm\|Could not access KVM' "$work/qemu.err"; then
	used=tcg
elif [ "${accel[1]}" = kvm ]; then
	used=kvm
else
	used=tcg
fi
sed 's/^/cgroup2-guest: qemu: /' "$work/qemu.err" >&2
rc=$(sed -n 's/^RKUBELET-GUEST-EXIT=\([0-9]*\).*/\1/p' "$work/console" | tail -n 1)
log "$(printf 'kernel %s, %s, boot and run %.1f s, qemu status %s, guest status %s' \
	"$kver" "$used" "$(awk "BEGIN { print $end - $start }")" "$qrc" "${rc:-none}")"
[ -n "$rc" ] || { log "the guest never reported its command's status (timeout ${timeout_s}s?)"; exit 1; }
exit "$rc"
