//! Eviction signals and thresholds, and their parsing from the flags (upstream
//! `pkg/kubelet/eviction/api/types.go` and `ParseThresholdConfig` in `helpers.go`):
//! `--eviction-hard` (upstream's Linux defaults, replaced wholesale when set),
//! `--eviction-soft` with `--eviction-soft-grace-period` (required per soft signal),
//! and `--eviction-minimum-reclaim`. Thresholds are `<` only; a zero threshold is
//! dropped, as upstream's `parseThresholdStatement` drops it.

use std::fmt;
use std::time::Duration;

/// An eviction signal (upstream `evictionapi.Signal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Signal {
    /// Node memory capacity − the root cgroup's working set.
    MemoryAvailable,
    /// Free bytes of the filesystem of the kubelet's root directory.
    NodeFsAvailable,
    /// Free inodes of that filesystem.
    NodeFsInodesFree,
    /// Free bytes of the runtime's image filesystem (Docker's root directory).
    ImageFsAvailable,
    /// Free inodes of that filesystem.
    ImageFsInodesFree,
    /// `pid_max` − the processes (threads) running.
    PidAvailable,
    /// The pods' allocatable memory − the `kubepods` cgroup's working set.
    AllocatableMemoryAvailable,
    /// Free bytes of the filesystem of the containers' writable layers (Docker keeps
    /// them on its root directory, beside the images). Its thresholds are derived, as
    /// upstream's `UpdateContainerFsThresholds`: [`derive_container_fs_thresholds`].
    ContainerFsAvailable,
    /// Free inodes of that filesystem.
    ContainerFsInodesFree,
}

impl Signal {
    /// Every signal, in upstream's spelling order.
    pub(crate) const ALL: [Signal; 9] = [
        Signal::MemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::ContainerFsAvailable,
        Signal::ContainerFsInodesFree,
    ];

    /// Upstream's name (`memory.available`), the `eviction_signal` label.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::ContainerFsAvailable => "containerfs.available",
            Signal::ContainerFsInodesFree => "containerfs.inodesFree",
        }
    }

    /// The signal named `name`.
    pub(crate) fn parse(name: &str) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The resource it starves (upstream `signalToResource`): the word of the
    /// eviction message and of `EvictionThresholdMet`.
    pub(crate) fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable | Signal::ContainerFsAvailable => {
                "ephemeral-storage"
            }
            Signal::NodeFsInodesFree
            | Signal::ImageFsInodesFree
            | Signal::ContainerFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }

    /// The node condition it raises (upstream `signalToNodeCondition`).
    pub(crate) fn condition(self) -> Condition {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => {
                Condition::MemoryPressure
            }
            Signal::PidAvailable => Condition::PidPressure,
            _ => Condition::DiskPressure,
        }
    }

    /// Whether quantities of it are bytes (binary SI) rather than counts (decimal SI).
    pub(crate) fn is_bytes(self) -> bool {
        matches!(
            self,
            Signal::MemoryAvailable
                | Signal::AllocatableMemoryAvailable
                | Signal::NodeFsAvailable
                | Signal::ImageFsAvailable
                | Signal::ContainerFsAvailable
        )
    }

    /// A memory signal (acted on first, ranked by working set).
    pub(crate) fn is_memory(self) -> bool {
        matches!(
            self,
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable
        )
    }

    /// A filesystem signal (node-level reclaim by container and image GC first).
    pub(crate) fn is_disk(self) -> bool {
        self.condition() == Condition::DiskPressure
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A node pressure condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(clippy::enum_variant_names)] // the Node condition types' names
pub(crate) enum Condition {
    /// `MemoryPressure`.
    MemoryPressure,
    /// `DiskPressure`.
    DiskPressure,
    /// `PIDPressure`.
    PidPressure,
}

impl Condition {
    /// The node condition's type.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Condition::MemoryPressure => "MemoryPressure",
            Condition::DiskPressure => "DiskPressure",
            Condition::PidPressure => "PIDPressure",
        }
    }
}

/// A threshold's value: an absolute quantity (bytes or a count) or a share of capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value {
    /// Bytes, or inodes / pids.
    Quantity(i128),
    /// 0 < p ≤ 1 of the capacity.
    Percentage(f64),
}

impl Value {
    /// The amount for a capacity (upstream `GetThresholdQuantity`: a percentage of the
    /// capacity, truncated).
    pub(crate) fn amount(self, capacity: i128) -> i128 {
        match self {
            Value::Quantity(q) => q,
            Value::Percentage(p) => (capacity as f64 * p) as i128,
        }
    }
}

