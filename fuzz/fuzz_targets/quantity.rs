//! Fuzz target `quantity`: see `rkubelet::fuzzing` for what it feeds.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rkubelet::fuzzing::run("quantity", data);
});
