#!/usr/bin/env python3
"""Capture the SPDY/3.1 bytes a real kubectl sends for exec and port-forward.

How the fixtures under crates/wire/src/spdy/fixtures/ were made, kept so they can be made
again (with another kubectl, say). It is independent of rkubelet's own codec: the
frames are cut by their length fields and SYN_REPLYs are compressed by Python's zlib.

The script stands in for an API server on 127.0.0.1 (plain HTTP): it answers
`GET .../pods/p` with a running pod and the exec / portforward upgrade with
`101 Switching Protocols`, then answers every SYN_STREAM with a SYN_REPLY (kubectl
waits for one before it opens the next stream) and records every byte kubectl sends
after the upgrade into <out>/<scenario>.bin (its upgrade request's head into
<out>/<scenario>.request.txt).

    python3 hack/spdy-capture.py OUTDIR            # all scenarios
    python3 hack/spdy-capture.py OUTDIR exec_stdin # one

Scenarios: exec_stdin (`kubectl exec -i p -- cat` with stdin "hello\\n"; the stand-in
writes "hi from harness\\n" to stdout and closes stdout, stderr and error), exec_tty
(`kubectl exec -it` in a pseudo-terminal: a resize stream, then "x" typed), portforward
(`kubectl port-forward p PORT:80`, one local connection sending "ping", answered
"pong", kept open past kubectl's 5 s ping period).
"""

import json
import os
import pty
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

WORDS = [
    "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset",
    "accept-encoding", "accept-language", "accept-ranges", "age", "allow",
    "authorization", "cache-control", "connection", "content-base", "content-encoding",
    "content-language", "content-length", "content-location", "content-md5",
    "content-range", "content-type", "date", "etag", "expect", "expires", "from", "host",
    "if-match", "if-modified-since", "if-none-match", "if-range", "if-unmodified-since",
    "last-modified", "location", "max-forwards", "pragma", "proxy-authenticate",
    "proxy-authorization", "range", "referer", "retry-after", "server", "te", "trailer",
    "transfer-encoding", "upgrade", "user-agent", "vary", "via", "warning",
    "www-authenticate", "method", "get", "status", "200 OK", "version", "HTTP/1.1", "url",
    "public", "set-cookie", "keep-alive", "origin",
]
TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417"
    "502504505203 Non-Authoritative Information204 No Content301 Moved Permanently"
    "400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error"
    "501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct "
    "Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,"
    "image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8"
    "charset=iso-8859-1,utf-,*,enq=0."
)
DICT = b"".join(struct.pack(">I", len(w)) + w.encode() for w in WORDS) + TAIL.encode()

POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default", "uid": "u"},
    "spec": {"containers": [{"name": "c", "image": "busybox",
                             "ports": [{"containerPort": 80}]}]},
    "status": {"phase": "Running"},
}

# Legacy discovery, enough for kubectl to map `p` to pods.
DISCOVERY = {
    "/version": {"major": "1", "minor": "32", "gitVersion": "v1.32.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
        {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod",
         "verbs": ["get", "list"], "shortNames": ["po"]},
        {"name": "pods/exec", "singularName": "", "namespaced": True, "kind": "PodExecOptions",
         "verbs": ["create", "get"]},
        {"name": "pods/portforward", "singularName": "", "namespaced": True,
         "kind": "PodPortForwardOptions", "verbs": ["create", "get"]}]},
}


class Spdy:
    """Just enough SPDY/3 to keep kubectl going: cut frames, decode header blocks."""

    def __init__(self, sock, record):
        self.sock, self.record, self.buf = sock, record, b""
        self.inflate = zlib.decompressobj()
        self.deflate = zlib.compressobj(zdict=DICT)
        self.lock = threading.Lock()

    def frames(self):
        while True:
            while len(self.buf) >= 8:
                length = struct.unpack(">I", self.buf[4:8])[0] & 0xFFFFFF
                if len(self.buf) < 8 + length:
                    break
                frame, self.buf = self.buf[:8 + length], self.buf[8 + length:]
                yield frame
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            self.record.write(chunk)
            self.record.flush()
            self.buf += chunk

    def headers(self, block):
        try:
            raw = self.inflate.decompress(block)
        except zlib.error:
            # The first block asks for the dictionary (its DICTID is checked here).
            self.inflate = zlib.decompressobj(zdict=DICT)
            raw = self.inflate.decompress(block)
        n, off, out = struct.unpack(">I", raw[:4])[0], 4, {}
        for _ in range(n):
            ln = struct.unpack(">I", raw[off:off + 4])[0]
            name = raw[off + 4:off + 4 + ln].decode()
            off += 4 + ln
            lv = struct.unpack(">I", raw[off:off + 4])[0]
            out[name] = raw[off + 4:off + 4 + lv].decode()
            off += 4 + lv
        return out

    def send(self, data):
        with self.lock:
            self.sock.sendall(data)

    def syn_reply(self, sid):
        block = self.deflate.compress(b"\0\0\0\0") + self.deflate.flush(zlib.Z_SYNC_FLUSH)
        self.send(struct.pack(">HHI", 0x8003, 2, len(block) + 4) + struct.pack(">I", sid) + block)

    def data(self, sid, payload, fin=False):
        self.send(struct.pack(">II", sid, (0x01000000 if fin else 0) | len(payload)) + payload)


