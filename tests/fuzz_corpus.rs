//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`, seeds and every input
//! a fuzzer found, crashes included) through each target's function on the stable
//! toolchain, so `make test` catches a parser regression without nightly or
//! cargo-fuzz. A panic here is a defect in the parser, never in this test.
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

use std::path::Path;

#[test]
fn every_committed_fuzz_input_runs_through_its_target_without_panicking() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut runs = 0;
    for (name, target) in rkubelet::fuzzing::TARGETS {
        let dir = root.join(name);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (every target has a corpus)", dir.display()));
        let mut inputs = 0;
        for entry in entries {
            let path = entry.expect("corpus entry").path();
            let data = std::fs::read(&path).expect("corpus file");
            let caught = std::panic::catch_unwind(|| target(&data));
            assert!(
                caught.is_ok(),
                "target {name} panicked on {}",
                path.display()
            );
            inputs += 1;
        }
        assert!(inputs > 0, "target {name} has an empty corpus");
        runs += inputs;
    }
    // Every directory under fuzz/corpus is a target (no corpus left behind by a
    // renamed or removed one).
    for entry in std::fs::read_dir(&root).expect("fuzz/corpus") {
        let name = entry.expect("entry").file_name();
        let name = name.to_string_lossy();
        assert!(
            rkubelet::fuzzing::TARGETS.iter().any(|(n, _)| *n == name),
            "fuzz/corpus/{name} is no target's"
        );
    }
    assert!(runs >= rkubelet::fuzzing::TARGETS.len());
}
