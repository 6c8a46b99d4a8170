//! The pod sources the kubelet is configured with: their settings checked and their
//! files read before anything starts ([`PreparedSources::prepare`]), then each one
//! started on its own loop and registered with the merge ([`PreparedSources::start`]).

use std::sync::Arc;

use crate::config::KubeletConfig;
use crate::podconfig::{Source, SourceUpdate};
use base::loops::Loops;

use super::StartError;

/// The sources beyond the directory, with their settings checked and their files
/// read, ready to start.
pub(super) struct PreparedSources {
    etcd: Option<crate::podconfig::etcd::EtcdConfig>,
    api: Option<Arc<apiclient::ApiClient>>,
    /// TLS bootstrap and/or rotation of the API client's certificate, to start.
    cert_manager: Option<crate::certificate::ClientCertManager>,
}

impl PreparedSources {
    pub(super) fn prepare(cfg: &KubeletConfig) -> Result<PreparedSources, StartError> {
        let boxed = |e: Box<dyn std::error::Error + Send + Sync>| StartError::Source(e);
        let (api, cert_manager) = match &cfg.kubeconfig {
            Some(path) => {
                let cert_dir = cfg.cert_dir();
                let p = crate::certificate::prepare(&crate::certificate::Settings {
                    kubeconfig: path,
                    bootstrap_kubeconfig: cfg.bootstrap_kubeconfig.as_deref(),
                    cert_dir: &cert_dir,
                    node_name: &cfg.node_name,
                    rotate: cfg.rotate_certificates,
                })
                .map_err(|e| boxed(Box::new(e)))?;
                (Some(p.client), p.manager)
            }
            None if cfg.bootstrap_kubeconfig.is_some() => {
                return Err(boxed(Box::new(crate::certificate::CertError::NoKubeconfig)))
            }
            None => (None, None),
        };
        let mut prepared = PreparedSources {
            etcd: None,
            api,
            cert_manager,
        };
        if !cfg.etcd_servers.is_empty() {
            let read = |flag: &str,
                        p: &Option<std::path::PathBuf>|
             -> Result<Option<Vec<u8>>, StartError> {
                p.as_ref()
                    .map(|p| {
                        std::fs::read(p).map_err(|e| {
                            boxed(format!("{flag} {}: cannot read it: {e}", p.display()).into())
                        })
                    })
                    .transpose()
            };
            let tls = base::httpclient::servers::TlsSettings {
                ca_pem: read("--etcd-cafile", &cfg.etcd_cafile)?,
                cert_pem: read("--etcd-certfile", &cfg.etcd_certfile)?,
                key_pem: read("--etcd-keyfile", &cfg.etcd_keyfile)?,
                insecure: false,
            };
            let etcd = crate::podconfig::etcd::EtcdConfig {
                servers: cfg.etcd_servers.clone(),
                prefix: cfg.etcd_prefix.clone(),
                tls,
            };
            etcd.tls_config()
                .map_err(|r| boxed(format!("etcd TLS files: {r}").into()))?;
            prepared.etcd = Some(etcd);
        }
        Ok(prepared)
    }

    /// The client of `--kubeconfig`'s API server, if one is given (the kubelet port's
    /// webhooks ask it too).
    pub(super) fn api(&self) -> Option<&Arc<apiclient::ApiClient>> {
        self.api.as_ref()
    }

    /// The `client-cert` thread's work (TLS bootstrap, rotation), if there is any.
    pub(super) fn take_cert_manager(&mut self) -> Option<crate::certificate::ClientCertManager> {
        self.cert_manager.take()
    }

    /// Starts every configured source; returns them, for the merge to wait for.
    /// `pushed`: the server source is open (it has no thread; it sent its stored set
    /// already).
    pub(super) fn start(
        self,
        loops: &Loops,
        cfg: &KubeletConfig,
        tx: &crossbeam_channel::Sender<SourceUpdate>,
        pushed: bool,
    ) -> Result<Vec<Source>, StartError> {
        let mut sources = Vec::new();
        if let Some(path) = &cfg.static_pod_path {
            crate::podconfig::file::start(
                loops,
                path.clone(),
                cfg.node_name.clone(),
                cfg.file_check_frequency,
                tx.clone(),
            )?;
            sources.push(Source::File);
        }
        if let Some(url) = &cfg.manifest_url {
            crate::podconfig::http::start(
                loops,
                url.clone(),
                cfg.manifest_url_headers.clone(),
                cfg.node_name.clone(),
                cfg.http_check_frequency,
                tx.clone(),
            )?;
            sources.push(Source::Http);
        }
        if let Some(etcd_cfg) = self.etcd {
            let etcd = crate::podconfig::etcd::EtcdSource::new(
                etcd_cfg,
                cfg.node_name.clone(),
                tx.clone(),
            )
            .map_err(|e| StartError::Source(Box::new(e)))?;
            crate::podconfig::etcd::start(loops, etcd)?;
            sources.push(Source::Etcd);
        }
        match self.api {
            Some(client) => {
                let mut source = crate::podconfig::apiserver::ApiSource::new(
                    client,
                    cfg.node_name.clone(),
                    tx.clone(),
                );
                if cfg.checkpoint_api_pods {
                    source = source.with_checkpoints(&cfg.root_dir);
                }
                crate::podconfig::apiserver::start(loops, source)?;
                sources.push(Source::Api);
            }
            None => log::info!("Kubelet is running in standalone mode, will skip API server sync"),
        }
        if pushed {
            sources.push(Source::Server);
        }
        log::info!(
            "pod sources: {}",
            sources
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        Ok(sources)
    }
}
