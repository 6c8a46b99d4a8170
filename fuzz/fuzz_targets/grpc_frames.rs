//! Fuzz target `grpc_frames`: see `rkubelet::fuzzing` for what it feeds.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rkubelet::fuzzing::run("grpc_frames", data);
});
