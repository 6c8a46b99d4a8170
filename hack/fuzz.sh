#!/bin/sh
# `make fuzz`: runs every fuzz target of fuzz/ for a bounded time with libFuzzer's
# memory bounds, then prints one table row per target. Needs the nightly toolchain and
# cargo-fuzz (installed here when missing). Environment:
#   FUZZ_TIME    seconds per target (default 30: 21 targets, about 12 minutes on 2
#                cores with the fuzz build up to date; at 45 they took 16.7 minutes.
#                A cold build of the instrumented crate comes on top)
#   FUZZ_TARGETS the targets to run (default: all)
#   FUZZ_MERGE=1 merge what the run found into fuzz/corpus/<target>/ (minimized:
#                only inputs that add coverage), to commit
# New inputs land in fuzz/corpus-new/<target>/ (not committed); crashes in
# fuzz/artifacts/<target>/. Exits non-zero when any target crashed. No sanitizer
# (`-s none`): the parsers are safe Rust, so ASan would only halve the exec rate;
# panics, timeouts, RSS and allocation bounds are what libFuzzer catches here.
set -u
cd "$(dirname "$0")/../fuzz"

FUZZ_TIME=${FUZZ_TIME:-30}
ALL="manifest kubelet_config flags kubeconfig docker etcd_watch etcd_stream api_watch http_head http_readonly http_kubelet upgrade quantity duration reference spdy websocket grpc grpc_frames kmsg procfs"
FUZZ_TARGETS=${FUZZ_TARGETS:-$ALL}
# Every target: no process over 512 MB resident (libFuzzer's own bound; the kubelet
# runs in ~13 MB).
RSS_MB=512

# No single allocation over this many MB. Inputs are at most 4 KiB (libFuzzer's
# default -max_len), so these are bounds of "swelling", not of real input sizes:
# - text parsers (flags, quantity, duration, reference, head, kmsg, procfs, gRPC's
#   HPACK, whose table is capped at 4 KiB): 16 MB, they allocate about their input;
# - serde documents (manifests, config, kubeconfig, watch lines, Docker answers),
#   SPDY (zlib with its 1 MiB header-block cap) and WebSocket (its read buffer,
#   messages capped by the server's bound): 64 MB, typed objects with their
#   defaults are a few times their text, the inflater's state a few hundred KB;
# - the ports end to end (http_readonly, http_kubelet, upgrade: JSON answers, a
#   session's 1 MiB buffers) and the etcd source's sequences: 64 MB too;
# - the gRPC probe's frame loop (grpc_frames): 16 MB, a frame is at most 1 MiB.
malloc_mb() {
    case "$1" in
        flags|quantity|duration|reference|http_head|kmsg|procfs|grpc|grpc_frames) echo 16 ;;
        *) echo 64 ;;
    esac
}

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "make fuzz needs the nightly toolchain: rustup toolchain install nightly" >&2
    exit 2
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz || exit 2

cargo +nightly fuzz build -O -s none || exit 2

rows=""
failed=0
for t in $FUZZ_TARGETS; do
    mkdir -p "corpus-new/$t" "corpus/$t" "artifacts/$t"
    before=$(ls "artifacts/$t" | wc -l)
    log="target/fuzz-$t.log"
    mkdir -p target
    echo "fuzzing $t for ${FUZZ_TIME}s (malloc limit $(malloc_mb "$t") MB)" >&2
    cargo +nightly fuzz run -O -s none "$t" "corpus-new/$t" "corpus/$t" -- \
        -max_total_time="$FUZZ_TIME" -rss_limit_mb="$RSS_MB" \
        -malloc_limit_mb="$(malloc_mb "$t")" -timeout=10 \
        -print_final_stats=1 >"$log" 2>&1
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)
    # libFuzzer's last status line (`#N DONE cov: C ft: F …`): edges covered.
    cov=$(sed -n 's/^#[0-9]*[^c]*cov: \([0-9]*\).*/\1/p' "$log" | tail -1)
    after=$(ls "artifacts/$t" | wc -l)
    crashes=$((after - before))
    [ "$crashes" -gt 0 ] && failed=1
    if [ "${FUZZ_MERGE:-0}" = 1 ] && [ "$crashes" -eq 0 ]; then
        cargo +nightly fuzz run -O -s none "$t" "corpus/$t" "corpus-new/$t" -- -merge=1 \
            -rss_limit_mb="$RSS_MB" -malloc_limit_mb="$(malloc_mb "$t")" >>"$log" 2>&1
    fi
    corpus=$(cat "corpus/$t"/* "corpus-new/$t"/* 2>/dev/null | wc -c)
    files=$(ls "corpus/$t" "corpus-new/$t" | grep -vc ':$\|^$')
    rows="$rows$(printf '%-15s %12s %9s %7s %6s %14s %8s' "$t" "${runs:-?}" "${eps:-?}" "${rss:-?}" "${cov:-?}" "$files/${corpus}B" "$crashes")
"
done
printf '%-15s %12s %9s %7s %6s %14s %8s\n' TARGET RUNS EXECS/S RSS_MB COV CORPUS CRASHES
printf '%s' "$rows"
[ "$failed" = 0 ] || echo "crash inputs are in fuzz/artifacts/<target>/; logs in fuzz/target/fuzz-<target>.log" >&2
exit "$failed"
