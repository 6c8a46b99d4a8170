#!/usr/bin/env python3
"""Seeds fuzz/corpus/<target>/ from the repo's real examples and test inputs.

Idempotent: each seed is a file named by its content's SHA-1, as libFuzzer names
its own. `make fuzz` adds what the fuzzers find (merged, minimized) beside these.
"""
import base64, hashlib, json, os, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")

def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)

def read(p):
    with open(os.path.join(ROOT, p), "rb") as f:
        return f.read()

# Manifests: the bundled examples as YAML (0), as JSON (1), as a URL body (2).
for name in sorted(os.listdir(os.path.join(ROOT, "examples", "manifests"))):
    body = read(os.path.join("examples", "manifests", name))
    put("manifest", b"\x00" + body)
    put("manifest", b"\x02" + body)
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "rkubelet/busybox:1.35",
                "command": ["sh", "-c", "sleep 1"],
                "resources": {"limits": {"memory": "64Mi", "cpu": "250m"}},
                "livenessProbe": {"grpc": {"port": 9000}, "periodSeconds": 1},
                "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
                "volumes": [{"name": "v", "hostPath": {"path": "/tmp", "type": "Directory"}},
                            {"name": "c", "configMap": {"name": "cm", "defaultMode": 420}}]}}
put("manifest", b"\x01" + json.dumps(pod).encode())
put("manifest", b"\x01" + json.dumps({"apiVersion": "v1", "kind": "PodList", "items": [pod, pod]}).encode())
put("manifest", b"\x00---\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: x}]}\n---\n# empty\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec:\n  containers: [{name: c, image: x}]\n  securityContext: {sysctls: [{name: net.core.somaxconn, value: '1024'}]}\n")

# KubeletConfiguration.
put("kubelet_config", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    "staticPodPath: /etc/kubernetes/manifests\nsyncFrequency: 1m0s\nevictionHard:\n  memory.available: 100Mi\n"
    "  nodefs.available: 10%\nreadOnlyPort: 10255\nauthentication:\n  anonymous: {enabled: false}\n"
    "  webhook: {enabled: true, cacheTTL: 2m}\n  x509: {clientCAFile: /etc/ca.crt}\nauthorization: {mode: Webhook}\n"
    "systemReserved: {cpu: 100m, memory: 100Mi}\nmaxPods: 110\nimageGCHighThresholdPercent: 85\n"
    "serializeImagePulls: false\nmaxParallelImagePulls: 3\nstaticPodURLHeader: {X-A: [b]}\n")
