# Sourced by hack/rss-idle.sh: one rkubelet with idle pods.
#   idle_node_start PODS COMMAND...   starts COMMAND (rkubelet, or a runner and
#                                     rkubelet) with its own root dir, node name, ports
#                                     and --cgroup-root=/rkubelet-boards (every port
#                                     on, :10250 with a self-signed certificate, as
#                                     the flags' defaults), and PODS pods
#                                     (a busybox sleeping each; `make images`), and
#                                     waits until every pod runs (saying how long
#                                     it took). Sets pid, work, ro.
# An EXIT trap stops it and removes its containers, cgroups and files.
node="rss-boards-$$"
work=$(mktemp -d /tmp/rkubelet-idle.XXXXXX)
pid=
ro=
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
docker_api() { curl -fsS --unix-socket /var/run/docker.sock "http://docker$1"; }
idle_node_cleanup() {
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
trap idle_node_cleanup EXIT

idle_node_start() {
	local pods=$1
	shift
	mkdir -p "$work/manifests"
	for i in $(seq 1 "$pods"); do
		cat >"$work/manifests/idle$i.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: idle$i
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: idle
      image: rkubelet/busybox:1.35
      command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 3600 & wait \$!; done"]
YAML
	done
	local hz
	hz=$(free_port)
	ro=$(free_port)
	local port
	port=$(free_port)
	local t0
	t0=$(date +%s%N)
	"$@" --pod-manifest-path="$work/manifests" --root-dir="$work/root" \
		--hostname-override="$node" --pod-infra-container-image=rkubelet/pause:3.10 \
		--cgroup-root=/rkubelet-boards --healthz-port="$hz" --read-only-port="$ro" --port="$port" \
		--cert-dir="$work/pki" >"$work/log" 2>&1 &
	pid=$!
	for _ in $(seq 1 3000); do
		if [ "$(idle_node_running)" -ge "$pods" ]; then
			echo "idle node: $pods pod(s) running $((($(date +%s%N) - t0) / 1000000)) ms after the start" >&2
			return 0
		fi
		kill -0 "$pid" || { tail -n5 "$work/log" >&2; exit 1; }
		sleep 0.2
	done
	echo "idle node: not every pod ran" >&2
	tail -n5 "$work/log" >&2
	exit 1
}

idle_node_running() { curl -fsS "http://127.0.0.1:$ro/pods" 2>/dev/null | grep -o '"phase":"Running"' | wc -l; }
