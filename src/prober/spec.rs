//! A container's probe as the prober runs it: the API `Probe` with upstream's defaults
//! applied, validated, and its named port resolved against the container's ports
//! (upstream `pkg/apis/core/v1/defaults.go` `SetDefaults_Probe`,
//! `pkg/apis/core/validation` `validateProbe`, `pkg/kubelet/prober/prober.go`
//! `extractPort`/`findPortByName`).
//!
//! Done once per container spec, not per probe run: the spec of a container instance
//! never changes (a changed spec is a new container).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};

use runtime::container::resolve_port;
use runtime::container::ProbeType;

/// Upstream default `periodSeconds`.
pub(crate) const DEFAULT_PERIOD_SECONDS: i32 = 10;
/// Upstream default `timeoutSeconds`.
pub(crate) const DEFAULT_TIMEOUT_SECONDS: i32 = 1;
/// Upstream default `successThreshold`.
pub(crate) const DEFAULT_SUCCESS_THRESHOLD: i32 = 1;
/// Upstream default `failureThreshold`.
pub(crate) const DEFAULT_FAILURE_THRESHOLD: i32 = 3;

/// How a probe checks its container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handler {
    /// Run a command in the container; exit 0 is success.
    Exec {
        /// The command (no shell).
        command: Vec<String>,
    },
    /// An HTTP GET; 200–399 is success.
    Http {
        /// `HTTP` or `HTTPS` (no certificate verification).
        https: bool,
        /// Host to connect to; None for the pod IP.
        host: Option<String>,
        /// Resolved port.
        port: u16,
        /// Path with an optional query, starting with `/`.
        path: String,
        /// `httpHeaders`, in order.
        headers: Vec<(String, String)>,
    },
    /// A TCP connect.
    Tcp {
        /// Host to connect to; None for the pod IP.
        host: Option<String>,
        /// Resolved port.
        port: u16,
    },
    /// `grpc.health.v1.Health/Check` on the pod IP, plaintext.
    Grpc {
        /// Port.
        port: u16,
        /// `service` ("" for the server as a whole).
        service: String,
    },
}

/// A probe with every default applied, ready to schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    /// What to run.
    pub handler: Handler,
    /// Wait this long after the container started before the first probe.
    pub initial_delay: Duration,
    /// Time between probes.
    pub period: Duration,
    /// A probe run longer than this fails.
    pub timeout: Duration,
    /// Consecutive successes to publish Success.
    pub success_threshold: u32,
    /// Consecutive failures to publish Failure.
    pub failure_threshold: u32,
    /// Probe-level grace period for the kill after a liveness/startup failure.
    pub termination_grace: Option<Duration>,
}

/// A probe that cannot be run, naming the field and the reason (upstream's
/// validation wording where it has one).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ProbeError {
    /// `livenessProbe.periodSeconds` and the like.
    pub field: String,
    /// Why it is refused.
    pub reason: String,
}

/// The probe of type `ty` of container `c`, if it has one.
pub(crate) fn probe_of(c: &Container, ty: ProbeType) -> Option<&Probe> {
    match ty {
        ProbeType::Liveness => c.liveness_probe.as_ref(),
        ProbeType::Readiness => c.readiness_probe.as_ref(),
        ProbeType::Startup => c.startup_probe.as_ref(),
    }
}

