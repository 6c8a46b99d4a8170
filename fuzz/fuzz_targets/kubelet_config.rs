//! Fuzz target `kubelet_config`: see `rkubelet::fuzzing` for what it feeds.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rkubelet::fuzzing::run("kubelet_config", data);
});
