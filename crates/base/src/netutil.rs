//! The node's own address, for `hostIP` and host-network pods' `podIP`.
//!
//! Upstream takes it from `--node-ip` or the Node object; standalone, it resolves the
//! host name. We read the interfaces instead (no DNS on a small board that may have
//! none): the first IPv4 address of an interface that is up, not loopback, and not a
//! container bridge or veth. Loopback if there is none.

use std::ffi::CStr;
use std::net::Ipv4Addr;

/// Interface name prefixes that belong to container networking, not the node.
const VIRTUAL_PREFIXES: [&str; 5] = ["docker", "veth", "br-", "cni", "flannel"];

/// The node's IPv4 address as a string.
pub fn node_ip() -> String {
    interface_addrs()
        .into_iter()
        .find(|(name, _)| !VIRTUAL_PREFIXES.iter().any(|p| name.starts_with(p)))
        .map_or_else(|| Ipv4Addr::LOCALHOST.to_string(), |(_, ip)| ip.to_string())
}

/// (interface, IPv4) of this host's interfaces that are up and not loopback, in
/// kernel order (the node status checks a resolved host name against them and finds
/// the default route's address among them).
pub fn host_interfaces() -> Vec<(String, Ipv4Addr)> {
    interface_addrs()
}

/// (interface, IPv4) of every interface that is up and not loopback, in kernel order.
fn interface_addrs() -> Vec<(String, Ipv4Addr)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into the pointer we own; we free it below.
    // getifaddrs is libc's netlink walk, not one syscall: rustix (1.1) has no wrapper,
    // so this list and the reads of its nodes below stay raw.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a non-null node of the list getifaddrs returned, valid until
        // freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        let flags = ifa.ifa_flags;
        if flags & (libc::IFF_UP as u32) == 0 || flags & (libc::IFF_LOOPBACK as u32) != 0 {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr of at least the family field.
        let family = unsafe { (*ifa.ifa_addr).sa_family };
        if i32::from(family) != libc::AF_INET {
            continue;
        }
        // SAFETY: the family is AF_INET, so the address is a sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        // SAFETY: ifa_name is a non-null NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        out.push((name, ip));
    }
    // SAFETY: head came from a successful getifaddrs and is freed exactly once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// `host:port`, with brackets around an IPv6 address (Go's `net.JoinHostPort`).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// What [`query_escape`] leaves alone: RFC 3986's unreserved characters.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a query value or path segment (Docker's API paths, the API server's
/// query values): everything but RFC 3986's unreserved characters is escaped, so JSON
/// filters, selectors and image names survive intact.
pub fn query_escape(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encode_escapes_json_filters() {
        // Moved from runtime/docker/wire.rs with the one escaping helper.
        let percent_encode = query_escape;
        assert_eq!(
            percent_encode(r#"{"label":["a=b"]}"#),
            "%7B%22label%22%3A%5B%22a%3Db%22%5D%7D"
        );
        assert_eq!(percent_encode("k8s_app-1.x~y"), "k8s_app-1.x~y");
        assert_eq!(percent_encode("127.0.0.1:5000/x"), "127.0.0.1%3A5000%2Fx");
    }

    #[test]
    fn node_ip_is_an_ipv4_address() {
        let ip: Ipv4Addr = node_ip().parse().expect("an IPv4 address");
        assert!(!ip.is_unspecified());
    }

    #[test]
    fn join_host_port_brackets_ipv6() {
        assert_eq!(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
        assert_eq!(join_host_port("::1", 80), "[::1]:80");
        assert_eq!(join_host_port("[::1]", 80), "[::1]:80");
    }
}