def serve(listener, scenario, out_dir, done):
    while not done.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=handle, args=(conn, scenario, out_dir, done), daemon=True).start()


def handle(conn, scenario, out_dir, done):
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk:
            return
        head += chunk
    head, rest = head.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    hdrs = [l.split(":", 1) for l in lines[1:]]
    print(f"[{scenario}] {method} {path}", file=sys.stderr)
    route = path.split("?")[0]
    if method == "GET" and route in DISCOVERY:
        body = json.dumps(DISCOVERY[route]).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        conn.close()
        return
    if method == "GET" and route.endswith("/pods/p"):
        body = json.dumps(POD).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        conn.close()
        return
    if method != "POST" or not any(k.lower() == "upgrade" for k, _ in hdrs):
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        conn.close()
        return
    with open(os.path.join(out_dir, scenario + ".request.txt"), "w") as f:
        f.write(head.decode() + "\n")
    offered = [v.strip() for k, v in hdrs if k.lower() == "x-stream-protocol-version"]
    proto = offered[0] if offered else ""
    conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                 b"Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: " + proto.encode() + b"\r\n\r\n")
    with open(os.path.join(out_dir, scenario + ".bin"), "wb") as record:
        record.write(rest)
        s = Spdy(conn, record)
        s.buf = rest
        streams = {}
        for frame in s.frames():
            first, flags = struct.unpack(">I", frame[:4])[0], frame[4]
            if first & 0x80000000:
                ftype = first & 0xFFFF
                if ftype == 1:  # SYN_STREAM
                    sid = struct.unpack(">I", frame[8:12])[0] & 0x7FFFFFFF
                    h = s.headers(frame[18:])
                    print(f"[{scenario}] SYN_STREAM {sid} {h}", file=sys.stderr)
                    streams[h.get("streamtype")] = sid
                    s.syn_reply(sid)
                elif ftype == 6:  # PING: echo
                    print(f"[{scenario}] PING", file=sys.stderr)
                    s.send(frame)
                else:
                    print(f"[{scenario}] control type {ftype} flags {flags}", file=sys.stderr)
            else:
                sid, payload = first, frame[8:]
                print(f"[{scenario}] DATA {sid} fin={flags & 1} {payload[:40]!r}", file=sys.stderr)
                if scenario == "exec_stdin" and sid == streams.get("stdin") and flags & 1:
                    s.data(streams["stdout"], b"hi from harness\n")
                    for t in ("stdout", "stderr", "error"):
                        s.data(streams[t], b"", fin=True)
                if scenario == "exec_tty" and sid == streams.get("stdin") and b"x" in payload:
                    s.data(streams["stdout"], b"x")
                    for t in ("stdout", "error"):
                        s.data(streams[t], b"", fin=True)
                if scenario == "portforward" and payload == b"ping":
                    s.data(sid, b"pong")
    done.set()


def kubeconfig(port, d):
    path = os.path.join(d, "kubeconfig")
    with open(path, "w") as f:
        f.write(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u, namespace: default}}}}]
current-context: x
""")
    return path


def run(scenario, out_dir):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    done = threading.Event()
    threading.Thread(target=serve, args=(listener, scenario, out_dir, done), daemon=True).start()
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, KUBECTL_REMOTE_COMMAND_WEBSOCKETS="false",
               KUBECTL_PORT_FORWARD_WEBSOCKETS="false", HOME=tmp)
    kc = kubeconfig(port, tmp)
    if scenario == "exec_stdin":
        p = subprocess.run(["kubectl", "--kubeconfig", kc, "exec", "-i", "p", "--", "cat"],
                           input=b"hello\n", capture_output=True, env=env, timeout=30)
        print(f"[{scenario}] kubectl exit {p.returncode} stdout={p.stdout!r} stderr={p.stderr!r}",
              file=sys.stderr)
    elif scenario == "exec_tty":
        pid, fd = pty.fork()
        if pid == 0:
            os.execvpe("kubectl", ["kubectl", "--kubeconfig", kc, "exec", "-it", "p", "--", "sh"], env)
        time.sleep(3)
        os.write(fd, b"x")
        deadline = time.time() + 15
        while time.time() < deadline:
            wpid, status = os.waitpid(pid, os.WNOHANG)
            if wpid:
                print(f"[{scenario}] kubectl status {status}", file=sys.stderr)
                break
            try:
                os.read(fd, 4096)
            except OSError:
                pass
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
    elif scenario == "portforward":
        local = socket.socket()
        local.bind(("127.0.0.1", 0))
        lport = local.getsockname()[1]
        local.close()
        p = subprocess.Popen(["kubectl", "--kubeconfig", kc, "port-forward", "p", f"{lport}:80"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 15
        while True:
            try:
                c = socket.create_connection(("127.0.0.1", lport), timeout=2)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        c.sendall(b"ping")
        print(f"[{scenario}] local got {c.recv(16)!r}", file=sys.stderr)
        time.sleep(7)  # past kubectl's ping period
        c.close()
        time.sleep(1)
        p.terminate()
        out, err = p.communicate(timeout=10)
        print(f"[{scenario}] kubectl stdout={out!r} stderr={err!r}", file=sys.stderr)
    done.wait(5)
    listener.close()


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for scenario in sys.argv[2:] or ["exec_stdin", "exec_tty", "portforward"]:
        run(scenario, out_dir)


if __name__ == "__main__":
    main()
