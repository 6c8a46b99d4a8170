//! Helpers shared by the unit tests of several modules (compiled for tests only).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A temporary directory of the test's own, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new, empty directory whose name carries `tag`, this process and a counter, so
    /// tests running in parallel never share one.
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("rkubelet-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    /// Writes `text` to `name` inside the directory; returns the path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    /// A kubeconfig `name` for an unreachable server whose user is the client pair
    /// `cert_pem`/`key_pem` (written beside it as `<name>.crt` and `<name>.key`).
    pub fn kubeconfig_with_pair(&self, name: &str, cert_pem: &str, key_pem: &str) -> PathBuf {
        let cert_file = self.write(&format!("{name}.crt"), cert_pem);
        let key_file = self.write(&format!("{name}.key"), key_pem);
        self.write(
            name,
            &format!(
                "clusters:\n- name: c\n  cluster: {{server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}\n\
                 users:\n- name: u\n  user: {{client-certificate: {}, client-key: {}}}\n\
                 contexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n",
                cert_file.display(),
                key_file.display()
            ),
        )
    }

    /// Removes `name` inside the directory.
    pub fn remove(&self, name: &str) {
        std::fs::remove_file(self.0.join(name)).expect("remove");
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The error ureq gives for a server whose certificate begins at `not_before` (Unix
/// seconds), checked by a clock at 2025-12-01: rustls's `NotValidYetContext` inside
/// the handshake's I/O error, as a real TLS call returns it.
pub fn not_valid_yet_error(not_before: u64) -> ureq::Error {
    use rustls::pki_types::UnixTime;
    use std::time::Duration;
    ureq::Error::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidYetContext {
            time: UnixTime::since_unix_epoch(Duration::from_secs(1_764_547_200)),
            not_before: UnixTime::since_unix_epoch(Duration::from_secs(not_before)),
        }),
    ))
}

/// Tests only: runs `f` on a thread called `name` (a test plays a client or a pod
/// on it; the kubelet's own threads come from [`crate::loops::Loops`]).
pub fn spawn_named<T, F>(name: &str, f: F) -> std::thread::JoinHandle<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .expect("spawn a test thread")
}

/// Runs `promtool check metrics` on `text` and fails with its words when it
/// complains. A missing promtool fails too (a check that passes silently checks
/// nothing): `apt-get install -y prometheus`, as .ci/run does.
pub fn promtool_check(text: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => panic!(
            "promtool cannot be run ({e}): install it with `apt-get install -y prometheus` \
             (.ci/run does)"
        ),
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n--- input ---\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
