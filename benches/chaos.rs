//! `make chaos`: the chaos suite at full size (issue 14) — kill -9 of rkubelet under
//! churn (110 pods, 20 kills; on Docker and on the shared containerd), a private dockerd
//! and a containerd of its own each stopped and started under churn, the
//! API server stand-in and etcd away for two minutes and back with new data, the root
//! dir's filesystem full, `ulimit -n 64` under load, the wall clock stepped an hour
//! back and forward. The scenarios live in tests/it/chaos_suite.rs (the short forms in
//! `make test` run the same code); this program runs them and prints one row each.
//! A program (harness = false), not a timed test; it exits 1 if any row failed. It
//! runs only with `RKUBELET_CHAOS=1` (`make chaos` sets it): `make bench` runs every
//! bench and must not start a 20-minute suite. A bench rather than an example because
//! the harness (tests/it/util.rs) finds the kubelet through `CARGO_BIN_EXE_rkubelet`,
//! which cargo gives tests and benches only.
//!
//! `cargo bench --bench chaos -- kill9 disk` runs only the named scenarios
//! (kill9, kill9-containerd, dockerd, containerd, sources, disk, fds, clock,
//! clock-behind); `RKUBELET_CHAOS_SEED` repeats a churn;
//! `RKUBELET_CHAOS_SCALE=short` runs the short forms' sizes.
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

// The harness's containerd, which tests/it/util.rs can start (as the tests name it).
extern crate cri as rkubelet_cri;
#[path = "../crates/cri/tests/common/mod.rs"]
mod containerd;

#[allow(dead_code)]
#[path = "../tests/it/util.rs"]
mod util;

#[path = "../tests/it/apiserver.rs"]
mod apiserver;

#[path = "../tests/it/etcd.rs"]
mod etcd;

#[path = "../tests/it/chaos_suite.rs"]
mod chaos_suite;

use std::time::Instant;

use chaos_suite::{Row, Scale, SCENARIOS};

fn main() {
    // `make bench` runs every bench; this one only for `make chaos` (it takes ~20 min,
    // needs root, and starts its own dockerd).
    if std::env::var_os("RKUBELET_CHAOS").is_none() {
        println!("chaos: skipped (run it with `make chaos`, which sets RKUBELET_CHAOS=1)");
        return;
    }
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    // `RKUBELET_CHAOS_SCALE=short`: the test sizes, to try a scenario quickly.
    let scale = if std::env::var("RKUBELET_CHAOS_SCALE").as_deref() == Ok("short") {
        Scale::short()
    } else {
        Scale::full()
    };
    let started = Instant::now();
    let mut rows = Vec::new();
    for (name, run) in SCENARIOS {
        if !wanted.is_empty() && !wanted.iter().any(|w| w == name) {
            continue;
        }
        eprintln!("chaos: {name} …");
        let t0 = Instant::now();
        let row = std::panic::catch_unwind(|| run(&scale)).unwrap_or_else(|e| {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Row {
                name: name.to_string(),
                failures: vec![format!("the scenario itself failed: {msg}")],
                ..Row::default()
            }
        });
        eprintln!("chaos: {name} done in {:.0} s", t0.elapsed().as_secs_f64());
        eprintln!("{}", row.line());
        rows.push(row);
    }
    println!();
    println!("{}", Row::header());
    for r in &rows {
        println!("{}", r.line());
    }
    println!(
        "\n{} scenarios in {:.1} min",
        rows.len(),
        started.elapsed().as_secs_f64() / 60.0
    );
    if rows.iter().any(|r| !r.ok()) {
        std::process::exit(1);
    }
}
