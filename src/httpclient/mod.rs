//! Every HTTP client set-up rkubelet has outside Docker, in one place and below the
//! modules that use them: [`servers`] for the servers it reads pods from (the API
//! server, etcd, a manifest URL: TLS from PEM, a User-Agent, streamed bodies read line
//! by line), and [`pods`] for the requests it makes to pods (`httpGet` probes and
//! lifecycle hooks: no proxy, no keep-alive, no certificate checks, no redirects
//! followed by ureq).

pub mod pods;
pub mod servers;
