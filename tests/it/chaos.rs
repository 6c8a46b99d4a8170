//! The chaos suite's short forms (issue 14): each scenario of tests/it/chaos_suite.rs
//! but the dockerd restart (it needs a private engine: `make chaos` only), with a few
//! pods, a few kills and 15 s outages; kill -9 under churn on containerd (CRI) too, and
//! a containerd of the test's own stopped for 35 s and started again under churn
//! (issue 30). Each must end with no duplicate, no lost or stray pod, no unnecessary
//! restart, no panic, converged within a generous deadline.

use crate::chaos_suite::{self, Row, Scale};

fn check(row: Row) {
    eprintln!("{}\n{}", Row::header(), row.line());
    assert!(row.ok(), "{}", row.line());
}

#[test]
fn chaos_kill9_under_churn_leaves_exactly_the_manifests_running() {
    check(chaos_suite::kill9_under_churn(&Scale::short()));
}

#[test]
fn chaos_kill9_under_churn_on_containerd_leaves_exactly_the_manifests_running() {
    check(chaos_suite::kill9_under_churn_containerd(&Scale::short()));
}

#[test]
fn chaos_containerd_restart_keeps_running_pods_and_settles_on_the_manifests() {
    check(chaos_suite::containerd_restart_under_churn(&Scale::short()));
}

#[test]
fn chaos_api_server_and_etcd_away_keep_pods_and_follow_new_data() {
    check(chaos_suite::sources_outage(&Scale::short()));
}

#[test]
fn chaos_full_root_dir_keeps_pods_and_refuses_new_ones_clearly() {
    check(chaos_suite::root_dir_full(&Scale::short()));
}

#[test]
fn chaos_exhausted_descriptors_do_not_panic_and_pods_converge() {
    check(chaos_suite::fds_exhausted(&Scale::short()));
}

#[test]
fn chaos_clock_steps_restart_nothing_and_stall_no_loop() {
    check(chaos_suite::clock_steps(&Scale::short()));
}

#[test]
fn chaos_clock_a_year_behind_is_named_once_retried_and_connects_once_set() {
    check(chaos_suite::clock_year_behind(&Scale::short()));
}
