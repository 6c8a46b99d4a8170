//! Every HTTP client set-up rkubelet has outside Docker, in one place and below the
//! modules that use them: [`servers`] for the servers it reads pods from (the API
//! server, etcd, a manifest URL: TLS from PEM, a User-Agent, streamed bodies read line
//! by line; [`roots`]: the host's CAs, for a server whose CA is not configured), and
//! [`pods`] for the requests it makes to pods (`httpGet` probes and lifecycle hooks: no
//! proxy, no keep-alive, no certificate checks, no redirects followed by ureq).

pub mod pods;
pub(crate) mod roots;
pub mod servers;

/// Each kept-alive connection's input and output buffers (ureq's default is 128 KiB
/// each: a pooled idle connection to Docker or the API server then holds 256 KiB of
/// resident memory, about a tenth of an idle node's heap). The input buffer also
/// bounds a response's header block, which from Docker, etcd and the API server is
/// well under 2 KiB; bodies stream through it whatever their size.
pub const CONNECTION_BUFFER: usize = 16 * 1024;
