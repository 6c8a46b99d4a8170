//! Probe metrics in the Prometheus text format: upstream's `prober_probe_total`
//! (`pkg/kubelet/prober/prober_manager.go` `ProberResults`, served at `/metrics/probes`)
//! and rkubelet's own `rkubelet_prober_lateness_seconds`, how late probes start against
//! their due time — the figure that tells whether one `prober` thread and a small pool
//! keep up.
//!
//! Rendering is a pure function of the counters, so it is unit-tested (and checked by
//! `promtool`, which the tests require).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use base::loops::lock;
use runtime::container::{ProbeResult, ProbeType};

/// Lateness quantiles are computed over this many recent probe runs: enough for a
/// stable p99 at 200 probes/s over 20 s, small enough (32 KiB) for a small board.
pub(crate) const LATENESS_WINDOW: usize = 4096;

/// Which pool a probe run went through: exec probes (Docker exec, slow, their own
/// threads) and network probes (HTTP, TCP) are measured apart, since one saturating
/// must not hide the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lane {
    /// `exec` probes.
    Exec,
    /// `httpGet`, `tcpSocket`, `grpc` probes.
    Network,
}

impl Lane {
    /// The `kind` label value.
    pub fn label(self) -> &'static str {
        match self {
            Lane::Exec => "exec",
            Lane::Network => "network",
        }
    }
}

/// The quantiles the summary shows.
const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

/// The labels of one `prober_probe_total` series (upstream's set).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Series {
    probe_type: ProbeType,
    result: ProbeResult,
    container: String,
    pod: String,
    namespace: String,
    pod_uid: String,
}

/// Which container a probe result belongs to, for the labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeLabels {
    /// Container name.
    pub container: String,
    /// Pod name.
    pub pod: String,
    /// Namespace.
    pub namespace: String,
    /// Pod UID.
    pub pod_uid: String,
}

#[derive(Debug, Default)]
struct Lateness {
    window: Vec<f64>,
    next: usize,
    count: u64,
    sum: f64,
}

/// The probe counters and the lateness window. Written by the probe threads, read by
/// whoever renders them. Two small locks.
#[derive(Debug, Default)]
pub struct ProbeMetrics {
    totals: Mutex<BTreeMap<Series, u64>>,
    lateness: Mutex<BTreeMap<Lane, Lateness>>,
}

impl ProbeMetrics {
    /// Counts one probe run.
    pub fn count(&self, ty: ProbeType, r: ProbeResult, l: &ProbeLabels) {
        let key = Series {
            probe_type: ty,
            result: r,
            container: l.container.clone(),
            pod: l.pod.clone(),
            namespace: l.namespace.clone(),
            pod_uid: l.pod_uid.clone(),
        };
        *lock(&self.totals).entry(key).or_insert(0) += 1;
    }

    /// Drops the series of a probe that no longer exists (upstream deletes them when
    /// its worker stops, so a removed pod does not linger in the output).
    pub fn forget(&self, ty: ProbeType, l: &ProbeLabels) {
        lock(&self.totals).retain(|s, _| {
            !(s.probe_type == ty && s.pod_uid == l.pod_uid && s.container == l.container)
        });
    }

    /// Records how late a probe run of `lane` started.
    pub fn observe_lateness(&self, lane: Lane, late: Duration) {
        let v = late.as_secs_f64();
        let mut all = lock(&self.lateness);
        let l = all.entry(lane).or_default();
        if l.window.len() < LATENESS_WINDOW {
            l.window.push(v);
        } else {
            let i = l.next;
            l.window[i] = v;
        }
        l.next = (l.next + 1) % LATENESS_WINDOW;
        l.count += 1;
        l.sum += v;
    }

    /// The lateness quantile `q` (0..=1) of `lane` over its window, if any run was
    /// recorded.
    pub fn lateness_quantile(&self, lane: Lane, q: f64) -> Option<Duration> {
        let mut w = lock(&self.lateness)
            .get(&lane)
            .map(|l| l.window.clone())
            .unwrap_or_default();
        quantile(&mut w, q).map(Duration::from_secs_f64)
    }

    /// Every metric in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let totals = lock(&self.totals).clone();
        let lanes: Vec<(Lane, Vec<f64>, u64, f64)> = {
            let all = lock(&self.lateness);
            [Lane::Exec, Lane::Network]
                .into_iter()
                .map(|lane| {
                    let l = all.get(&lane);
                    (
                        lane,
                        l.map(|l| l.window.clone()).unwrap_or_default(),
                        l.map_or(0, |l| l.count),
                        l.map_or(0.0, |l| l.sum),
                    )
                })
                .collect()
        };
        render(&totals, lanes)
    }
}

fn quantile(w: &mut [f64], q: f64) -> Option<f64> {
    if w.is_empty() {
        return None;
    }
    base::sort::sort_by(w, f64::total_cmp);
    // Nearest rank.
    let rank = (q * w.len() as f64).ceil() as usize;
    Some(w[rank.clamp(1, w.len()) - 1])
}

