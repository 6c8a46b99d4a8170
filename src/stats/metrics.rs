//! `/metrics/resource` (upstream's `pkg/kubelet/metrics/collectors/resource_metrics.go`:
//! the node's, pods' and containers' CPU and working set from the summary) and
//! `/metrics/cadvisor` (the cAdvisor families the analyzer's figures support, with
//! cAdvisor's labels `container`, `id`, `image`, `name`, `namespace`, `pod`; not
//! cAdvisor's `container_fs_inodes_total`, a gauge whose name `promtool` refuses), rendered
//! from the latest [`Snapshot`] in the Prometheus text format 0.0.4, each sample with
//! its explicit timestamp (ms) as upstream's. Label values come from the pods running
//! on the node: the series are bounded by the pods and containers there.

use std::fmt::Write as _;
use std::time::SystemTime;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::analyzer::Snapshot;
use super::cgroupfs::MemoryStats as RawMem;
use super::summary::CgroupSample;
use super::types::InterfaceStats;
use base::metrics::{escape_label, fmt_f64};

/// One family being written: its header once, then samples.
struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
}

impl<'a> Family<'a> {
    fn new(out: &'a mut String, name: &'static str, help: &str, kind: &str) -> Family<'a> {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        Family { out, name }
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: f64, ts_ms: Option<i64>) {
        self.out.push_str(self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = write!(self.out, " {}", fmt_f64(value));
        if let Some(ts) = ts_ms {
            let _ = write!(self.out, " {ts}");
        }
        self.out.push('\n');
    }
}

fn ms(t: &Option<Time>) -> Option<i64> {
    t.as_ref().map(|t| t.0.as_millisecond())
}

fn sys_ms(t: Option<SystemTime>) -> Option<i64> {
    t.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok())
}

fn secs(t: &Option<Time>) -> Option<f64> {
    t.as_ref().map(|t| t.0.as_millisecond() as f64 / 1000.0)
}