put("kubelet_config", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfoo: 1\n")

# Flags, NUL-separated.
for line in [
    ["--pod-manifest-path=/etc/kubernetes/manifests", "--hostname-override=n1", "--v=2",
     "--eviction-hard=memory.available<100Mi", "--sync-frequency=1m", "--max-pods=110"],
    ["--config", "/var/lib/kubelet/config.yaml", "--kubeconfig=/etc/k.conf", "--node-labels=a=b,c=d",
     "--register-with-taints=k=v:NoSchedule", "--system-reserved=cpu=100m,memory=1Gi"],
    ["-v", "4", "--manifest-url-header=A:b,C:d", "--address=0.0.0.0", "--port=10250", "--help"],
]:
    put("flags", "\0".join(line))

# Kubeconfig.
put("kubeconfig", "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n"
    "clusters:\n- name: c\n  cluster:\n    server: https://10.0.0.1:6443/\n    insecure-skip-tls-verify: true\n"
    "contexts:\n- name: ctx\n  context: {cluster: c, user: u}\n"
    "users:\n- name: u\n  user:\n    token: abc\n")
put("kubeconfig", "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
    "clusters:\n- name: c\n  cluster:\n    server: https://a\n    certificate-authority-data: " + base64.b64encode(b"not a pem").decode() + "\n"
    "contexts:\n- name: x\n  context: {cluster: c, user: u}\n"
    "users:\n- name: u\n  user:\n    exec: {command: /bin/true, apiVersion: client.authentication.k8s.io/v1}\n")

# Docker answers (selector byte first).
summary = [{"Id": "a" * 64, "Names": ["/k8s_c_p_ns_uid_0"], "Image": "busybox", "ImageID": "sha256:" + "b" * 64,
            "Created": 1700000000, "State": "running", "Status": "Up 1 second",
            "Labels": {"io.kubernetes.pod.name": "p"}}]
put("docker", b"\x00" + json.dumps(summary).encode())
inspect = {"Id": "a" * 64, "Created": "2026-11-30T06:27:48.123456789Z", "Name": "/c",
           "State": {"Status": "exited", "Running": False, "ExitCode": 137, "OOMKilled": True, "Pid": 0,
                     "StartedAt": "2026-11-30T06:27:48.2Z", "FinishedAt": "0001-01-01T00:00:00Z"},
           "Config": {"Labels": {"a": "b"}, "Image": "busybox", "Tty": False},
           "NetworkSettings": {"IPAddress": "172.17.0.2", "Networks": {"bridge": {"IPAddress": "172.17.0.2"}}},
           "Image": "sha256:" + "b" * 64, "RestartCount": 0}
put("docker", b"\x01" + json.dumps(inspect).encode())
put("docker", b"\x02" + json.dumps({"Type": "container", "Action": "die", "Actor": {"ID": "a" * 64,
    "Attributes": {"exitCode": "1", "io.kubernetes.pod.uid": "u"}}, "time": 1700000000, "timeNano": 1700000000000000000}).encode())
put("docker", b"\x03" + json.dumps([{"Id": "sha256:" + "b" * 64, "RepoTags": ["busybox:1.35"], "RepoDigests": [],
    "Created": 1, "Size": 100, "SharedSize": -1, "Containers": -1, "ParentId": "", "Labels": {}}]).encode())
put("docker", b"\x04" + json.dumps({"Id": "sha256:" + "b" * 64, "RepoTags": ["busybox:1.35"], "Size": 1000}).encode())
put("docker", b"\x05" + b"\x01\x00\x00\x00\x00\x00\x00\x05hello" + b"\x02\x00\x00\x00\x00\x00\x00\x03err")
put("docker", b"\x06" + b'{"message":"No such container: x"}')
put("docker", b"\x07" + b"2026-11-30T06:27:48.123456789Z")

# etcd watch lines.
v = base64.b64encode(read("examples/manifests/hello.yaml")).decode()
k = base64.b64encode(b"/registry/pods/n1/hello").decode()
put("etcd_watch", '{"result":{"header":{"revision":"2"},"created":true}}')
put("etcd_watch", '{"result":{"header":{"revision":"3"},"events":[{"kv":{"key":"%s","value":"%s","mod_revision":"3"}},{"type":"DELETE","kv":{"key":"%s","mod_revision":"4"}}]}}' % (k, v, k))
put("etcd_watch", '{"result":{"header":{"revision":"9"},"canceled":true,"compact_revision":"5"}}')
put("etcd_watch", '{"error":{"grpc_code":1,"http_code":408,"message":"context canceled","http_status":"Request Timeout"}}')

# API server watch lines.
put("api_watch", json.dumps({"type": "ADDED", "object": pod}))
put("api_watch", '{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12345"}}}')
put("api_watch", '{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}')

# Request heads.
put("http_head", "GET /pods HTTP/1.1\r\nHost: 127.0.0.1:10255\r\nUser-Agent: curl/7.88\r\nAccept: */*\r\n\r\n")
put("http_head", "POST /exec/default/p/c?command=sh&input=1&output=1&tty=1 HTTP/1.1\r\nHost: x\r\n"
    "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
    "Authorization: Bearer abc\r\nContent-Length: 0\r\n\r\n")
put("http_head", "GET /containerLogs/ns/p/c?follow=true&tailLines=10 HTTP/1.1\r\nHost: x\r\n"
    "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    "Sec-WebSocket-Protocol: v5.channel.k8s.io\r\nSec-WebSocket-Version: 13\r\n\r\n")

for q in ["100m", "1Gi", "1e3", "0.5", "128974848", "129e6", "123Mi", "12E", "-1", ".5Ki", "1.5n"]:
    put("quantity", q)
for d in ["1h2m3.5s", "300ms", "-1.5h", "0", "2562047h47m16.854775807s", "1µs",
          "2026-12-01T03:00:00.123456789Z", "2026-12-01T03:00:00+01:00"]:
    put("duration", d)
for r in ["busybox", "rkubelet/busybox:1.35", "docker.io/library/busybox:latest",
          "127.0.0.1:5000/a/b@sha256:" + "c" * 64, "localhost/x:y@sha256:" + "d" * 64, "UPPER/bad"]:
    put("reference", r)

# SPDY: what kubectl v1.32 sent (captured), whole (0) and cut (1).
for name in ["exec_stdin.bin", "exec_tty.bin", "portforward.bin"]:
    data = read(os.path.join("src", "server", "spdy", "fixtures", name))
    put("spdy", b"\x00" + data)
    put("spdy", b"\x01" + data)

# WebSocket: a client's masked frames (binary on channel 0, a text base64 one, a
# ping, a fragmented message, a close).
def ws(opcode, payload, fin=True, mask=b"\x01\x02\x03\x04"):
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    else:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
put("websocket", ws(2, b"\x00echo hi\n") + ws(9, b"p") + ws(1, b"0aGVsbG8=") + ws(2, b"\xff\x00"))
put("websocket", ws(2, b"\x04{\"Width\":80,\"Height\":24}", fin=False) + ws(0, b"more") + ws(8, b"\x03\xe8bye"))

# gRPC: headers (:status 200 indexed; grpc-status literal) 0xff trailers 0xff DATA.
hdr = b"\x00\x88"
trl = b"\x00\x40\x0bgrpc-status\x010\x40\x0cgrpc-message\x02ok"
msg = b"\x00\x00\x00\x00\x02\x08\x01"
put("grpc", hdr + b"\xff" + trl + b"\xff" + msg)
put("grpc", hdr + b"\xff" + b"\x00\x40\x0bgrpc-status\x0214" + b"\xff")

# /dev/kmsg records (from the OOM watcher's tests).
put("kmsg", "\n".join([
    "4,1017,5470419921,-;stress invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0",
    "6,1040,5470420412,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=stress,pid=23544,uid=0",
    "3,1041,5470420440,-;Out of memory: Killed process 23544 (stress) total-vm:2105480kB, anon-rss:1964516kB, file-rss:4kB, shmem-rss:0kB, UID:0 pgtables:3896kB oom_score_adj:0"]))
put("kmsg", "\n".join([
    "4,10,100,-;java invoked oom-killer: gfp_mask=0x24000c0, order=0, oom_score_adj=0",
    "6,11,101,-;Task in /kubepods/pod1/abc killed as a result of limit of /kubepods/pod1",
    "3,12,102,-;Memory cgroup out of memory: Kill process 4242 (java) score 1000 or sacrifice child"]))

# /proc and cgroupfs files, from this machine; eviction thresholds.
for sel, path in [(0, "/proc/meminfo"), (1, "/proc/stat"), (2, "/proc/loadavg"), (3, "/proc/self/cgroup"),
                  (4, "/proc/self/cgroup"), (5, "/proc/net/dev")]:
    try:
        with open(path, "rb") as f:
            put("procfs", bytes([sel]) + f.read()[:4096])
    except OSError:
        pass
put("procfs", b"\x044:0::/system.slice/docker-abc.scope\n")
put("procfs", b"\x06memory.available<100Mi,nodefs.available<10%,imagefs.inodesFree<5%")
