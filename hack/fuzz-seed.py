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

# The ports end to end (http_readonly, http_kubelet, upgrade): what curl and kubectl
# send, then hand-written bad ones. The pod is the fuzz fixture's static pod
# default/web-fuzz-node (containers app and side).
POD = "default/web-fuzz-node"
def req(method, target, headers=(), body=b"", version="1.1"):
    h = "%s %s HTTP/%s\r\n" % (method, target, version)
    for k, v in headers:
        h += "%s: %s\r\n" % (k, v)
    return h.encode() + b"\r\n" + body
CURL = [("Host", "10.0.0.5:10255"), ("User-Agent", "curl/7.88.1"), ("Accept", "*/*")]
KUBECTL = [("Host", "10.0.0.5:10250"), ("User-Agent", "kubectl/v1.32.4 (linux/amd64) kubernetes/4cb5f07"),
           ("Accept", "application/json, */*"), ("Accept-Encoding", "gzip")]

# Read-only port (selector 0) and healthz port (1).
for path in ["/pods", "/pods/", "/stats/summary", "/stats/summary?only_cpu_and_memory=true", "/metrics",
             "/metrics/cadvisor", "/metrics/resource", "/metrics/probes", "/debug/loops", "/healthz",
             "/healthz?verbose", "/healthz/pleg", "/healthz/syncloop", "/nope", "//pods//", "/pods?x=%zz"]:
    put("http_readonly", b"\x00" + req("GET", path, CURL))
put("http_readonly", b"\x00" + req("HEAD", "/pods", CURL))
put("http_readonly", b"\x00" + req("POST", "/stats/summary", CURL + [("Content-Type", "application/json"),
    ("Content-Length", "30")], b'{"only_cpu_and_memory": true}'))
