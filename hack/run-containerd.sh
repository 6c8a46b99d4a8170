#!/bin/sh
# hack/run-containerd.sh RUN_DIR: a containerd of `make run-containerd`'s own, with the
# CRI plugin on (Debian's containerd has it built in), the offline images of `make
# images` in it, and a CNI bridge for its pods; prints its socket. Idempotent: a
# containerd already answering there is kept (with its pods), the images imported again
# only when missing. Like the tests' harness (crates/cri/tests/common), it never uses
# Docker's own containerd, whose config turns CRI off.
#
# Stop it (and its pods) by hand: kill "$(cat RUN_DIR/containerd/pid)", then
# `ip link del rkctr0`.
set -eu
run=${1:?usage: hack/run-containerd.sh RUN_DIR}
dir=$run/containerd
# A Unix socket path has at most 108 bytes: the socket is under /run, not the checkout.
sock=/run/rkubelet-containerd/containerd.sock
for need in containerd:containerd ctr:containerd; do
	command -v "${need%%:*}" >/dev/null ||
		{ echo "hack/run-containerd.sh: ${need%%:*} is needed (apt-get install ${need#*:})" >&2; exit 1; }
done
[ -x /usr/lib/cni/bridge ] ||
	{ echo "hack/run-containerd.sh: the CNI plugins are needed (apt-get install containernetworking-plugins)" >&2; exit 1; }
mkdir -p "$dir/cni" /run/rkubelet-containerd
cat >"$dir/cni/10-rkctr.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "rkctr", "plugins": [
  {"type": "bridge", "bridge": "rkctr0", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "dataDir": "$dir/ipam",
            "ranges": [[{"subnet": "10.244.77.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}},
  {"type": "loopback"}
]}
CNI
cat >"$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "/run/rkubelet-containerd/state"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
[plugins."io.containerd.grpc.v1.cri"]
  # The pause image of \`make images\` (registry.k8s.io's may be out of reach).
  sandbox_image = "docker.io/rkubelet/pause:3.10"
  # Some VMs refuse a negative oom_score_adj; runc fails without this there.
  restrict_oom_score_adj = true
  # The streaming server rkubelet proxies exec, attach and port-forward to: plain HTTP
  # on loopback (rkubelet does not dial TLS streaming), a free port.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_tls_streaming = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni"
TOML
if ! ctr -a "$sock" version >/dev/null 2>&1; then
	setsid containerd --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 </dev/null &
	echo $! >"$dir/pid"
	i=0
	until ctr -a "$sock" version >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt 100 ] || { echo "hack/run-containerd.sh: containerd did not start; see $dir/containerd.log" >&2; exit 1; }
		sleep 0.1
	done
fi
for image in rkubelet/pause:3.10 rkubelet/busybox:1.35; do
	ctr -a "$sock" -n k8s.io images ls -q | grep -qx "docker.io/$image" ||
		docker save "$image" | ctr -a "$sock" -n k8s.io images import - >/dev/null
done
echo "unix://$sock"
