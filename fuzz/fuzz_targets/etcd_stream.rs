//! Fuzz target `etcd_stream`: see `rkubelet::fuzzing` for what it feeds.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rkubelet::fuzzing::run("etcd_stream", data);
});