/// One threshold (upstream `evictionapi.Threshold`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Threshold {
    /// What is measured.
    pub signal: Signal,
    /// Met when the signal's available amount is below this.
    pub value: Value,
    /// Zero for a hard threshold; a soft one's grace period.
    pub grace_period: Duration,
    /// Extra to reclaim beyond the threshold once met.
    pub min_reclaim: Option<Value>,
}

impl Threshold {
    /// A hard threshold (no grace period), upstream `isHardEvictionThreshold`.
    pub(crate) fn is_hard(&self) -> bool {
        self.grace_period.is_zero()
    }
}

/// Upstream's Linux default `--eviction-hard` (`DefaultEvictionHard`, without the
/// newest `imagefs.inodesFree`, which this kubelet's image filesystem measures the
/// same as the others when given).
pub(crate) const DEFAULT_EVICTION_HARD: &str =
    "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%";

/// Why a threshold setting was refused (upstream's words).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ThresholdError(pub String);

/// Parses `signal<value` statements separated by commas (`--eviction-hard`,
/// `--eviction-soft`); zero thresholds are dropped.
pub(crate) fn parse_statements(v: &str) -> Result<Vec<(Signal, Value)>, ThresholdError> {
    let mut out: Vec<(Signal, Value)> = Vec::new();
    for stmt in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((name, value)) = stmt.split_once('<') else {
            return Err(ThresholdError(format!(
                "invalid eviction threshold syntax {stmt:?}, expected <signal><operator><value>"
            )));
        };
        let signal = Signal::parse(name.trim()).ok_or_else(|| {
            ThresholdError(format!("unsupported eviction signal {}", name.trim()))
        })?;
        if out.iter().any(|(s, _)| *s == signal) {
            return Err(ThresholdError(format!(
                "found duplicate eviction threshold for signal {signal}"
            )));
        }
        if let Some(value) = parse_value(signal, value.trim())? {
            out.push((signal, value));
        }
    }
    Ok(out)
}

/// A value: `N%` or a quantity. None for zero (upstream ignores such a threshold).
fn parse_value(signal: Signal, v: &str) -> Result<Option<Value>, ThresholdError> {
    if let Some(p) = v.strip_suffix('%') {
        let p: f64 = p.trim().parse().map_err(|_| {
            ThresholdError(format!(
                "invalid percentage {v:?} for eviction signal {signal}"
            ))
        })?;
        if !(0.0..=100.0).contains(&p) {
            return Err(ThresholdError(format!(
                "eviction percentage threshold {signal} must be >= 0% and <= 100%: {v}"
            )));
        }
        return Ok(Some(Value::Percentage(p / 100.0)).filter(|_| p > 0.0));
    }
    let milli = base::quantity::parse_milli(v).ok_or_else(|| {
        ThresholdError(format!(
            "invalid quantity {v:?} for eviction signal {signal}"
        ))
    })?;
    if milli < 0 {
        return Err(ThresholdError(format!(
            "eviction threshold {signal} cannot be negative: {v}"
        )));
    }
    // Whole units, rounded up as Quantity.Value() rounds.
    let units = (milli + 999) / 1000;
    Ok(Some(Value::Quantity(units)).filter(|_| units > 0))
}

/// Parses `signal=value` pairs separated by commas (`--eviction-soft-grace-period`,
/// `--eviction-minimum-reclaim`) with `parse` for the value.
fn parse_pairs<T>(
    v: &str,
    mut parse: impl FnMut(Signal, &str) -> Result<T, ThresholdError>,
) -> Result<Vec<(Signal, T)>, ThresholdError> {
    let mut out: Vec<(Signal, T)> = Vec::new();
    for pair in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| ThresholdError(format!("{pair:?} must be formatted as signal=value")))?;
        let signal = Signal::parse(name.trim()).ok_or_else(|| {
            ThresholdError(format!("unsupported eviction signal {}", name.trim()))
        })?;
        let value = parse(signal, value.trim())?;
        out.retain(|(s, _)| *s != signal);
        out.push((signal, value));
    }
    Ok(out)
}

