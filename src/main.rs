//! rkubelet's entry point (placeholder).
fn main() {}
