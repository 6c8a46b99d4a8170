//! `generated/runtime.v1.rs` is what prost makes of the vendored `proto/api.proto`:
//! regenerated here without a system `protoc` (protox parses the proto, prost-build
//! writes the Rust) and compared. After updating the proto, run this test with
//! `RKUBELET_REGENERATE=1` to rewrite the file, and review the diff.

use std::path::Path;

#[test]
fn generated_code_matches_the_vendored_proto() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fds = protox::compile([dir.join("proto/api.proto")], [dir.join("proto")])
        .expect("the vendored proto parses");
    let out = std::env::temp_dir().join(format!("rkubelet-cri-gen-{}", std::process::id()));
    std::fs::create_dir_all(&out).expect("temp dir");
    prost_build::Config::new()
        .out_dir(&out)
        .compile_fds(fds)
        .expect("prost-build writes the code");
    let fresh = std::fs::read_to_string(out.join("runtime.v1.rs")).expect("generated file");
    let _ = std::fs::remove_dir_all(&out);
    let path = dir.join("generated/runtime.v1.rs");
    if std::env::var_os("RKUBELET_REGENERATE").is_some() {
        std::fs::write(&path, &fresh).expect("rewrite generated/runtime.v1.rs");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "{} is not what proto/api.proto generates: run \
         `RKUBELET_REGENERATE=1 cargo test -p rkubelet-cri --test generated` and review the diff",
        path.display()
    );
}
