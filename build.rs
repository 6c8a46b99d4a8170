//! Build script: the link order of the binary's functions. On x86_64 Linux with glibc,
//! which Rust (1.90 on) links with its own LLD, the functions an idle node runs, listed
//! in `hack/idle-order.txt` (`make idle-order` writes it from a profile), are placed
//! together at the start of the code, so the pages an idle rkubelet keeps resident hold
//! them rather than every page of the binary (see `src/codepages.rs`). A name the
//! binary no longer has is skipped; other targets and linkers keep the default order.

use std::path::Path;
use std::process::Command;

const ORDER: &str = "hack/idle-order.txt";

fn main() {
    println!("cargo:rerun-if-changed={ORDER}");
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    let Ok(dir) = std::env::var("CARGO_MANIFEST_DIR") else {
        return;
    };
    let order = Path::new(&dir).join(ORDER);
    if target == "x86_64-unknown-linux-gnu" && order.is_file() && links_with_lld() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// Whether the linker is Rust's LLD: the default for x86_64-unknown-linux-gnu from
/// Rust 1.90, unless the flags or Cargo's config turn it off (`-C linker-features=-lld`, a
/// linker of their own, a `-fuse-ld` of another). GNU ld would refuse the ordering flag.
fn links_with_lld() -> bool {
    // A linker named in Cargo's config (`target.<triple>.linker`).
    if std::env::var_os("RUSTC_LINKER").is_some() {
        return false;
    }
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.contains("linker-features=-lld") || flags.contains("linker=") {
        return false;
    }
    if flags.contains("-fuse-ld") && !flags.contains("-fuse-ld=lld") {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("--version").output() else {
        return false;
    };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let text = String::from_utf8_lossy(&out.stdout);
    let minor = text
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    minor.is_some_and(|m| m >= 90)
}
