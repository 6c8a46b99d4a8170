//! The kubelet port's set-up, checked before any thread starts: its TLS (the serving
//! pair, given or self-signed in `--cert-dir`; the client CA; versions and cipher
//! suites; the `tls-reload` loop that re-reads the files), its authenticator and
//! authorizer (upstream's `BuildAuth`), and its `/configz` document.
//!
//! The token webhook and the `Webhook` authorizer ask the API server of `--kubeconfig`.
//! Without one, upstream's kubelet refuses to start ("no client provided, cannot use
//! webhook authentication"); here the port is not served, with an error in the log
//! that names what to change, and the rest of the node runs: a config file's defaults
//! (both webhooks on) must not stop a standalone node's pods, and no request is ever
//! let through with less checking than configured.

use std::sync::Arc;

use super::StartError;
use crate::config::values::AuthorizationMode;
use crate::config::KubeletConfig;
use crate::server::auth::webhook::{CacheTtls, Webhooks};
use crate::server::auth::{AuthConfig, Authorizer};
use crate::server::kubelet;
use apiclient::ApiClient;
use base::loops::{Loops, Periodic, SpawnError};
use wire::tls;
use wire::tls_reload::{self, Reloader};

/// What the kubelet port is served with.
#[derive(Debug)]
pub(super) struct PreparedPort {
    /// The TLS configuration and client CA.
    pub(super) tls: tls::TlsServer,
    /// The `/configz` document.
    pub(super) configz: Arc<Vec<u8>>,
    /// The authenticator and authorizer.
    pub(super) auth: AuthConfig,
    /// Until the `tls-reload` loop takes it.
    reloader: Option<Reloader>,
}

impl PreparedPort {
    /// The port's set-up, or `None` when it must not be served (a webhook without an
    /// API server, logged). `api`: the client of `--kubeconfig`, if given.
    pub(super) fn prepare(
        cfg: &KubeletConfig,
        api: Option<&Arc<ApiClient>>,
    ) -> Result<Option<PreparedPort>, StartError> {
        let webhook_authz = cfg.authorization_mode == AuthorizationMode::Webhook;
        let webhooks = match api {
            Some(client) if cfg.authentication_token_webhook || webhook_authz => {
                Some(Arc::new(Webhooks::new(
                    client.clone(),
                    CacheTtls {
                        token: cfg.authentication_token_webhook_cache_ttl,
                        authorized: cfg.authorization_webhook_cache_authorized_ttl,
                        unauthorized: cfg.authorization_webhook_cache_unauthorized_ttl,
                    },
                )))
            }
            _ => None,
        };
        let mut missing = Vec::new();
        if cfg.authentication_token_webhook && webhooks.is_none() {
            missing.push("the token webhook (--authentication-token-webhook, authentication.webhook.enabled)");
        }
        if webhook_authz && webhooks.is_none() {
            missing.push("authorization mode Webhook");
        }
        if !missing.is_empty() {
            log::error!(
                "{} needs the API server of --kubeconfig, and none is given: the \
                 authenticated port {}:{} is not served (upstream refuses to start: \"no \
                 client provided, cannot use webhook authentication\"); give --kubeconfig, \
                 or (a standalone node) set authentication.webhook.enabled: false, \
                 authorization.mode: AlwaysAllow and authentication.x509.clientCAFile \
                 (--authentication-token-webhook=false --authorization-mode=AlwaysAllow \
                 --client-ca-file), so that client certificates of that CA are let in",
                missing.join(" and "),
                cfg.address,
                cfg.port
            );
            return Ok(None);
        }
        let (cert, key) = wire::selfsigned::serving_pair(
            cfg.tls_cert_file.as_deref(),
            cfg.tls_private_key_file.as_deref(),
            &cfg.cert_dir(),
            &cfg.node_name,
            &base::netutil::node_ip(),
        )
        .map_err(StartError::Tls)?;
        let (config, reloader) = tls_reload::reloading_server_config(&tls::TlsSettings {
            cert_file: cert.clone(),
            key_file: key.clone(),
            client_ca_file: cfg.client_ca_file.clone(),
            min_version: cfg.tls_min_version,
            cipher_suites: cfg.tls_cipher_suites.clone(),
        })
        .map_err(StartError::Tls)?;
        let configz =
            kubelet::configz_json(cfg, &cert.display().to_string(), &key.display().to_string());
        let authorizer = match (cfg.authorization_mode, &webhooks) {
            (AuthorizationMode::Webhook, Some(w)) => Authorizer::Webhook(w.clone()),
            _ => Authorizer::AlwaysAllow,
        };
        if cfg.anonymous_auth
            && matches!(authorizer, Authorizer::AlwaysAllow)
            && !cfg.address.is_loopback()
        {
            // Upstream's flag defaults, which no upstream deployment runs with.
            log::warn!(
                "the authenticated port {}:{} lets anonymous requests do everything \
                 (--anonymous-auth with --authorization-mode=AlwaysAllow, the flag \
                 defaults): anyone who reaches it can run commands as root in every pod; \
                 use a config file (--config, as the systemd unit does) or \
                 --anonymous-auth=false",
                cfg.address,
                cfg.port
            );
        }
        let auth = AuthConfig {
            anonymous: cfg.anonymous_auth,
            token_webhook: webhooks.filter(|_| cfg.authentication_token_webhook),
            authorizer,
            node_name: cfg.node_name.clone(),
        };
        Ok(Some(PreparedPort {
            tls: config,
            configz: Arc::new(configz),
            auth,
            reloader: Some(reloader),
        }))
    }

    /// Starts the `tls-reload` loop, which swaps in changed certificate files.
    pub(super) fn start_reload(&mut self, loops: &Loops) -> Result<(), SpawnError> {
        let Some(mut reloader) = self.reloader.take() else {
            return Ok(());
        };
        loops.spawn_periodic(
            Periodic {
                name: "tls-reload".into(),
                period: tls_reload::RELOAD_PERIOD,
                wake: None,
            },
            move || reloader.tick(),
        )
    }
}
