//! A small Prometheus registry of our own: counters, gauges and histograms, with or
//! without labels, rendered in the text exposition format 0.0.4 (`# HELP`, `# TYPE`,
//! samples sorted by label values, histograms as cumulative `_bucket{le=…}` lines with
//! `+Inf`, `_sum` and `_count`). Upstream's component-base prints a stability marker at
//! the head of each kubelet metric's help (`[ALPHA] …`, `[STABLE] …`); raw Prometheus
//! collectors (the process collector) print none, and neither do rkubelet's own.
//!
//! Why our own: the Rust Prometheus clients either pull in an async runtime for their
//! push or HTTP parts, or are a large dependency for the few hundred lines needed here.
//!
//! It sits at the bottom of the module graph: the PLEG, the pod workers, the runtime
//! manager, the runtime wrapper and the servers record into it; it imports nothing of
//! theirs (only the loop registry and `lock` from [`crate::loops`], for the per-loop
//! figures). Every update takes one mutex for the length of a short scan of the
//! family's label sets (or one atomic add); nothing blocks under it. Label sets are
//! bounded by their callers: every label value comes from a fixed set (operation
//! names, method and path buckets, container kinds, states) or from this node's own
//! configuration (its name, its loop names), never from a request or a pod.

pub mod process;

use std::fmt::Write as _;
use std::sync::Mutex;

use crate::loops::lock;

/// The content type of the text format, as upstream's `/metrics` answers it.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upstream `prometheus.DefBuckets`: the buckets of every kubelet histogram that
/// names no others.
pub const DEF_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Upstream `ExponentialBuckets(start, factor, count)`: each bucket is the one before
/// it times `factor`, computed by repeated multiplication as Go does, so the `le`
/// values print identically.
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut v = Vec::with_capacity(count);
    let mut b = start;
    for _ in 0..count {
        v.push(b);
        b *= factor;
    }
    v
}

/// A metric's stability level, as component-base prints it in the help text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stability {
    /// `[ALPHA] ` before the help.
    Alpha,
    /// `[STABLE] ` before the help.
    Stable,
    /// No marker: raw Prometheus collectors and rkubelet's own figures.
    Raw,
}

/// A metric family's name, help and stability.
#[derive(Clone, Copy, Debug)]
pub struct Desc {
    /// Full name, e.g. `kubelet_running_pods`.
    pub name: &'static str,
    /// Help text (without the stability marker).
    pub help: &'static str,
    /// Stability level.
    pub stability: Stability,
}

impl Desc {
    /// An `[ALPHA]` kubelet metric.
    pub const fn alpha(name: &'static str, help: &'static str) -> Desc {
        Desc {
            name,
            help,
            stability: Stability::Alpha,
        }
    }

    /// A metric with no stability marker.
    pub const fn raw(name: &'static str, help: &'static str) -> Desc {
        Desc {
            name,
            help,
            stability: Stability::Raw,
        }
    }

    fn header(&self, out: &mut String, kind: &str) {
        let marker = match self.stability {
            Stability::Alpha => "[ALPHA] ",
            Stability::Stable => "[STABLE] ",
            Stability::Raw => "",
        };
        let _ = writeln!(
            out,
            "# HELP {} {marker}{}",
            self.name,
            escape_help(self.help)
        );
        let _ = writeln!(out, "# TYPE {} {kind}", self.name);
    }
}

/// One family that can be rendered: the registry sorts families by name, as
/// Prometheus's gatherer does.
pub trait Collector {
    /// The family's name.
    fn name(&self) -> &'static str;
    /// Appends the family (nothing when it has no samples) in the text format.
    fn render(&self, out: &mut String);
}

/// Renders `families` sorted by name.
pub fn render(families: &mut [&dyn Collector]) -> String {
    crate::sort::sort_by_key(families, |f| f.name());
    let mut out = String::with_capacity(16 * 1024);
    for f in families.iter() {
        f.render(&mut out);
    }
    out
}

