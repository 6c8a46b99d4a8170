//! rkubelet's integration tests against the real Docker engine.

mod docker;