/// `/metrics/resource`.
pub(crate) fn render_resource(s: &Snapshot) -> String {
    let mut out = String::with_capacity(8 * 1024);
    let sum = &s.summary;
    let containers = || {
        sum.pods.iter().flat_map(|p| {
            p.containers
                .iter()
                .map(move |c| (p.pod_ref.namespace.as_str(), p.pod_ref.name.as_str(), c))
        })
    };
    // Families in name order, as the Go registry writes them.
    {
        let mut f = Family::new(
            &mut out,
            "container_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
            "counter",
        );
        for (ns, pod, c) in containers() {
            if let Some(cpu) = &c.cpu {
                if let Some(v) = cpu.usage_core_nano_seconds {
                    let l = [
                        ("container", c.name.as_str()),
                        ("namespace", ns),
                        ("pod", pod),
                    ];
                    f.sample(&l, v as f64 / 1e9, ms(&cpu.time));
                }
            }
        }
    }
    {
        let mut f = Family::new(
            &mut out,
            "container_memory_working_set_bytes",
            "[STABLE] Current working set of the container in bytes",
            "gauge",
        );
        for (ns, pod, c) in containers() {
            if let Some(m) = &c.memory {
                if let Some(v) = m.working_set_bytes {
                    let l = [
                        ("container", c.name.as_str()),
                        ("namespace", ns),
                        ("pod", pod),
                    ];
                    f.sample(&l, v as f64, ms(&m.time));
                }
            }
        }
    }
    {
        let mut f = Family::new(
            &mut out,
            "container_start_time_seconds",
            "[STABLE] Start time of the container since unix epoch in seconds",
            "gauge",
        );
        for (ns, pod, c) in containers() {
            if let Some(v) = secs(&c.start_time) {
                let l = [
                    ("container", c.name.as_str()),
                    ("namespace", ns),
                    ("pod", pod),
                ];
                f.sample(&l, v, ms(&c.start_time));
            }
        }
    }
    {
        let mut f = Family::new(
            &mut out,
            "node_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
            "counter",
        );
        if let Some(cpu) = &sum.node.cpu {
            if let Some(v) = cpu.usage_core_nano_seconds {
                f.sample(&[], v as f64 / 1e9, ms(&cpu.time));
            }
        }
    }
    {
        let mut f = Family::new(
            &mut out,
            "node_memory_working_set_bytes",
            "[STABLE] Current working set of the node in bytes",
            "gauge",
        );
        if let Some(m) = &sum.node.memory {
            if let Some(v) = m.working_set_bytes {
                f.sample(&[], v as f64, ms(&m.time));
            }
        }
    }
    {
        let mut f = Family::new(
            &mut out,
            "pod_cpu_usage_seconds_total",
            "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
            "counter",
        );
        for p in &sum.pods {
            if let Some(cpu) = &p.cpu {
                if let Some(v) = cpu.usage_core_nano_seconds {
                    let l = [
                        ("namespace", p.pod_ref.namespace.as_str()),
                        ("pod", p.pod_ref.name.as_str()),
                    ];
                    f.sample(&l, v as f64 / 1e9, ms(&cpu.time));
                }
            }
        }
    }
    {
        let mut f = Family::new(
            &mut out,
            "pod_memory_working_set_bytes",
            "[STABLE] Current working set of the pod in bytes",
            "gauge",
        );
        for p in &sum.pods {
            if let Some(m) = &p.memory {
                if let Some(v) = m.working_set_bytes {
                    let l = [
                        ("namespace", p.pod_ref.namespace.as_str()),
                        ("pod", p.pod_ref.name.as_str()),
                    ];
                    f.sample(&l, v as f64, ms(&m.time));
                }
            }
        }
    }
    let failed = if s.error.is_some() || s.time.is_none() {
        1.0
    } else {
        0.0
    };
    Family::new(
        &mut out,
        "resource_scrape_error",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
    )
    .sample(&[], failed, None);
    Family::new(
        &mut out,
        "scrape_error",
        "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise",
        "gauge",
    )
    .sample(&[], failed, None);
    out
}

/// A memory family: name, help, the figure.
type MemoryFamily = (&'static str, &'static str, fn(&RawMem) -> f64);

/// A network family: name, help, the counter.
type NetworkFamily = (
    &'static str,
    &'static str,
    fn(&InterfaceStats) -> Option<u64>,
);

