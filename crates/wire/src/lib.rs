//! rkubelet's wire protocols, below the kubelet's handlers: the bounded HTTP/1.1
//! server of its ports, TLS with client certificates verified per request, SPDY/3.1
//! framing, WebSocket, and the exec/attach (remote-command) and port-forward sessions
//! that run once a handler has taken a connection over. Nothing here knows a pod; the
//! sessions drive a container's process through the `runtime` crate's trait.
// What another crate uses is `pub`, the rest `pub(crate)` or private
// (tests/tidy.rs checks that each `pub` item is named outside the crate).
#![warn(unreachable_pub)]

// A port: requests, replies, serving a listener on the bounded transport below it.
pub mod server;

// TLS on the kubelet port: the server config, client certificates, reloads.
pub mod tls;
pub mod selfsigned;
pub mod tls_reload;
pub mod client_cert;
pub mod x509;

// The streaming protocols: SPDY/3.1 framing (sans-IO) and the sessions.
pub mod spdy;
pub mod streams;