put("http_readonly", b"\x00" + req("DELETE", "/pods", CURL))
put("http_readonly", b"\x00" + req("GET", "/healthz", CURL) + req("GET", "/pods", CURL) + req("GET", "/metrics", CURL + [("Connection", "close")]))
put("http_readonly", b"\x00" + req("GET", "/pods", CURL, version="1.0") + req("GET", "/pods", CURL))
put("http_readonly", b"\x00" + req("GET", "/pods", CURL + [("Content-Length", "abc")]))
put("http_readonly", b"\x00" + req("GET", "/pods", CURL + [("Transfer-Encoding", "chunked")], b"5\r\nhello\r\n0\r\n\r\n"))
put("http_readonly", b"\x00GET /pods HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 2000)
put("http_readonly", b"\x00GET\x00/pods HTTP/1.1\r\n\r\n")
for path in ["/healthz", "/healthz?verbose=1", "/healthz/ping", "/healthz/runtime", "/healthz/nope", "/", "/metrics"]:
    put("http_readonly", b"\x01" + req("GET", path, [("Host", "127.0.0.1:10248"), ("User-Agent", "curl/7.88.1")]))
put("http_readonly", b"\x01" + req("POST", "/healthz", [("Host", "127.0.0.1:10248")]))

# Kubelet port: selector bits 0 anonymous, 1-2 certificate (1 = admin's), 3 token
# webhook, 4 webhook authorizer, 5 debugging handlers off. 0x02: admin, AlwaysAllow.
ADMIN = b"\x02"
for path in ["/pods", "/runningpods/", "/configz", "/healthz", "/healthz/pleg", "/stats/summary",
             "/metrics", "/metrics/cadvisor", "/metrics/probes", "/metrics/resource", "/spec/",
             "/logs/", "/logs/syslog", "/logs/pods/", "/logs/pods/default_web/app.log", "/logs/../etc/passwd",
             "/logs/%2e%2e/%2e%2e/etc/passwd", "/logs", "/debug/pprof/", "/checkpoint/default/web-fuzz-node/app",
             "/containerLogs/%s/app" % POD,
             "/containerLogs/%s/app?follow=true&tailLines=10&timestamps=true" % POD,
             "/containerLogs/%s/app?sinceSeconds=60&limitBytes=1024" % POD,
             "/containerLogs/%s/side?previous=true" % POD,
             "/containerLogs/%s/app?sinceTime=2026-12-01T00:00:00Z" % POD,
             "/containerLogs/%s/nope" % POD, "/containerLogs/default//app", "/containerLogs/%s/app?tailLines=-1" % POD,
             "/containerLogs/%s/app?follow=1&sinceSeconds=0" % POD,
             "/runningpods", "/run/%s/app?cmd=ls" % POD, "/exec/%s/app?command=ls&stdout=1" % POD]:
    put("http_kubelet", ADMIN + req("GET", path, KUBECTL))
put("http_kubelet", ADMIN + req("POST", "/run/%s/app" % POD, KUBECTL + [("Content-Type", "application/x-www-form-urlencoded"),
    ("Content-Length", "6")], b"cmd=ls"))
put("http_kubelet", ADMIN + req("POST", "/run/default/web-fuzz-node/%s/app?cmd=ls" % "uid", KUBECTL))
put("http_kubelet", ADMIN + req("PUT", "/debug/flags/v", KUBECTL + [("Content-Length", "1")], b"3"))
put("http_kubelet", ADMIN + req("PUT", "/debug/flags/v", KUBECTL + [("Content-Length", "3"), ("Expect", "100-continue")], b"abc"))
put("http_kubelet", ADMIN + req("PUT", "/debug/flags/v", KUBECTL + [("Transfer-Encoding", "chunked")], b"1\r\n3\r\n0\r\n\r\n"))
put("http_kubelet", ADMIN + req("GET", "/debug/flags/v", KUBECTL))
put("http_kubelet", ADMIN + req("GET", "/pods", KUBECTL) + req("GET", "/configz", KUBECTL))
put("http_kubelet", b"\x00" + req("GET", "/pods", KUBECTL))
put("http_kubelet", b"\x01" + req("GET", "/pods", KUBECTL))
put("http_kubelet", b"\x04" + req("GET", "/pods", KUBECTL))
put("http_kubelet", b"\x06" + req("GET", "/healthz", KUBECTL))
put("http_kubelet", b"\x08" + req("GET", "/pods", KUBECTL + [("Authorization", "Bearer eyJhbGciOiJSUzI1NiJ9.e30.sig")]))
put("http_kubelet", b"\x09" + req("GET", "/pods", KUBECTL + [("Authorization", "bearer  x")]))
put("http_kubelet", b"\x12" + req("GET", "/stats/summary", KUBECTL))
put("http_kubelet", b"\x13" + req("POST", "/exec/%s/app?command=ls" % POD, KUBECTL))
put("http_kubelet", b"\x22" + req("GET", "/configz", KUBECTL))
put("http_kubelet", b"\x22" + req("GET", "/containerLogs/%s/app" % POD, KUBECTL))

# Exec, attach, port-forward: kubectl's WebSocket (v5) and SPDY requests, then what
# it sends after the upgrade.
WS = [("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
      ("Sec-WebSocket-Version", "13")]
def wsreq(target, protocols):
    return req("GET", target, KUBECTL + WS + [("Sec-WebSocket-Protocol", protocols)])
RC = "v5.channel.k8s.io, v4.channel.k8s.io, v3.channel.k8s.io, v2.channel.k8s.io, channel.k8s.io"
exec_q = "/exec/%s/app?command=sh&command=-c&command=cat&stdin=1&stdout=1&stderr=1" % POD
for sel in [b"", ADMIN]:
    put("upgrade" if not sel else "http_kubelet", sel + wsreq(exec_q, RC) + ws(2, b"\x00hello\n") + ws(2, b"\xff\x00") + ws(8, b"\x03\xe8"))
put("upgrade", wsreq("/exec/%s/app?command=sh&stdin=1&stdout=1&tty=1" % POD, RC)
    + ws(2, b"\x04{\"Width\":80,\"Height\":24}") + ws(2, b"\x00ls\r") + ws(9, b"p") + ws(8, b""))
put("upgrade", wsreq("/attach/%s/app?stdin=1&stdout=1&stderr=1" % POD, "v4.channel.k8s.io") + ws(2, b"\x00x"))
put("upgrade", wsreq("/exec/%s/app?command=ls&stdout=1" % POD, "base64.channel.k8s.io") + ws(1, b"0aGVsbG8="))
put("upgrade", wsreq("/exec/%s/app?command=ls&stdout=1" % POD, "nope.k8s.io"))
put("upgrade", wsreq("/portForward/%s?port=8080&port=9090" % POD, "v4.channel.k8s.io") + ws(2, b"\x00\x90\x1fGET / HTTP/1.0\r\n\r\n"))
put("upgrade", wsreq("/portForward/%s" % POD, "SPDY/3.1+portforward.k8s.io") + ws(2, read(os.path.join("src", "server", "spdy", "fixtures", "portforward.bin"))))
SPDY = [("Content-Length", "0"), ("Connection", "Upgrade"), ("Kubectl-Command", "kubectl exec"), ("Upgrade", "SPDY/3.1")]
for name, target in [("exec_stdin", "/exec/%s/app?command=cat&stderr=true&stdin=1&stdout=1" % POD),
                     ("exec_tty", "/exec/%s/app?command=sh&stdin=1&stdout=1&tty=1" % POD)]:
    frames = read(os.path.join("src", "server", "spdy", "fixtures", name + ".bin"))
    put("upgrade", req("POST", target, KUBECTL + SPDY + [("X-Stream-Protocol-Version", p) for p in
        ["v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"]]) + frames)
put("upgrade", req("POST", "/portForward/%s" % POD, KUBECTL + SPDY + [("X-Stream-Protocol-Version", "portforward.k8s.io")])
    + read(os.path.join("src", "server", "spdy", "fixtures", "portforward.bin")))
put("upgrade", req("POST", "/attach/%s/app?stdout=1" % POD, KUBECTL + SPDY))
put("upgrade", req("POST", "/exec/%s/app?command=ls&stdout=1" % POD, KUBECTL + [("Upgrade", "h2c"), ("Connection", "Upgrade")]))

# gRPC probe's frame loop: what a health server sends after the call.
def h2(ty, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([ty, flags]) + stream.to_bytes(4, "big") + payload
def hlit(name, value):  # literal with incremental indexing, new name
    return b"\x40" + bytes([len(name)]) + name + bytes([len(value)]) + value
CT = hlit(b"content-type", b"application/grpc")
def health(status):
    body = b"\x08" + bytes([status])
    return b"\x00" + len(body).to_bytes(4, "big") + body
SETTINGS = h2(4, 0, 0, b"\x00\x03\x00\x00\x00\x64") + h2(4, 1, 0, b"")
OK_TRAILERS = h2(1, 0x5, 1, hlit(b"grpc-status", b"0"))
put("grpc_frames", SETTINGS + h2(1, 0x4, 1, b"\x88" + CT) + h2(0, 0, 1, health(1)) + OK_TRAILERS)
put("grpc_frames", SETTINGS + h2(1, 0x4, 1, b"\x88" + CT) + h2(0, 0, 1, health(2)) + OK_TRAILERS)
put("grpc_frames", SETTINGS + h2(1, 0x5, 1, b"\x88" + CT + hlit(b"grpc-status", b"12") + hlit(b"grpc-message", b"unknown%20service")))
put("grpc_frames", SETTINGS + h2(1, 0x0, 1, b"\x88") + h2(9, 0x4, 1, CT) + h2(6, 0, 0, b"12345678")
    + h2(0, 0x8, 1, b"\x02" + health(1) + b"\x00\x00") + h2(1, 0x5 | 0x8 | 0x20, 1, b"\x01" + b"\x00\x00\x00\x03\x10" + hlit(b"grpc-status", b"0") + b"\x00"))
put("grpc_frames", SETTINGS + h2(7, 0, 0, b"\x00\x00\x00\x00\x00\x00\x00\x00"))
put("grpc_frames", SETTINGS + h2(3, 0, 1, b"\x00\x00\x00\x07"))
put("grpc_frames", h2(1, 0x5, 1, b"\x8d"))  # :status 404, no grpc-status
put("grpc_frames", SETTINGS + h2(1, 0x4, 1, b"\x88") + h2(0, 0x1, 1, health(3)))
put("grpc_frames", h2(1, 0x4, 3, b"\x88") + h2(0, 0, 3, b"x") + h2(8, 0, 0, b"\x00\x00\x10\x00") + h2(1, 0x5, 1, b"\x88"))

# etcd source: a range answer (R…) then watch lines, as the v3 JSON gateway sends them.
def b64s(b):
    return base64.b64encode(b.encode() if isinstance(b, str) else b).decode()
KEY = "/registry/hosts/fuzz-node/"
POD_YAML = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers: [{name: c, image: busybox}]\n"
POD_JSON = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "api"},
                       "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80}]}]}})
def kv(key, value, rev):
    d = {"key": b64s(KEY + key), "create_revision": "2", "mod_revision": str(rev), "version": "1"}
    if value is not None:
        d["value"] = b64s(value)
    return d
def rng(rev, kvs):
    return "R" + json.dumps({"header": {"cluster_id": "1", "member_id": "2", "revision": str(rev), "raft_term": "2"},
                              "kvs": kvs, "count": str(len(kvs))})
def wl(result=None, error=None):
    d = {}
    if result is not None:
        d["result"] = result
    if error is not None:
        d["error"] = error
    return json.dumps(d)
HDR = lambda r: {"cluster_id": "1", "member_id": "2", "revision": str(r), "raft_term": "2"}
put("etcd_stream", "\n".join([
    rng(5, [kv("web", POD_YAML, 5)]),
    wl({"header": HDR(5), "created": True}),
    wl({"header": HDR(6), "events": [{"kv": kv("api", POD_JSON, 6)}]}),
    wl({"header": HDR(7), "events": [{"type": "DELETE", "kv": kv("web", None, 7)}]}),
    wl({"header": HDR(8), "events": [{"kv": kv("api", "not: [a pod", 8)}]}),
    wl({"header": HDR(8)}),
    ""]))
put("etcd_stream", "\n".join([
    rng(9, [kv("web", POD_YAML, 3), kv("bad", "{", 9)]),
    wl({"header": HDR(9), "compact_revision": "8", "canceled": True, "cancel_reason": "mvcc: required revision has been compacted"}),
    rng(12, [kv("web", POD_YAML, 3)]),
    wl({"header": HDR(2), "created": True}),
    wl(error={"grpc_code": 14, "http_code": 503, "message": "etcdserver: leader changed", "http_status": "Service Unavailable"}),
    rng(9223372036854775807, []),
    wl({"header": HDR(9223372036854775807), "created": True}),
    wl({"header": HDR(1), "events": [{"kv": kv("x", "", "-9223372036854775808")}]})]))
