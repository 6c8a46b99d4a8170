//! Fuzz target `http_kubelet`: see `rkubelet::fuzzing` for what it feeds.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rkubelet::fuzzing::run("http_kubelet", data);
});
