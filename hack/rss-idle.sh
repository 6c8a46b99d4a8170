#!/usr/bin/env bash
# The memory of one rkubelet binary with idle pods (one unless PODS says), after 60 s
# idle, every port on:
#   [PODS=110] [SETTLE=300] [RUNNER=qemu-aarch64] hack/rss-idle.sh BINARY [SECONDS]
# (SETTLE: seconds to wait once every pod runs before the window opens, so the window
# is a steady one after the start's burst, not the burst's tail; default 0.)
# (RUNNER: a cross-built binary under qemu-user against this machine's Docker; the
# figures are then qemu's, a smoke figure and not a board's.)
# Its own root dir, node name, ports and --cgroup-root=/rkubelet-boards; each pod is a
# busybox sleeping (rkubelet/busybox:1.35, rkubelet/pause:3.10: `make images`). Its
# containers and cgroups are removed afterwards. Prints VmHWM, VmRSS (RssAnon, RssFile)
# and PSS, the
# kB of each mapping of the binary that the idle window touched (its working set), then the
# resident kB by kind of mapping (the binary's text, its data, heap, thread stacks,
# other anonymous mappings, libc) from /proc/PID/smaps, the thread count, and the CPU
# over the idle window by thread.
set -euo pipefail
bin=${1:?usage: $0 BINARY [SECONDS]}
idle=${2:-60}
pods=${PODS:-1}
. "$(dirname "$0")/lib/idle-node.sh"
# shellcheck disable=SC2086 # RUNNER may be a command with its arguments
idle_node_start "$pods" ${RUNNER:-} "$bin"
sleep "${SETTLE:-0}"
# CPU ticks per thread (utime + stime), before and after the idle window.
ticks() { for t in /proc/"$pid"/task/*; do echo "$(cat "$t/comm") $(cut -d' ' -f14,15 "$t/stat" 2>/dev/null)"; done 2>/dev/null; }
ticks >"$work/ticks0"
t0=$(date +%s.%N)
# Clear the referenced bits, so smaps' Referenced says which pages the idle window
# itself touched (the working set), apart from what start-up left resident.
echo 1 >"/proc/$pid/clear_refs"
sleep "$idle"
ticks >"$work/ticks1"
t1=$(date +%s.%N)
# What the node pays: RssAnon (the kubelet's own memory, nothing the page cache
# shares) and PSS (its share of every resident page); VmHWM, the peak since start.
grep -E "VmHWM|VmRSS|RssAnon|RssFile" "/proc/$pid/status" | tr -s "\t\n " " "
grep -E "^Pss:" "/proc/$pid/smaps_rollup" | tr -s "\t\n " " "; echo
awk -v exe="$(readlink -f "$bin")" '$6 == exe { m = $2 } /^Referenced:/ && m != "" {
	printf "  binary %s: %s kB referenced in the idle window\n", m, $2; m = "" }' "/proc/$pid/smaps"
# Idle CPU over the window, in % of one core, and the threads that spent it (a thread
# that came and went within the window is missed; one that went is not subtracted).
python3 - "$work/ticks0" "$work/ticks1" "$t0" "$t1" <<'PY'
import os, sys
hz = os.sysconf("SC_CLK_TCK")
def read(f):
    by = {}
    for line in open(f):
        name, u, s = line.rsplit(None, 2)
        by[name] = by.get(name, 0) + int(u) + int(s)
    return by
a, b = read(sys.argv[1]), read(sys.argv[2])
secs = float(sys.argv[4]) - float(sys.argv[3])
d = {n: b[n] - a.get(n, 0) for n in b}
total = sum(max(v, 0) for v in d.values())
print(f"CPU {total / hz / secs * 100:.3f} % of a core over {secs:.0f} s;",
      ", ".join(f"{n} {v * 1000 // hz} ms" for n, v in sorted(d.items(), key=lambda kv: -kv[1]) if v > 0))
PY
# Resident kB by kind: the binary's mappings split into text (r-x) and the rest;
# [heap]; the anonymous mappings holding a thread's stack pointer; other anonymous
# mappings (glibc arenas, big allocations, guard pages); libc and the loader.
python3 - "$pid" "$(readlink -f "$bin")" <<'PY'
import os, sys
pid, exe = sys.argv[1], sys.argv[2]
sps = {}
for t in os.listdir(f"/proc/{pid}/task"):
    f = open(f"/proc/{pid}/task/{t}/syscall").read().split()
    if len(f) >= 2 and f[-2].startswith("0x"):
        sps[int(f[-2], 16)] = open(f"/proc/{pid}/task/{t}/comm").read().strip()
kinds, cur, stacks = {}, None, []
for line in open(f"/proc/{pid}/smaps"):
    head = line.split()
    if "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
        a, b = (int(x, 16) for x in head[0].split("-"))
        name = head[5] if len(head) > 5 else ""
        if name == exe:
            cur = "binary text" if "x" in head[1] else "binary data"
        elif name == "[heap]":
            cur = "heap"
        elif name == "":
            owner = [n for sp, n in sps.items() if a <= sp < b]
            cur = "thread stacks" if owner else "other anonymous"
            stacks.append([owner[0] if owner else None, 0])
        elif "libc" in name or "ld-" in name or "musl" in name:
            cur = "libc"
        else:
            cur = name
    elif head[0] == "Rss:" and cur is not None:
        kinds[cur] = kinds.get(cur, 0) + int(head[1])
        if cur == "thread stacks":
            stacks[-1][1] = int(head[1])
for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]):
    print(f"  {k:16} {v:6} kB")
print(f"  threads {len(os.listdir(f'/proc/{pid}/task'))}; largest stacks:",
      ", ".join(f"{n} {k}" for n, k in sorted((s for s in stacks if s[0]), key=lambda s: -s[1])[:8]))
PY
