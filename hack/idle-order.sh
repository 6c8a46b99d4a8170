#!/usr/bin/env bash
# Writes hack/idle-order.txt, the link order build.rs gives LLD: the functions of
# rkubelet that an idle node runs, most run first (`make idle-order`).
#   hack/idle-order.sh [SECONDS]
# Runs target/release/rkubelet under valgrind's callgrind with one idle pod (as
# hack/rss-idle.sh does); the instructions are counted only over the idle window after
# the pod runs, SECONDS (default 360: past the 5-minute relist and image GC). Every
# function of the binary that ran in the window is listed by its symbol name. Run it
# again after big changes: a name the binary no longer has is skipped at link time,
# so a stale list costs only the grouping of the new code.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-360}
bin=target/release/rkubelet
out=hack/idle-order.txt
command -v valgrind >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
[ -x "$bin" ] || { echo "idle-order: $bin missing: make build" >&2; exit 1; }
. hack/lib/idle-node.sh
# The glibc tunables rkubelet would re-exec itself with (src/malloc.rs), set already so
# it runs as one image under valgrind.
GLIBC_TUNABLES=glibc.malloc.tcache_count=0 idle_node_start 1 \
	valgrind --tool=callgrind --instr-atstart=no --demangle=no --compress-strings=no \
	--compress-pos=no --callgrind-out-file="$work/callgrind.out" "$bin"
sleep 5
callgrind_control --instr=on "$pid" >/dev/null
echo "idle-order: counting for $secs s" >&2
sleep "$secs"
callgrind_control --dump "$pid" >/dev/null
# Each "fn=" of the binary's object ("ob=") with its own instruction count, summed.
python3 - "$work" "$(readlink -f "$bin")" "$out" <<'PY'
import glob, sys
work, exe, out = sys.argv[1:]
# Self cost by function: a cost line after "calls=" is the call's inclusive cost.
cost, ob, fn, after_call = {}, None, None, False
for path in glob.glob(f"{work}/callgrind.out*"):
    for line in open(path, errors="replace"):
        if line.startswith("ob="):
            ob = line[3:].strip()
        elif line.startswith("fn="):
            fn = line[3:].strip()
        elif line.startswith("calls="):
            after_call = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            # "name'2": callgrind's mark of a recursion level, not the symbol's.
            fn = fn.split("'")[0] if fn else fn
            if not after_call and ob == exe and fn and not fn.startswith("0x"):
                parts = line.split()
                if len(parts) >= 2:
                    cost[fn] = cost.get(fn, 0) + int(parts[1])
            after_call = False
names = [f for f, c in sorted(cost.items(), key=lambda kv: (-kv[1], kv[0])) if c > 0]
with open(out, "w") as f:
    f.writelines(n + "\n" for n in names)
print(f"idle-order: {len(names)} functions to {out}", file=sys.stderr)
PY