/// Defaults, validates and resolves one probe of a container.
pub fn resolve(p: &Probe, ty: ProbeType, c: &Container) -> Result<ProbeSpec, ProbeError> {
    let base = ty.field();
    let err = |field: &str, reason: String| ProbeError {
        field: if field.is_empty() {
            base.to_string()
        } else {
            format!("{base}.{field}")
        },
        reason,
    };
    // Upstream defaulting turns 0 (unset) into the default; negatives fail validation.
    let secs = |v: Option<i32>, default: i32, field: &str| -> Result<i32, ProbeError> {
        match v.unwrap_or(0) {
            0 => Ok(default),
            n if n < 0 => Err(err(
                field,
                format!("{n}: must be greater than or equal to 0"),
            )),
            n => Ok(n),
        }
    };
    let initial_delay = secs(p.initial_delay_seconds, 0, "initialDelaySeconds")?;
    let period = secs(p.period_seconds, DEFAULT_PERIOD_SECONDS, "periodSeconds")?;
    let timeout = secs(p.timeout_seconds, DEFAULT_TIMEOUT_SECONDS, "timeoutSeconds")?;
    let success = secs(
        p.success_threshold,
        DEFAULT_SUCCESS_THRESHOLD,
        "successThreshold",
    )?;
    let failure = secs(
        p.failure_threshold,
        DEFAULT_FAILURE_THRESHOLD,
        "failureThreshold",
    )?;
    if ty != ProbeType::Readiness && success != 1 {
        return Err(err("successThreshold", format!("{success}: must be 1")));
    }
    let termination_grace = match p.termination_grace_period_seconds {
        None => None,
        Some(n) if n <= 0 => {
            return Err(err(
                "terminationGracePeriodSeconds",
                format!("{n}: must be greater than 0"),
            ))
        }
        Some(n) => Some(base::time::secs(n)),
    };

    let mut handlers = Vec::new();
    if let Some(e) = &p.exec {
        let command = e.command.clone().unwrap_or_default();
        if command.is_empty() {
            return Err(err("exec.command", "required value".into()));
        }
        handlers.push(Handler::Exec { command });
    }
    if let Some(h) = &p.http_get {
        let https = match h.scheme.as_deref().unwrap_or("HTTP") {
            "HTTP" => false,
            "HTTPS" => true,
            other => {
                return Err(err(
                    "httpGet.scheme",
                    format!("{other:?}: supported values: \"HTTP\", \"HTTPS\""),
                ))
            }
        };
        let port = resolve_port(&h.port, c).map_err(|r| err("httpGet.port", r))?;
        let mut path = h.path.clone().unwrap_or_default();
        if !path.starts_with('/') {
            path.insert(0, '/');
        }
        let headers = h
            .http_headers
            .iter()
            .flatten()
            .map(|hh| (hh.name.clone(), hh.value.clone()))
            .collect();
        handlers.push(Handler::Http {
            https,
            host: h.host.clone().filter(|s| !s.is_empty()),
            port,
            path,
            headers,
        });
    }
    if let Some(t) = &p.tcp_socket {
        let port = resolve_port(&t.port, c).map_err(|r| err("tcpSocket.port", r))?;
        handlers.push(Handler::Tcp {
            host: t.host.clone().filter(|s| !s.is_empty()),
            port,
        });
    }
    if let Some(g) = &p.grpc {
        let port = u16::try_from(g.port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| {
                err(
                    "grpc.port",
                    format!("{}: must be between 1 and 65535", g.port),
                )
            })?;
        handlers.push(Handler::Grpc {
            port,
            service: g.service.clone().unwrap_or_default(),
        });
    }
    if handlers.len() > 1 {
        return Err(err("", "may not specify more than 1 handler type".into()));
    }
    let handler = handlers
        .pop()
        .ok_or_else(|| err("", "must specify a handler type".into()))?;
    let s = |n: i32| base::time::secs(i64::from(n));
    Ok(ProbeSpec {
        handler,
        initial_delay: s(initial_delay),
        period: s(period),
        timeout: s(timeout),
        success_threshold: success.unsigned_abs(),
        failure_threshold: failure.unsigned_abs(),
        termination_grace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerPort, ExecAction, GRPCAction, HTTPGetAction, TCPSocketAction,
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn ctr() -> Container {
        Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: 8080,
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    fn exec_probe() -> Probe {
        Probe {
            exec: Some(ExecAction {
                command: Some(vec!["true".into()]),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn unset_fields_get_upstream_defaults() {
        let s = resolve(&exec_probe(), ProbeType::Liveness, &ctr()).expect("valid");
        assert_eq!(s.initial_delay, Duration::ZERO);
        assert_eq!(s.period, Duration::from_secs(10));
        assert_eq!(s.timeout, Duration::from_secs(1));
        assert_eq!((s.success_threshold, s.failure_threshold), (1, 3));
        assert_eq!(s.termination_grace, None);
    }

    #[test]
    fn http_defaults_and_named_port() {
        let p = Probe {
            http_get: Some(HTTPGetAction {
                port: IntOrString::String("http".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = resolve(&p, ProbeType::Readiness, &ctr()).expect("valid");
        assert_eq!(
            s.handler,
            Handler::Http {
                https: false,
                host: None,
                port: 8080,
                path: "/".into(),
                headers: vec![]
            }
        );
    }

    #[test]
    fn invalid_probes_name_field_and_reason() {
        let with = |f: fn(&mut Probe)| {
            let mut p = exec_probe();
            f(&mut p);
            p
        };
        let cases: Vec<(Probe, ProbeType, &str)> = vec![
            (
                with(|p| p.period_seconds = Some(-1)),
                ProbeType::Readiness,
                "readinessProbe.periodSeconds: -1: must be greater than or equal to 0",
            ),
            (
                with(|p| p.success_threshold = Some(2)),
                ProbeType::Liveness,
                "livenessProbe.successThreshold: 2: must be 1",
            ),
            (
                with(|p| p.success_threshold = Some(2)),
                ProbeType::Startup,
                "startupProbe.successThreshold: 2: must be 1",
            ),
            (
                with(|p| p.termination_grace_period_seconds = Some(0)),
                ProbeType::Liveness,
                "livenessProbe.terminationGracePeriodSeconds: 0: must be greater than 0",
            ),
            (
                with(|p| {
                    p.tcp_socket = Some(TCPSocketAction {
                        port: IntOrString::Int(80),
                        host: None,
                    })
                }),
                ProbeType::Liveness,
                "livenessProbe: may not specify more than 1 handler type",
            ),
            (
                Probe::default(),
                ProbeType::Liveness,
                "livenessProbe: must specify a handler type",
            ),
            (
                Probe {
                    tcp_socket: Some(TCPSocketAction {
                        port: IntOrString::String("nope".into()),
                        host: None,
                    }),
                    ..Default::default()
                },
                ProbeType::Readiness,
                "readinessProbe.tcpSocket.port: \"nope\": no container port with this name",
            ),
            (
                Probe {
                    tcp_socket: Some(TCPSocketAction {
                        port: IntOrString::Int(70000),
                        host: None,
                    }),
                    ..Default::default()
                },
                ProbeType::Readiness,
                "readinessProbe.tcpSocket.port: 70000: must be between 1 and 65535, inclusive",
            ),
            (
                Probe {
                    grpc: Some(GRPCAction {
                        port: 0,
                        service: None,
                    }),
                    ..Default::default()
                },
                ProbeType::Readiness,
                "readinessProbe.grpc.port: 0: must be between 1 and 65535",
            ),
        ];
        for (p, ty, want) in cases {
            let e = resolve(&p, ty, &ctr()).expect_err(want);
            assert_eq!(e.to_string(), want);
        }
    }

    #[test]
    fn readiness_may_need_several_successes_and_numbers_as_strings_are_ports() {
        let p = Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("9000".into()),
                host: Some("10.0.0.1".into()),
            }),
            success_threshold: Some(3),
            termination_grace_period_seconds: Some(5),
            ..Default::default()
        };
        let s = resolve(&p, ProbeType::Readiness, &ctr()).expect("valid");
        assert_eq!(s.success_threshold, 3);
        assert_eq!(s.termination_grace, Some(Duration::from_secs(5)));
        assert_eq!(
            s.handler,
            Handler::Tcp {
                host: Some("10.0.0.1".into()),
                port: 9000
            }
        );
    }
}