/// Escapes a label value as the text format requires.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn render(totals: &BTreeMap<Series, u64>, lanes: Vec<(Lane, Vec<f64>, u64, f64)>) -> String {
    let mut out = String::new();
    out.push_str(
        "# HELP prober_probe_total [ALPHA] Cumulative number of a liveness, readiness or startup probe for a container by result.\n",
    );
    out.push_str("# TYPE prober_probe_total counter\n");
    for (s, n) in totals {
        let _ = writeln!(
            out,
            "prober_probe_total{{container=\"{}\",namespace=\"{}\",pod=\"{}\",pod_uid=\"{}\",probe_type=\"{}\",result=\"{}\"}} {n}",
            escape(&s.container),
            escape(&s.namespace),
            escape(&s.pod),
            escape(&s.pod_uid),
            s.probe_type.metric_label(),
            s.result.metric_label(),
        );
    }
    out.push_str(
        "# HELP rkubelet_prober_lateness_seconds Delay from a probe's due time to the start of its run, by kind (quantiles over the last 4096 runs).\n",
    );
    out.push_str("# TYPE rkubelet_prober_lateness_seconds summary\n");
    for (lane, mut window, count, sum) in lanes {
        let kind = lane.label();
        for q in QUANTILES {
            let v = quantile(&mut window, q).unwrap_or(f64::NAN);
            let _ = writeln!(
                out,
                "rkubelet_prober_lateness_seconds{{kind=\"{kind}\",quantile=\"{q}\"}} {}",
                fmt_float(v)
            );
        }
        let _ = writeln!(
            out,
            "rkubelet_prober_lateness_seconds_sum{{kind=\"{kind}\"}} {}",
            fmt_float(sum)
        );
        let _ = writeln!(
            out,
            "rkubelet_prober_lateness_seconds_count{{kind=\"{kind}\"}} {count}"
        );
    }
    out
}

/// A float as the text format spells it (`NaN`, plain decimals otherwise).
fn fmt_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(c: &str) -> ProbeLabels {
        ProbeLabels {
            container: c.into(),
            pod: "web-node1".into(),
            namespace: "default".into(),
            pod_uid: "u1".into(),
        }
    }

    #[test]
    fn renders_counters_and_lateness_in_text_format() {
        let m = ProbeMetrics::default();
        m.count(ProbeType::Liveness, ProbeResult::Success, &labels("a"));
        m.count(ProbeType::Liveness, ProbeResult::Success, &labels("a"));
        m.count(ProbeType::Readiness, ProbeResult::Failure, &labels("b\"x"));
        // Multiples of 1/128 s: exact in binary, so the sum prints exactly.
        for k in 1..=100 {
            m.observe_lateness(Lane::Network, Duration::from_secs_f64(f64::from(k) / 128.0));
        }
        let text = m.render();
        let want = "\
# HELP prober_probe_total [ALPHA] Cumulative number of a liveness, readiness or startup probe for a container by result.
# TYPE prober_probe_total counter
prober_probe_total{container=\"a\",namespace=\"default\",pod=\"web-node1\",pod_uid=\"u1\",probe_type=\"Liveness\",result=\"successful\"} 2
prober_probe_total{container=\"b\\\"x\",namespace=\"default\",pod=\"web-node1\",pod_uid=\"u1\",probe_type=\"Readiness\",result=\"failed\"} 1
# HELP rkubelet_prober_lateness_seconds Delay from a probe's due time to the start of its run, by kind (quantiles over the last 4096 runs).
# TYPE rkubelet_prober_lateness_seconds summary
rkubelet_prober_lateness_seconds{kind=\"exec\",quantile=\"0.5\"} NaN
rkubelet_prober_lateness_seconds{kind=\"exec\",quantile=\"0.9\"} NaN
rkubelet_prober_lateness_seconds{kind=\"exec\",quantile=\"0.99\"} NaN
rkubelet_prober_lateness_seconds_sum{kind=\"exec\"} 0
rkubelet_prober_lateness_seconds_count{kind=\"exec\"} 0
rkubelet_prober_lateness_seconds{kind=\"network\",quantile=\"0.5\"} 0.390625
rkubelet_prober_lateness_seconds{kind=\"network\",quantile=\"0.9\"} 0.703125
rkubelet_prober_lateness_seconds{kind=\"network\",quantile=\"0.99\"} 0.7734375
rkubelet_prober_lateness_seconds_sum{kind=\"network\"} 39.453125
rkubelet_prober_lateness_seconds_count{kind=\"network\"} 100
";
        assert_eq!(text, want);
        m.forget(ProbeType::Liveness, &labels("a"));
        assert!(!m.render().contains("container=\"a\""));
        assert_eq!(
            m.lateness_quantile(Lane::Network, 0.99),
            Some(Duration::from_secs_f64(0.7734375))
        );
    }

    #[test]
    fn empty_lateness_is_nan_and_window_is_bounded() {
        let m = ProbeMetrics::default();
        assert!(m.render().contains("quantile=\"0.5\"} NaN"));
        for _ in 0..LATENESS_WINDOW + 10 {
            m.observe_lateness(Lane::Exec, Duration::from_millis(1));
        }
        assert_eq!(lock(&m.lateness)[&Lane::Exec].window.len(), LATENESS_WINDOW);
        assert!(m
            .render()
            .contains(&format!("_count{{kind=\"exec\"}} {}", LATENESS_WINDOW + 10)));
    }

    /// `promtool check metrics` accepts the output. A missing promtool fails the test
    /// (a check that passes silently checks nothing): .ci/run installs it, a developer
    /// runs `apt-get install -y prometheus`.
    #[test]
    fn promtool_accepts_the_rendering() {
        let out = match std::process::Command::new("promtool")
            .arg("--version")
            .output()
        {
            Ok(out) => out,
            Err(e) => panic!(
                "promtool cannot be run ({e}): install it with `apt-get install -y prometheus` \
                 (.ci/run does)"
            ),
        };
        assert!(out.status.success(), "promtool --version failed: {out:?}");
        let m = ProbeMetrics::default();
        m.count(ProbeType::Startup, ProbeResult::Unknown, &labels("a"));
        m.observe_lateness(Lane::Exec, Duration::from_millis(3));
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn promtool");
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(m.render().as_bytes())
            .expect("write");
        let out = child.wait_with_output().expect("promtool");
        assert!(
            out.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