/// The thresholds of the eviction flags (upstream `ParseThresholdConfig`). `hard`:
/// None for upstream's defaults, Some("") for none at all.
pub(crate) fn parse_threshold_config(
    hard: Option<&str>,
    soft: &str,
    soft_grace: &str,
    min_reclaim: &str,
) -> Result<Vec<Threshold>, ThresholdError> {
    let mut out = Vec::new();
    for (signal, value) in parse_statements(hard.unwrap_or(DEFAULT_EVICTION_HARD))? {
        out.push(Threshold {
            signal,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: None,
        });
    }
    let graces = parse_pairs(soft_grace, |signal, v| {
        let d = crate::config::duration::parse_duration(v)
            .map_err(|e| ThresholdError(format!("invalid grace period {v:?} for {signal}: {e}")))?;
        if d.is_zero() {
            return Err(ThresholdError(format!(
                "invalid eviction grace period specified: {v}, must be a positive value"
            )));
        }
        Ok(d)
    })?;
    for (signal, value) in parse_statements(soft)? {
        let grace = graces
            .iter()
            .find(|(s, _)| *s == signal)
            .map(|(_, d)| *d)
            .ok_or_else(|| {
                ThresholdError(format!(
                    "grace period must be specified for the soft eviction threshold {signal}"
                ))
            })?;
        out.push(Threshold {
            signal,
            value,
            grace_period: grace,
            min_reclaim: None,
        });
    }
    let reclaims = parse_pairs(min_reclaim, |signal, v| {
        parse_value(signal, v).map(|v| v.unwrap_or(Value::Quantity(0)))
    })?;
    for t in &mut out {
        if let Some((_, r)) = reclaims.iter().find(|(s, _)| *s == t.signal) {
            t.min_reclaim = Some(*r);
        }
    }
    Ok(out)
}

