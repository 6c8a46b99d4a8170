//! systemd's notify protocol (`sd_notify`), in a few lines instead of libsystemd:
//! one datagram per message to the Unix socket named by `$NOTIFY_SOCKET`. `READY=1`
//! once the servers are bound and the first relist is done (`Type=notify` units wait for
//! it), `STATUS=…` lines a person reads in `systemctl status`, `STOPPING=1` at shutdown.
//! Without `$NOTIFY_SOCKET` (not under systemd) every call does nothing.

use std::os::unix::net::UnixDatagram;

/// Sends one notification; returns whether it was sent. Failures are logged at debug
/// only: a kubelet must not stop because systemd is not listening.
pub fn notify(state: &str) -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    let sock = match UnixDatagram::unbound() {
        Ok(s) => s,
        Err(e) => {
            log::debug!("sd_notify: {e}");
            return false;
        }
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        // An abstract socket: '@' stands for the leading NUL byte.
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
    } else {
        sock.send_to(state.as_bytes(), &path)
    };
    match sent {
        Ok(_) => true,
        Err(e) => {
            log::debug!("sd_notify to {}: {e}", path.to_string_lossy());
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_the_notify_socket() {
        let dir = std::env::temp_dir().join(format!("rkubelet-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("notify.sock");
        let listener = UnixDatagram::bind(&path).expect("bind");
        // The variable is process-wide; this is the only test that sets it.
        std::env::set_var("NOTIFY_SOCKET", &path);
        assert!(notify("READY=1"));
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(!notify("READY=1"));
    }
}
