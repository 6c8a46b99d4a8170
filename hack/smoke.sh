#!/usr/bin/env bash
# Smoke test of one rkubelet binary, native or cross-built (run under qemu-user):
#   hack/smoke.sh BINARY [RUNNER...]     e.g. hack/smoke.sh target/aarch64-unknown-linux-musl/release/rkubelet qemu-aarch64
# Checks: `--version` exits 0 and names rkubelet; a bad flag exits 2; started against
# a Docker socket that does not exist, /healthz answers 500 naming the `runtime`
# check; SIGTERM stops it with exit 0. Prints the binary's size and the time of
# `--version` (under qemu that is qemu's time, not a board's).
# SMOKE_MEMORY_CGROUP=missing (the cgroup v2 guest booted with cgroup_disable=memory,
# `make test-cgroup2`) also checks the start-up's one line about the missing memory
# cgroup controller, naming the fix, and its warning on /healthz?verbose.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 BINARY [RUNNER...]" >&2; exit 64; }
bin=$1
shift
runner=("$@")
[ -x "$bin" ] || { echo "smoke: $bin is not an executable file" >&2; exit 1; }

fail() { echo "smoke: FAIL: $*" >&2; exit 1; }
say() { echo "smoke: $*"; }

work=$(mktemp -d /tmp/rkubelet-smoke.XXXXXX)
pid=
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

size=$(stat -c %s "$bin")
say "binary $bin: $size bytes ($(awk -v s="$size" 'BEGIN { printf "%.2f", s / 1048576 }') MiB)"

# --version: exit 0, one line naming rkubelet.
t0=$(date +%s%N)
out=$("${runner[@]}" "$bin" --version) || fail "--version exited $?"
t1=$(date +%s%N)
case "$out" in *rkubelet*) ;; *) fail "--version printed '$out'" ;; esac
say "--version: '$out' in $(((t1 - t0) / 1000000)) ms"

# A bad flag: exit 2, nothing started.
set +e
"${runner[@]}" "$bin" --no-such-flag >"$work/badflag.out" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] || fail "a bad flag exited $rc, not 2: $(cat "$work/badflag.out")"
say "bad flag: exit 2 ($(head -n1 "$work/badflag.out"))"

# Start against a missing Docker socket, every port but healthz off.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${runner[@]}" "$bin" \
	--container-runtime-endpoint "unix://$work/no-docker.sock" \
	--root-dir "$work/root" --cert-dir "$work/pki" \
	--hostname-override "smoke-$$" \
	--healthz-port "$port" --read-only-port 0 --port 0 \
	>"$work/kubelet.log" 2>&1 &
pid=$!

# /healthz: 500, and the body names the failing runtime check. Generous deadline:
# qemu runs the start-up many times slower than a board.
body=
code=
for _ in $(seq 1 600); do
	kill -0 "$pid" 2>/dev/null || fail "rkubelet exited at start: $(tail -n5 "$work/kubelet.log")"
	code=$(curl -s -o "$work/healthz" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/healthz" || true)
	if [ "$code" = 500 ]; then
		body=$(cat "$work/healthz")
		break
	fi
	sleep 0.1
done
[ "$code" = 500 ] || fail "/healthz never answered 500 (last: '$code'); log: $(tail -n5 "$work/kubelet.log")"
grep -q '^\[-\]runtime failed: ' "$work/healthz" || fail "/healthz body does not name the runtime check: $body"
say "healthz: 500, $(grep '^\[-\]runtime failed: ' "$work/healthz")"

memcg=${SMOKE_MEMORY_CGROUP:-}
case "$memcg" in
'') ;;
missing)
	curl -s -o "$work/verbose" --max-time 5 "http://127.0.0.1:$port/healthz?verbose" || true
	grep -q '^warning: memory-cgroup: the kernel has no memory cgroup controller' "$work/verbose" \
		|| fail "/healthz?verbose has no memory-cgroup warning: $(cat "$work/verbose")"
	say "healthz?verbose: $(grep '^warning: memory-cgroup: ' "$work/verbose" | cut -c1-100)…"
	;;
*) fail "SMOKE_MEMORY_CGROUP=$memcg: expected missing" ;;
esac

# SIGTERM: a clean stop, exit 0.
kill -TERM "$pid"
set +e
for _ in $(seq 1 600); do
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
wait "$pid"
rc=$?
set -e
pid=
[ "$rc" = 0 ] || fail "SIGTERM: exit $rc, not 0; log: $(tail -n5 "$work/kubelet.log")"
say "SIGTERM: exit 0"

# The log is whole once the process has exited (it flushes on the way out).
if [ "$memcg" = missing ]; then
	lines=$(grep -c 'no memory cgroup controller' "$work/kubelet.log" || true)
	[ "$lines" = 1 ] || fail "$lines start-up lines about the memory cgroup controller, not 1"
	line=$(grep 'no memory cgroup controller' "$work/kubelet.log")
	case "$line" in *"cgroup_memory=1 cgroup_enable=memory"*) ;; *) fail "the line names no fix: $line" ;; esac
	say "start-up: $line"
fi
say "PASS $bin"
