#!/usr/bin/env bash
# VmRSS of one rkubelet binary with one idle pod, after 60 s idle:
#   hack/rss-idle.sh BINARY [SECONDS]
# Its own root dir, node name, ports and --cgroup-root=/rkubelet-boards; the pod is a
# busybox sleeping (rkubelet/busybox:1.35, rkubelet/pause:3.10: `make images`). Its
# containers and cgroups are removed afterwards. Prints "VmRSS <kB> kB".
set -euo pipefail
bin=${1:?usage: $0 BINARY [SECONDS]}
idle=${2:-60}
node="rss-boards-$$"
work=$(mktemp -d /tmp/rkubelet-rss.XXXXXX)
pid=
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
docker_api() { curl -fsS --unix-socket /var/run/docker.sock "http://docker$1"; }
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
	for id in $(docker_api "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22io.rkubelet.node%3D$node%22%5D%7D" \
		| python3 -c 'import json, sys; print(" ".join(c["Id"] for c in json.load(sys.stdin)))'); do
		curl -fsS -X DELETE --unix-socket /var/run/docker.sock "http://docker/containers/$id?force=1&v=1" >/dev/null || true
	done
	for base in /sys/fs/cgroup /sys/fs/cgroup/*; do
		[ -d "$base/rkubelet-boards" ] && find "$base/rkubelet-boards" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/manifests"
cat >"$work/manifests/idle.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: idle
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: idle
      image: rkubelet/busybox:1.35
      command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 3600 & wait $!; done"]
YAML
hz=$(free_port)
ro=$(free_port)
"$bin" --pod-manifest-path="$work/manifests" --root-dir="$work/root" \
	--hostname-override="$node" --pod-infra-container-image=rkubelet/pause:3.10 \
	--cgroup-root=/rkubelet-boards --healthz-port="$hz" --read-only-port="$ro" --port=0 \
	--cert-dir="$work/pki" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
	curl -fsS "http://127.0.0.1:$ro/pods" 2>/dev/null | grep -q '"phase":"Running"' && break
	kill -0 "$pid" || { tail -n5 "$work/log" >&2; exit 1; }
	sleep 0.2
done
curl -fsS "http://127.0.0.1:$ro/pods" | grep -q '"phase":"Running"' || { echo "rss: the pod never ran" >&2; tail -n5 "$work/log" >&2; exit 1; }
sleep "$idle"
grep VmRSS "/proc/$pid/status"