/// cAdvisor's labels of one cgroup.
fn cadvisor_labels(c: &CgroupSample) -> [(&'static str, &str); 6] {
    [
        ("container", c.container.as_str()),
        ("id", c.id.as_str()),
        ("image", c.image.as_str()),
        ("name", c.name.as_str()),
        ("namespace", c.namespace.as_str()),
        ("pod", c.pod.as_str()),
    ]
}

/// `/metrics/cadvisor`.
pub(crate) fn render_cadvisor(s: &Snapshot) -> String {
    let mut out = String::with_capacity(32 * 1024);
    let mut cgroups: Vec<&CgroupSample> = s.cgroups.iter().collect();
    base::sort::sort_by(&mut cgroups, |a, b| a.id.cmp(&b.id));
    {
        let mut f = Family::new(
            &mut out,
            "container_cpu_usage_seconds_total",
            "Cumulative cpu time consumed in seconds.",
            "counter",
        );
        for c in &cgroups {
            if let Some(ns) = c.cpu_ns {
                let [a, b, d, e, g, h] = cadvisor_labels(c);
                f.sample(
                    &[a, ("cpu", "total"), b, d, e, g, h],
                    ns as f64 / 1e9,
                    sys_ms(c.time),
                );
            }
        }
    }
    {
        let mut f = Family::new(
            &mut out,
            "container_fs_limit_bytes",
            "Number of bytes that can be consumed by the container on this filesystem.",
            "gauge",
        );
        for c in &cgroups {
            if let Some(fs) = c.rootfs.and_then(|r| r.fs) {
                let [a, b, d, e, g, h] = cadvisor_labels(c);
                f.sample(
                    &[a, ("device", ""), b, d, e, g, h],
                    fs.capacity_bytes as f64,
                    sys_ms(c.time),
                );
            }
        }
    }
    {
        let mut f = Family::new(
            &mut out,
            "container_fs_usage_bytes",
            "Number of bytes that are consumed by the container on this filesystem.",
            "gauge",
        );
        for c in &cgroups {
            if let Some(r) = c.rootfs {
                let [a, b, d, e, g, h] = cadvisor_labels(c);
                f.sample(
                    &[a, ("device", ""), b, d, e, g, h],
                    r.used_bytes as f64,
                    sys_ms(c.time),
                );
            }
        }
    }
    let memory: [MemoryFamily; 3] = [
        (
            "container_memory_rss",
            "Size of RSS in bytes.",
            |m| m.rss_bytes as f64,
        ),
        (
            "container_memory_usage_bytes",
            "Current memory usage in bytes, including all memory regardless of when it was accessed",
            |m| m.usage_bytes as f64,
        ),
        (
            "container_memory_working_set_bytes",
            "Current working set in bytes.",
            |m| m.working_set_bytes as f64,
        ),
    ];
    {
        let mut f = Family::new(
            &mut out,
            "container_memory_failures_total",
            "Cumulative count of memory allocation failures.",
            "counter",
        );
        for c in &cgroups {
            if let Some(m) = &c.memory {
                for (kind, v) in [
                    ("pgfault", m.page_faults),
                    ("pgmajfault", m.major_page_faults),
                ] {
                    let [a, b, d, e, g, h] = cadvisor_labels(c);
                    f.sample(
                        &[
                            a,
                            ("failure_type", kind),
                            b,
                            d,
                            e,
                            g,
                            h,
                            ("scope", "container"),
                        ],
                        v as f64,
                        sys_ms(c.time),
                    );
                }
            }
        }
    }
    for (name, help, get) in memory {
        let mut f = Family::new(&mut out, name, help, "gauge");
        for c in &cgroups {
            if let Some(m) = &c.memory {
                f.sample(&cadvisor_labels(c), get(m), sys_ms(c.time));
            }
        }
    }
    let network: [NetworkFamily; 4] = [
        (
            "container_network_receive_bytes_total",
            "Cumulative count of bytes received",
            |i| i.rx_bytes,
        ),
        (
            "container_network_receive_errors_total",
            "Cumulative count of errors encountered while receiving",
            |i| i.rx_errors,
        ),
        (
            "container_network_transmit_bytes_total",
            "Cumulative count of bytes transmitted",
            |i| i.tx_bytes,
        ),
        (
            "container_network_transmit_errors_total",
            "Cumulative count of errors encountered while transmitting",
            |i| i.tx_errors,
        ),
    ];
    for (name, help, get) in network {
        let mut f = Family::new(&mut out, name, help, "counter");
        for c in &cgroups {
            for i in &c.network {
                if let Some(v) = get(i) {
                    let [a, b, d, e, g, h] = cadvisor_labels(c);
                    f.sample(
                        &[a, b, d, ("interface", i.name.as_str()), e, g, h],
                        v as f64,
                        sys_ms(c.time),
                    );
                }
            }
        }
    }
    {
        let mut f = Family::new(
            &mut out,
            "container_spec_memory_limit_bytes",
            "Memory limit for the container.",
            "gauge",
        );
        for c in &cgroups {
            if let Some(m) = &c.memory {
                let limit = m.limit_bytes.unwrap_or(0) as f64;
                f.sample(&cadvisor_labels(c), limit, sys_ms(c.time));
            }
        }
    }
    {
        let mut f = Family::new(
            &mut out,
            "container_start_time_seconds",
            "Start time of the container since unix epoch in seconds.",
            "gauge",
        );
        for c in &cgroups {
            if let Some(t) = c
                .start_time
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            {
                f.sample(&cadvisor_labels(c), t.as_secs_f64(), sys_ms(c.time));
            }
        }
    }
    {
        let mut f = Family::new(
            &mut out,
            "machine_memory_bytes",
            "Amount of memory installed on the machine.",
            "gauge",
        );
        if let Some(v) = s.machine_memory_bytes {
            f.sample(&[], v as f64, None);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::types::{
        ContainerStats, CpuStats, MemoryStats, PodReference, PodStats, Summary,
    };
    use base::time::k8s_time;

    fn snapshot() -> Snapshot {
        let t = Some(k8s_time(
            SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000),
        ));
        let mut s = Snapshot {
            time: Some(SystemTime::now()),
            ..Snapshot::default()
        };
        s.summary = Summary {
            pods: vec![PodStats {
                pod_ref: PodReference {
                    name: "web".into(),
                    namespace: "default".into(),
                    uid: "u".into(),
                },
                cpu: Some(CpuStats {
                    time: t.clone(),
                    usage_core_nano_seconds: Some(2_500_000_000),
                    ..CpuStats::default()
                }),
                containers: vec![ContainerStats {
                    name: "app \"x\"".into(),
                    start_time: t.clone(),
                    memory: Some(MemoryStats {
                        time: t.clone(),
                        working_set_bytes: Some(4096),
                        ..MemoryStats::default()
                    }),
                    ..ContainerStats::default()
                }],
                ..PodStats::default()
            }],
            ..Summary::default()
        };
        s.cgroups = vec![CgroupSample {
            id: "/docker/abc".into(),
            name: "k8s_POD_web".into(),
            pod: "web".into(),
            namespace: "default".into(),
            container: "POD".into(),
            cpu_ns: Some(1_000_000_000),
            memory: Some(RawMem {
                usage_bytes: 10,
                working_set_bytes: 8,
                ..RawMem::default()
            }),
            network: vec![InterfaceStats {
                name: "eth0".into(),
                rx_bytes: Some(5),
                ..InterfaceStats::default()
            }],
            time: Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(2)),
            ..CgroupSample::default()
        }];
        s
    }

    #[test]
    fn resource_metrics_have_upstreams_names_labels_and_timestamps() {
        let text = render_resource(&snapshot());
        assert!(text.contains(
            "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 2.5 1000000\n"
        ));
        assert!(text.contains(
            "container_memory_working_set_bytes{container=\"app \\\"x\\\"\",namespace=\"default\",pod=\"web\"} 4096 1000000\n"
        ));
        assert!(text.contains("container_start_time_seconds{container=\"app \\\"x\\\"\",namespace=\"default\",pod=\"web\"} 1000 1000000\n"));
        assert!(text.contains("resource_scrape_error 0\n"));
        assert!(text.contains("# HELP node_cpu_usage_seconds_total [STABLE] "));
        let failed = render_resource(&Snapshot::default());
        assert!(failed.contains("scrape_error 1\n"));
    }

    #[test]
    fn cadvisor_metrics_carry_cadvisors_labels() {
        let text = render_cadvisor(&snapshot());
        assert!(text.contains("container_cpu_usage_seconds_total{container=\"POD\",cpu=\"total\",id=\"/docker/abc\",image=\"\",name=\"k8s_POD_web\",namespace=\"default\",pod=\"web\"} 1 2000\n"), "{text}");
        assert!(text.contains("container_network_receive_bytes_total{container=\"POD\",id=\"/docker/abc\",image=\"\",interface=\"eth0\",name=\"k8s_POD_web\",namespace=\"default\",pod=\"web\"} 5 2000\n"), "{text}");
        assert!(text.contains("container_memory_working_set_bytes{container=\"POD\",id=\"/docker/abc\",image=\"\",name=\"k8s_POD_web\",namespace=\"default\",pod=\"web\"} 8 2000\n"));
        assert!(!text.contains("container_network_receive_errors_total{"));
    }
}