/// The `containerfs.*` thresholds (upstream `UpdateContainerFsThresholds`): the
/// containers' writable layers live where Docker keeps its images, so the container
/// filesystem is the node filesystem when there is one filesystem, and the image
/// filesystem when the runtime's root is a filesystem of its own (`dedicated_image_fs`).
/// Thresholds set for `containerfs.*` are replaced by those of that filesystem, each
/// replacement said in the returned warnings (upstream's "ignoring").
pub(crate) fn derive_container_fs_thresholds(
    thresholds: &[Threshold],
    dedicated_image_fs: bool,
) -> (Vec<Threshold>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut out: Vec<Threshold> = Vec::new();
    for t in thresholds {
        if matches!(
            t.signal,
            Signal::ContainerFsAvailable | Signal::ContainerFsInodesFree
        ) {
            warnings.push(format!(
                "found {} for {} eviction; ignoring: it follows {}",
                t.signal,
                if t.is_hard() { "hard" } else { "soft" },
                if dedicated_image_fs {
                    "imagefs"
                } else {
                    "nodefs"
                },
            ));
        } else {
            out.push(t.clone());
        }
    }
    let (bytes, inodes) = if dedicated_image_fs {
        (Signal::ImageFsAvailable, Signal::ImageFsInodesFree)
    } else {
        (Signal::NodeFsAvailable, Signal::NodeFsInodesFree)
    };
    let copies: Vec<Threshold> = out
        .iter()
        .filter_map(|t| {
            let signal = if t.signal == bytes {
                Signal::ContainerFsAvailable
            } else if t.signal == inodes {
                Signal::ContainerFsInodesFree
            } else {
                return None;
            };
            Some(Threshold {
                signal,
                ..t.clone()
            })
        })
        .collect();
    out.extend(copies);
    (out, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_upstreams_linux_hard_thresholds() {
        let t = parse_threshold_config(None, "", "", "").expect("ok");
        let got: Vec<_> = t.iter().map(|t| (t.signal, t.value, t.is_hard())).collect();
        assert_eq!(
            got,
            [
                (Signal::MemoryAvailable, Value::Quantity(100 << 20), true),
                (Signal::NodeFsAvailable, Value::Percentage(0.10), true),
                (Signal::NodeFsInodesFree, Value::Percentage(0.05), true),
                (Signal::ImageFsAvailable, Value::Percentage(0.15), true),
            ]
        );
    }

    #[test]
    fn setting_hard_replaces_the_defaults_wholesale() {
        let t = parse_threshold_config(Some("memory.available<1Gi"), "", "", "").expect("ok");
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].value, Value::Quantity(1 << 30));
        assert!(parse_threshold_config(Some(""), "", "", "")
            .expect("ok")
            .is_empty());
        // Zero thresholds are dropped, as upstream's.
        let t = parse_threshold_config(Some("memory.available<0,nodefs.available<0%"), "", "", "")
            .expect("ok");
        assert!(t.is_empty());
    }

    #[test]
    fn soft_thresholds_need_their_grace_period() {
        let err =
            parse_threshold_config(Some(""), "memory.available<1Gi", "", "").expect_err("no grace");
        assert_eq!(
            err.0,
            "grace period must be specified for the soft eviction threshold memory.available"
        );
        let t = parse_threshold_config(
            Some(""),
            "memory.available<1Gi,pid.available<10%",
            "memory.available=1m30s,pid.available=10s",
            "memory.available=500Mi",
        )
        .expect("ok");
        assert_eq!(t[0].grace_period, Duration::from_secs(90));
        assert_eq!(t[0].min_reclaim, Some(Value::Quantity(500 << 20)));
        assert_eq!(t[1].grace_period, Duration::from_secs(10));
        assert!(!t[1].is_hard());
    }

    #[test]
    fn bad_statements_are_refused_in_upstreams_words() {
        let bad = |s: &str| parse_statements(s).expect_err(s).0;
        assert_eq!(
            bad("memory.free<1Gi"),
            "unsupported eviction signal memory.free"
        );
        assert!(bad("memory.available>1Gi").contains("invalid eviction threshold syntax"));
        assert_eq!(
            bad("memory.available<1Gi,memory.available<2Gi"),
            "found duplicate eviction threshold for signal memory.available"
        );
        assert_eq!(
            bad("nodefs.available<110%"),
            "eviction percentage threshold nodefs.available must be >= 0% and <= 100%: 110%"
        );
        assert_eq!(
            bad("memory.available<-1"),
            "eviction threshold memory.available cannot be negative: -1"
        );
    }

    #[test]
    fn new_signals_parse_with_upstreams_names() {
        let t = parse_threshold_config(
            Some("allocatableMemory.available<1Gi,containerfs.available<10%"),
            "",
            "",
            "",
        )
        .expect("ok");
        assert_eq!(t[0].signal, Signal::AllocatableMemoryAvailable);
        assert_eq!(t[0].value, Value::Quantity(1 << 30));
        assert_eq!(t[0].signal.condition(), Condition::MemoryPressure);
        assert_eq!(t[0].signal.resource(), "memory");
        assert!(t[0].signal.is_memory());
        assert_eq!(t[1].signal, Signal::ContainerFsAvailable);
        assert!(t[1].signal.is_disk());
        assert_eq!(Signal::ContainerFsInodesFree.resource(), "inodes");
    }

    #[test]
    fn container_fs_thresholds_follow_nodefs_or_imagefs() {
        let t = parse_threshold_config(
            Some("nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%,containerfs.available<1%"),
            "nodefs.available<20%",
            "nodefs.available=1m",
            "",
        )
        .expect("ok");
        // One filesystem: containerfs is nodefs, hard and soft; the user's is replaced.
        let (one, warnings) = derive_container_fs_thresholds(&t, false);
        let cfs: Vec<_> = one
            .iter()
            .filter(|t| t.signal != Signal::NodeFsAvailable)
            .filter(|t| {
                matches!(
                    t.signal,
                    Signal::ContainerFsAvailable | Signal::ContainerFsInodesFree
                )
            })
            .map(|t| (t.signal, t.value, t.is_hard()))
            .collect();
        assert_eq!(
            cfs,
            [
                (Signal::ContainerFsAvailable, Value::Percentage(0.10), true),
                (Signal::ContainerFsInodesFree, Value::Percentage(0.05), true),
                (Signal::ContainerFsAvailable, Value::Percentage(0.20), false),
            ]
        );
        assert_eq!(
            warnings,
            ["found containerfs.available for hard eviction; ignoring: it follows nodefs"]
        );
        // Docker's root on a filesystem of its own: containerfs is imagefs.
        let (own, _) = derive_container_fs_thresholds(&t, true);
        let cfs: Vec<_> = own
            .iter()
            .filter(|t| t.signal == Signal::ContainerFsAvailable)
            .map(|t| t.value)
            .collect();
        assert_eq!(cfs, [Value::Percentage(0.15)]);
        // Deriving again gives the same set (idempotent).
        assert_eq!(derive_container_fs_thresholds(&own, true).0, own);
    }

    #[test]
    fn percentages() {
        assert_eq!(Value::Percentage(0.1).amount(1000), 100);
    }
}