/// The series of one family: label values and the value, in first-seen order (sorted
/// when rendered). A linear scan finds a series: a family has a few dozen at most, and
/// the scan allocates nothing, so an update holds the lock for well under a
/// microsecond.
#[derive(Debug)]
struct Series<V, const N: usize> {
    labels: [&'static str; N],
    items: Mutex<Vec<([String; N], V)>>,
}

impl<V: Clone, const N: usize> Series<V, N> {
    fn new(labels: [&'static str; N]) -> Self {
        Series {
            labels,
            items: Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` on the series of `values`, made with `make` if it is new.
    fn with<R>(
        &self,
        values: [&str; N],
        make: impl FnOnce() -> V,
        f: impl FnOnce(&mut V) -> R,
    ) -> R {
        let mut items = lock(&self.items);
        let i = match items
            .iter()
            .position(|(k, _)| k.iter().zip(values.iter()).all(|(a, b)| a == b))
        {
            Some(i) => i,
            None => {
                items.push((values.map(str::to_string), make()));
                items.len() - 1
            }
        };
        f(&mut items[i].1)
    }

    fn get(&self, values: [&str; N]) -> Option<V> {
        lock(&self.items)
            .iter()
            .find(|(k, _)| k.iter().zip(values.iter()).all(|(a, b)| a == b))
            .map(|(_, v)| v.clone())
    }

    /// A copy of every series, sorted by label values (the lock is released before any
    /// text is written).
    fn sorted(&self) -> Vec<([String; N], V)> {
        let mut v = lock(&self.items).clone();
        crate::sort::sort_by(&mut v, |a, b| a.0.cmp(&b.0));
        v
    }

    /// `{a="x",b="y"` without the closing brace, or "" when there are no labels.
    fn open_labels(&self, values: &[String; N]) -> String {
        let mut s = String::new();
        for (i, (name, value)) in self.labels.iter().zip(values.iter()).enumerate() {
            s.push(if i == 0 { '{' } else { ',' });
            let _ = write!(s, "{name}=\"{}\"", escape_label(value));
        }
        s
    }

    fn label_block(&self, values: &[String; N]) -> String {
        let s = self.open_labels(values);
        if s.is_empty() {
            s
        } else {
            s + "}"
        }
    }
}

/// A counter family with `N` labels (`N = 0`: a plain counter, shown at 0 from the
/// start, as Prometheus clients show theirs).
#[derive(Debug)]
pub struct CounterVec<const N: usize> {
    desc: Desc,
    series: Series<u64, N>,
}

/// A counter without labels.
pub type Counter = CounterVec<0>;

impl<const N: usize> CounterVec<N> {
    /// A new family.
    pub fn new(desc: Desc, labels: [&'static str; N]) -> Self {
        let c = CounterVec {
            desc,
            series: Series::new(labels),
        };
        if N == 0 {
            c.add([""; N], 0);
        }
        c
    }

    /// Adds one.
    pub fn inc(&self, values: [&str; N]) {
        self.add(values, 1);
    }

    /// Adds `n`.
    pub fn add(&self, values: [&str; N], n: u64) {
        self.series.with(values, || 0, |v| *v = v.saturating_add(n));
    }

    /// The current value (0 for a series never counted).
    pub fn get(&self, values: [&str; N]) -> u64 {
        self.series.get(values).unwrap_or(0)
    }
}

impl<const N: usize> Collector for CounterVec<N> {
    fn name(&self) -> &'static str {
        self.desc.name
    }

    fn render(&self, out: &mut String) {
        let all = self.series.sorted();
        if all.is_empty() {
            return;
        }
        self.desc.header(out, "counter");
        for (k, v) in &all {
            let _ = writeln!(out, "{}{} {v}", self.desc.name, self.series.label_block(k));
        }
    }
}

/// A gauge family with `N` labels (`N = 0`: a plain gauge, shown at 0 from the start).
#[derive(Debug)]
pub struct GaugeVec<const N: usize> {
    desc: Desc,
    series: Series<f64, N>,
}

/// A gauge without labels.
pub type Gauge = GaugeVec<0>;

impl<const N: usize> GaugeVec<N> {
    /// A new family.
    pub fn new(desc: Desc, labels: [&'static str; N]) -> Self {
        let g = GaugeVec {
            desc,
            series: Series::new(labels),
        };
        if N == 0 {
            g.set([""; N], 0.0);
        }
        g
    }

    /// Sets the value.
    pub fn set(&self, values: [&str; N], v: f64) {
        self.series.with(values, || 0.0, |x| *x = v);
    }

    /// Adds `d` (negative to subtract).
    pub fn add(&self, values: [&str; N], d: f64) {
        self.series.with(values, || 0.0, |x| *x += d);
    }

    /// The current value (0 for a series never set).
    pub fn get(&self, values: [&str; N]) -> f64 {
        self.series.get(values).unwrap_or(0.0)
    }
}

impl<const N: usize> Collector for GaugeVec<N> {
    fn name(&self) -> &'static str {
        self.desc.name
    }

    fn render(&self, out: &mut String) {
        let all = self.series.sorted();
        if all.is_empty() {
            return;
        }
        self.desc.header(out, "gauge");
        for (k, v) in &all {
            let _ = writeln!(
                out,
                "{}{} {}",
                self.desc.name,
                self.series.label_block(k),
                fmt_f64(*v)
            );
        }
    }
}

/// One histogram series: a count per bucket (not cumulative), the sum and the count,
/// updated together under the family's lock so a scrape never sees them disagree.
#[derive(Clone, Debug)]
struct HistState {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// A histogram family with `N` labels (`N = 0`: a plain histogram, shown with zero
/// counts from the start).
#[derive(Debug)]
pub struct HistogramVec<const N: usize> {
    desc: Desc,
    buckets: Vec<f64>,
    series: Series<HistState, N>,
}

/// A histogram without labels.
pub type Histogram = HistogramVec<0>;

impl<const N: usize> HistogramVec<N> {
    /// A new family with upper bounds `buckets` (ascending; `+Inf` is implied).
    pub fn new(desc: Desc, labels: [&'static str; N], buckets: &[f64]) -> Self {
        let h = HistogramVec {
            desc,
            buckets: buckets.to_vec(),
            series: Series::new(labels),
        };
        if N == 0 {
            h.series.with([""; N], || h.empty(), |_| ());
        }
        h
    }

    fn empty(&self) -> HistState {
        HistState {
            counts: vec![0; self.buckets.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one observation (a NaN counts, as in Prometheus clients, in `+Inf`
    /// only, and makes the sum NaN).
    pub fn observe(&self, values: [&str; N], v: f64) {
        let i = self.buckets.iter().position(|b| v <= *b);
        self.series.with(
            values,
            || self.empty(),
            |s| {
                if let Some(i) = i {
                    s.counts[i] += 1;
                }
                s.sum += v;
                s.count += 1;
            },
        );
    }

    /// Observations so far in a series.
    pub fn count(&self, values: [&str; N]) -> u64 {
        self.series.get(values).map_or(0, |s| s.count)
    }
}

impl<const N: usize> Collector for HistogramVec<N> {
    fn name(&self) -> &'static str {
        self.desc.name
    }

    fn render(&self, out: &mut String) {
        let all = self.series.sorted();
        if all.is_empty() {
            return;
        }
        self.desc.header(out, "histogram");
        let name = self.desc.name;
        for (k, s) in &all {
            let open = self.series.open_labels(k);
            let le_open = if open.is_empty() {
                "{".to_string()
            } else {
                open.clone() + ","
            };
            let mut cumulative = 0u64;
            for (b, n) in self.buckets.iter().zip(&s.counts) {
                cumulative += n;
                let _ = writeln!(
                    out,
                    "{name}_bucket{le_open}le=\"{}\"}} {cumulative}",
                    fmt_f64(*b)
                );
            }
            let _ = writeln!(out, "{name}_bucket{le_open}le=\"+Inf\"}} {}", s.count);
            let block = self.series.label_block(k);
            let _ = writeln!(out, "{name}_sum{block} {}", fmt_f64(s.sum));
            let _ = writeln!(out, "{name}_count{block} {}", s.count);
        }
    }
}

/// A float as the text format spells it: `NaN`, `+Inf`, `-Inf`, else the shortest
/// decimal that reads back as the same number.
pub fn fmt_f64(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

/// A label value escaped as the text format requires (backslash, double quote,
/// newline).
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Help text escaped as the text format requires (backslash, newline).
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::promtool_check;

    const C: Desc = Desc::alpha("test_things_total", "Things counted.");

    #[test]
    fn a_plain_counter_shows_zero_before_any_count() {
        let c = Counter::new(C, []);
        let mut out = String::new();
        c.render(&mut out);
        assert_eq!(
            out,
            "# HELP test_things_total [ALPHA] Things counted.\n\
             # TYPE test_things_total counter\n\
             test_things_total 0\n"
        );
        c.inc([]);
        c.add([], 2);
        assert_eq!(c.get([]), 3);
    }

    #[test]
    fn labelled_series_render_sorted_by_value_and_escaped() {
        let c = CounterVec::new(C, ["kind", "path"]);
        let mut out = String::new();
        c.render(&mut out);
        assert_eq!(out, "", "a labelled family with no series is left out");
        c.inc(["b", "x"]);
        c.inc(["a", "quote\"back\\slash\nnewline"]);
        c.inc(["b", "x"]);
        c.render(&mut out);
        assert_eq!(
            out,
            "# HELP test_things_total [ALPHA] Things counted.\n\
             # TYPE test_things_total counter\n\
             test_things_total{kind=\"a\",path=\"quote\\\"back\\\\slash\\nnewline\"} 1\n\
             test_things_total{kind=\"b\",path=\"x\"} 2\n"
        );
    }

    #[test]
    fn gauges_set_add_and_print_special_floats() {
        let g = GaugeVec::new(Desc::raw("test_level", "A level."), ["state"]);
        g.set(["up"], 2.5);
        g.add(["up"], -1.0);
        g.set(["nan"], f64::NAN);
        g.set(["inf"], f64::INFINITY);
        assert_eq!(g.get(["up"]), 1.5);
        let mut out = String::new();
        g.render(&mut out);
        assert_eq!(
            out,
            "# HELP test_level A level.\n\
             # TYPE test_level gauge\n\
             test_level{state=\"inf\"} +Inf\n\
             test_level{state=\"nan\"} NaN\n\
             test_level{state=\"up\"} 1.5\n"
        );
    }

    #[test]
    fn histograms_are_cumulative_with_inf_sum_and_count() {
        let h = HistogramVec::new(
            Desc::alpha("test_seconds", "Durations."),
            ["op"],
            &[0.1, 1.0],
        );
        // Exact binary fractions, so the sum prints exactly.
        for v in [0.0625, 0.5, 0.5, 4.0] {
            h.observe(["x"], v);
        }
        h.observe(["y"], 1.0);
        let mut out = String::new();
        h.render(&mut out);
        assert_eq!(
            out,
            "# HELP test_seconds [ALPHA] Durations.\n\
             # TYPE test_seconds histogram\n\
             test_seconds_bucket{op=\"x\",le=\"0.1\"} 1\n\
             test_seconds_bucket{op=\"x\",le=\"1\"} 3\n\
             test_seconds_bucket{op=\"x\",le=\"+Inf\"} 4\n\
             test_seconds_sum{op=\"x\"} 5.0625\n\
             test_seconds_count{op=\"x\"} 4\n\
             test_seconds_bucket{op=\"y\",le=\"0.1\"} 0\n\
             test_seconds_bucket{op=\"y\",le=\"1\"} 1\n\
             test_seconds_bucket{op=\"y\",le=\"+Inf\"} 1\n\
             test_seconds_sum{op=\"y\"} 1\n\
             test_seconds_count{op=\"y\"} 1\n"
        );
        assert_eq!(h.count(["x"]), 4);
    }

    #[test]
    fn an_unlabelled_histogram_shows_empty_buckets_from_the_start() {
        let h = Histogram::new(Desc::alpha("test_seconds", "Durations."), [], &[1.0]);
        let mut out = String::new();
        h.render(&mut out);
        assert!(out.contains("test_seconds_bucket{le=\"1\"} 0\n"), "{out}");
        assert!(
            out.contains("test_seconds_bucket{le=\"+Inf\"} 0\n"),
            "{out}"
        );
        assert!(
            out.contains("test_seconds_sum 0\ntest_seconds_count 0\n"),
            "{out}"
        );
    }

    #[test]
    fn exponential_buckets_print_as_upstream_documents_them() {
        let b = exponential_buckets(0.005, 2.5, 14);
        let printed: Vec<String> = b.iter().map(|v| fmt_f64(*v)).collect();
        assert_eq!(
            printed,
            [
                "0.005",
                "0.0125",
                "0.03125",
                "0.078125",
                "0.1953125",
                "0.48828125",
                "1.220703125",
                "3.0517578125",
                "7.62939453125",
                "19.073486328125",
                "47.6837158203125",
                "119.20928955078125",
                "298.0232238769531",
                "745.0580596923828",
            ]
        );
    }

    #[test]
    fn families_render_sorted_by_name_and_promtool_accepts_them() {
        let b = CounterVec::new(Desc::alpha("b_total", "B."), ["x"]);
        let a = Gauge::new(Desc::raw("a_value", "A \\ with\nnewline."), []);
        let h = Histogram::new(Desc::alpha("c_seconds", "C."), [], DEF_BUCKETS);
        b.inc(["1"]);
        h.observe([], 0.3);
        let text = render(&mut [&b, &h, &a]);
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(
            names,
            ["a_value gauge", "b_total counter", "c_seconds histogram"]
        );
        assert!(
            text.contains("# HELP a_value A \\\\ with\\nnewline.\n"),
            "{text}"
        );
        promtool_check(&text);
    }
}
