//! Helpers for the image, container-spec and volume tests: a real local registry with
//! basic auth (Debian's `docker-registry` with an `htpasswd` file), raw Engine API
//! calls the runtime trait does not need (tag, push, commit), and readers of a pod's
//! status in `/pods`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::util::{self, free_port, unique, wait_for, Node, DOCKER_SOCK, LONG};
use runtime::Runtime;

/// The registry binary (Debian's `docker-registry`, distribution 2.8).
const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
/// `htpasswd` from `apache2-utils` (bcrypt entries are what the registry accepts).
const HTPASSWD_BIN: &str = "htpasswd";

/// The user and password the registry accepts.
pub const USER: &str = "rkuser";
/// See [`USER`].
pub const PASSWORD: &str = "s3cret-pw";

/// A registry on 127.0.0.1 with basic auth, its own storage; killed and removed on
/// drop together with every local image tagged with its address.
pub struct Registry {
    /// `127.0.0.1:<port>`.
    pub host: String,
    dir: PathBuf,
    child: Child,
}

impl Registry {
    /// Starts a registry requiring [`USER`] / [`PASSWORD`] and waits until it answers.
    pub fn start() -> Registry {
        for (bin, what) in [
            (REGISTRY_BIN, "docker-registry"),
            ("/usr/bin/htpasswd", "apache2-utils"),
        ] {
            assert!(
                std::path::Path::new(bin).exists(),
                "{bin} is missing: install the registry for the tests with \
                 `apt-get install -y docker-registry apache2-utils` (.ci/run does)"
            );
            let _ = what;
        }
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("rkubelet-it-{}", unique("registry")));
        std::fs::create_dir_all(dir.join("data")).expect("registry dir");
        let out = Command::new(HTPASSWD_BIN)
            .args(["-Bbn", USER, PASSWORD])
            .output()
            .expect("run htpasswd");
        assert!(out.status.success(), "htpasswd failed: {out:?}");
        std::fs::write(dir.join("htpasswd"), &out.stdout).expect("write htpasswd");
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\nauth:\n  htpasswd:\n    realm: rkubelet-tests\n    path: {}\n",
            dir.join("data").display(),
            dir.join("htpasswd").display()
        );
        std::fs::write(dir.join("config.yml"), config).expect("write registry config");
        let log = std::fs::File::create(dir.join("registry.log")).expect("registry log");
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn docker-registry");
        let reg = Registry {
            host: format!("127.0.0.1:{port}"),
            dir,
            child,
        };
        wait_for("the registry to answer", LONG, || {
            // Unauthenticated /v2/ is refused with 401: the registry is up.
            util::http_get(port, "/v2/")
                .ok()
                .filter(|(code, _)| *code == 401)
                .map(|_| ())
        });
        reg
    }

    /// The `X-Registry-Auth` header value for these credentials.
    pub fn auth_header(&self, user: &str, password: &str) -> String {
        let json = format!(
            "{{\"username\":\"{user}\",\"password\":\"{password}\",\"serveraddress\":\"{}\"}}",
            self.host
        );
        base64(json.as_bytes(), true)
    }

    /// Pushes the local image `local` as `<host>/<repo>:<tag>`; the local tag of the
    /// pushed name stays unless `untag` is set.
    pub fn push(&self, local: &str, repo: &str, tag: &str, untag: bool) -> String {
        let target = format!("{}/{repo}", self.host);
        let (code, body) = engine(
            "POST",
            &format!("/images/{local}/tag?repo={target}&tag={tag}"),
            &[],
        );
        assert_eq!(code, 201, "tag {local} as {target}:{tag}: {body}");
        let auth = self.auth_header(USER, PASSWORD);
        let (code, body) = engine(
            "POST",
            &format!("/images/{target}/push?tag={tag}"),
            &[("X-Registry-Auth", &auth)],
        );
        assert_eq!(code, 200, "push {target}:{tag}: {body}");
        assert!(
            !body.contains("errorDetail"),
            "push {target}:{tag} failed: {body}"
        );
        let full = format!("{target}:{tag}");
        if untag {
            remove_image(&full);
        }
        full
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(images) = util::docker().list_images() {
            for i in images {
                for t in i.repo_tags.iter().filter(|t| t.starts_with(&self.host)) {
                    remove_image(t);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes a local image tag (an image still used by a container stays).
pub fn remove_image(name: &str) {
    let _ = engine("DELETE", &format!("/images/{name}"), &[]);
}

/// Commits a new local image from `base` with Dockerfile-style `changes` (e.g.
/// `ENTRYPOINT ["/bin/echo","ep"]`); returns its name. Removed by the caller.
pub fn commit_image(base: &str, name: &str, changes: &[&str]) -> String {
    let (code, body) = engine_json(
        "POST",
        "/containers/create",
        &format!("{{\"Image\":\"{base}\",\"Cmd\":[\"true\"],\"Labels\":{{\"rkubelet.test\":\"commit\"}}}}"),
    );
    assert_eq!(code, 201, "create for commit: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("create answer");
    let id = v["Id"].as_str().expect("id").to_string();
    let mut query = format!("/commit?container={id}&repo={name}&tag=t");
    for c in changes {
        query.push_str("&changes=");
        query.push_str(&percent(c));
    }
    let (code, body) = engine("POST", &query, &[]);
    let _ = engine("DELETE", &format!("/containers/{id}?force=1"), &[]);
    assert_eq!(code, 201, "commit: {body}");
    format!("{name}:t")
}

fn percent(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One Engine API call over the socket (HTTP/1.0, so the answer ends with the
/// connection and is never chunked): (status, body).
pub fn engine(method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    engine_raw(method, path, headers, None)
}

fn engine_json(method: &str, path: &str, body: &str) -> (u16, String) {
    engine_raw(
        method,
        path,
        &[("Content-Type", "application/json")],
        Some(body),
    )
}

fn engine_raw(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, String) {
    let mut s = UnixStream::connect(DOCKER_SOCK).expect("docker socket");
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let mut req = format!("{method} /v1.41{path} HTTP/1.0\r\nHost: docker\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).expect("write request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read answer");
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_string())
}

/// Base64 (standard, or URL-safe when `url`), padded.
pub fn base64(data: &[u8], url: bool) -> String {
    let alphabet: &[u8] = if url {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(alphabet[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The pod `name` (without the node suffix) from `/pods`, if listed.
pub fn pod_item(node: &Node, name: &str) -> Option<serde_json::Value> {
    let full = format!("{name}-{}", node.name);
    node.pods()["items"]
        .as_array()?
        .iter()
        .find(|p| p["metadata"]["name"] == full.as_str())
        .cloned()
}

/// A container's status in `/pods` (init or app).
pub fn container_status(node: &Node, pod: &str, container: &str) -> Option<serde_json::Value> {
    let p = pod_item(node, pod)?;
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|k| p["status"][k].as_array())
        .flatten()
        .find(|s| s["name"] == container)
        .cloned()
}

/// Waits until a container of a pod is waiting with `reason`; returns its message.
pub fn wait_waiting(node: &Node, pod: &str, container: &str, reason: &str) -> String {
    wait_for(
        &format!("{pod}/{container} waiting with {reason}"),
        LONG,
        || {
            let s = container_status(node, pod, container)?;
            (s["state"]["waiting"]["reason"] == reason).then(|| {
                s["state"]["waiting"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
        },
    )
}

/// Waits until a container of a pod runs; returns its runtime ID.
pub fn wait_running_id(node: &Node, pod: &str, container: &str) -> String {
    let full = format!("{pod}-{}", node.name);
    wait_for(&format!("{pod}/{container} running"), LONG, || {
        node.running()
            .get(&format!("{full}/{container}"))
            .and_then(|ids| ids.first().cloned())
    })
}

/// Runs a command in a running container; returns its stdout (asserting exit 0).
pub fn exec(node: &Node, id: &str, cmd: &[&str]) -> String {
    let r = node
        .runtime
        .exec(
            id,
            &cmd.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            Duration::from_secs(30),
        )
        .expect("exec");
    assert_eq!(
        r.exit_code,
        0,
        "{cmd:?}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    String::from_utf8_lossy(&r.stdout).into_owned()
}

/// Waits until a container's log contains `needle`; returns the whole log.
pub fn wait_log(node: &Node, id: &str, needle: &str) -> String {
    wait_for(&format!("{needle:?} in the log of {id}"), LONG, || {
        let log = node.runtime.logs(id, None).ok()?;
        let log = String::from_utf8_lossy(&log).into_owned();
        log.contains(needle).then_some(log)
    })
}

/// The pod's UID as rkubelet reports it.
pub fn pod_uid(node: &Node, pod: &str) -> String {
    wait_for(&format!("{pod} in /pods"), LONG, || {
        pod_item(node, pod).and_then(|p| p["metadata"]["uid"].as_str().map(str::to_string))
    })
}

#[test]
fn base64_matches_known_vectors() {
    assert_eq!(base64(b"user:pass", false), "dXNlcjpwYXNz");
    assert_eq!(base64(b"a", false), "YQ==");
    assert_eq!(base64(b"ab", false), "YWI=");
    assert_eq!(base64(&[0xfb, 0xff], true), "-_8=");
}
