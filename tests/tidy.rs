//! House rules that a reviewer would otherwise have to remember, checked on the source
//! text (in the manner of rust-analyzer's `tidy`): no import cycles between modules.
//! No Docker, no network: these run in milliseconds.
#![allow(clippy::disallowed_methods)] // clippy.toml's sort ban is for shipped code

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read src dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    rkubelet::sort::sort(&mut out);
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The module path of a file under `src/`: `src/a/b.rs` and `src/a/b/mod.rs` are
/// `["a", "b"]`; `lib.rs` and `main.rs` are the crate root (empty).
fn module_path(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src()).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        parts.pop();
    }
    parts
}

/// The source without comments (line comments and doc comments), so paths in prose
/// are not taken for imports.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a file names that starts with `crate::` or `super::`, resolved to the
/// absolute module path it points into (its first segments; items are not told
/// apart from modules here, the caller keeps the ones that are modules). Brace groups
/// (`crate::a::{b, c::d}`) are expanded one level.
fn referenced_paths(module: &[String], is_mod_file: bool, code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for (start, anchor) in [("crate::", "crate"), ("super::", "super")] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            // Skip `xcrate::` and `self::super::`-like continuations of longer paths.
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let rest = &code[from..];
            let base: Vec<String> = if anchor == "crate" {
                Vec::new()
            } else {
                // `super` of a `mod.rs` file is its module's parent; of `b.rs` in `a/`,
                // it is `a`.
                let mut b = module.to_vec();
                b.pop();
                let _ = is_mod_file;
                b
            };
            for tail in expand(rest) {
                let mut p = base.clone();
                p.extend(tail);
                out.push(p);
            }
        }
    }
    out
}

/// The segments of the path at the start of `rest`, with one brace group expanded.
fn expand(rest: &str) -> Vec<Vec<String>> {
    let mut segs = Vec::new();
    let mut s = rest;
    loop {
        let end = s
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len());
        if end == 0 {
            break;
        }
        segs.push(s[..end].to_string());
        s = &s[end..];
        if let Some(r) = s.strip_prefix("::") {
            s = r;
        } else {
            break;
        }
    }
    if let Some(inner) = s.strip_prefix('{') {
        let close = inner.find('}').unwrap_or(inner.len());
        return inner[..close]
            .split(',')
            .map(|item| {
                let mut p = segs.clone();
                p.extend(
                    item.trim()
                        .split("::")
                        .map(|x| x.trim().to_string())
                        .filter(|x| !x.is_empty() && x != "self" && !x.contains(' ')),
                );
                p
            })
            .collect();
    }
    vec![segs]
}

/// A cycle in `graph`, if there is one (as the list of its nodes).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let i = stack.iter().position(|x| x == m).unwrap_or(0);
                    let mut cycle = stack[i..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(n, graph, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

/// Lower layers never import higher ones: between the crate's modules, and between
/// sibling files of one module, the `crate::`/`super::` import graph has no cycle.
#[test]
fn no_import_cycles_between_modules() {
    let files = rust_files(&src());
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(f)).collect();
    // Edges between modules that share a parent (the crate's top-level modules are
    // the children of the root): a file in `a/b…` naming `a/c…` is an edge b → c
    // under `a`. A parent and its own children are not compared.
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for f in &files {
        let me = module_path(f);
        let is_mod = f.file_name().is_some_and(|n| n == "mod.rs");
        let text = std::fs::read_to_string(f).expect("read");
        for target in referenced_paths(&me, is_mod, &code_of(&text)) {
            // The longest prefix of the target that is a module.
            let Some(target) = (1..=target.len())
                .rev()
                .map(|k| target[..k].to_vec())
                .find(|p| modules.contains(p))
            else {
                continue;
            };
            // The nearest common parent and the two children under it.
            let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common >= me.len() || common >= target.len() {
                continue; // one contains the other
            }
            graphs
                .entry(me[..common].to_vec())
                .or_default()
                .entry(me[common].clone())
                .or_default()
                .insert(target[common].clone());
        }
    }
    let mut cycles = Vec::new();
    for (parent, graph) in &graphs {
        if let Some(c) = find_cycle(graph) {
            let at = if parent.is_empty() {
                "crate".to_string()
            } else {
                parent.join("::")
            };
            cycles.push(format!("under {at}: {}", c.join(" → ")));
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles (a lower module must not import a higher one):\n{}",
        cycles.join("\n")
    );
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The text of a file before its unit tests (`#[cfg(test)] mod tests`), i.e. the
/// code that ships.
fn shipped(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// A file's path relative to the package, with `/` separators.
fn rel(p: &Path) -> String {
    p.strip_prefix(root())
        .unwrap_or(p)
        .to_string_lossy()
        .replace('\\', "/")
}

/// ARCHITECTURE.md's section `title` (from its `## ` heading to the next one).
fn architecture_section(title: &str) -> String {
    let text = read(&root().join("ARCHITECTURE.md"));
    let start = text
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no `## {title}` section"));
    let body = &text[start + title.len() + 5..];
    body[..body.find("\n## ").unwrap_or(body.len())].to_string()
}

/// Every `src/` file is in ARCHITECTURE.md's code map exactly once (named in
/// backquotes, e.g. `src/pleg.rs`), and the map names no file that does not exist.
#[test]
fn code_map_lists_every_source_file_once() {
    let map = architecture_section("Code map");
    let mut named: BTreeMap<String, usize> = BTreeMap::new();
    for token in map.split('`').skip(1).step_by(2) {
        if token.starts_with("src/") && token.ends_with(".rs") {
            *named.entry(token.to_string()).or_default() += 1;
        }
    }
    let files: Vec<String> = rust_files(&src()).iter().map(|p| rel(p)).collect();
    let mut problems = Vec::new();
    for f in &files {
        match named.get(f) {
            None => problems.push(format!("{f} is not in the code map")),
            Some(1) => {}
            Some(n) => problems.push(format!("{f} is in the code map {n} times")),
        }
    }
    for f in named.keys() {
        if !files.contains(f) {
            problems.push(format!("the code map names {f}, which does not exist"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `cargo bench` runs a bench's `main` only with `harness = false`.
#[test]
fn every_bench_has_harness_false() {
    let toml = read(&root().join("Cargo.toml"));
    let mut problems = Vec::new();
    for block in toml.split("[[bench]]").skip(1) {
        let block = &block[..block.find("\n[").unwrap_or(block.len())];
        let name = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = "))
            .unwrap_or("?");
        if !block.lines().any(|l| l.trim() == "harness = false") {
            problems.push(format!("[[bench]] {name} lacks harness = false"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every thread is spawned by the loop helper, so it is named and in the registry.
#[test]
fn threads_are_spawned_only_by_the_loop_helper() {
    let mut problems = Vec::new();
    for f in rust_files(&src()) {
        if rel(&f) == "src/loops.rs" {
            continue;
        }
        let text = read(&f);
        for (i, line) in shipped(&text).lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("thread::Builder") || code.contains("thread::spawn") {
                problems.push(format!("{}:{}: {}", rel(&f), i + 1, line.trim()));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "threads spawned outside src/loops.rs:\n{}",
        problems.join("\n")
    );
}

/// The name of the type a line declares (`pub enum X`, `struct Y(…)`), if it does.
fn declared_type(line: &str) -> Option<String> {
    let l = line.trim();
    let l = l.strip_prefix("pub ").unwrap_or(l);
    let rest = l
        .strip_prefix("enum ")
        .or_else(|| l.strip_prefix("struct "))?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Every module boundary's error enum is listed in ARCHITECTURE.md's rules on errors:
/// every `pub enum …Error`, and every type that derives `thiserror::Error` (the error
/// structs and the `…Kind` enums of their causes included).
#[test]
fn every_error_enum_is_listed() {
    let rules = architecture_section("Cross-cutting rules");
    let mut missing = Vec::new();
    for f in rust_files(&src()) {
        let text = read(&f);
        // A `#[derive(…thiserror::Error…)]` seen, waiting for the type it is on.
        let mut derives_error = false;
        for line in shipped(&text).lines() {
            let trimmed = line.trim();
            if trimmed.starts_with("#[derive(") && trimmed.contains("thiserror::Error") {
                derives_error = true;
                continue;
            }
            let Some(name) = declared_type(line) else {
                continue;
            };
            let is_pub_enum = trimmed.starts_with("pub enum ");
            let is_error = derives_error || (is_pub_enum && name.ends_with("Error"));
            derives_error = false;
            if is_error && !rules.contains(&format!("`{name}`")) {
                missing.push(format!("{name} ({})", rel(&f)));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "error enums not listed under ARCHITECTURE.md's Cross-cutting rules: {}",
        missing.join(", ")
    );
}

/// Every file says what it is in a `//!` paragraph, and a file over 800 lines says
/// why in it (a paragraph mentioning "800 lines").
#[test]
fn every_file_has_module_docs_and_long_files_say_why() {
    let mut problems = Vec::new();
    for f in rust_files(&src()) {
        let text = read(&f);
        let header: Vec<&str> = text.lines().take_while(|l| l.starts_with("//!")).collect();
        if header.is_empty() {
            problems.push(format!("{} does not start with a //! paragraph", rel(&f)));
        }
        let lines = text.lines().count();
        if lines > 800 && !header.iter().any(|l| l.contains("800 lines")) {
            problems.push(format!(
                "{} has {lines} lines and no reason (a //! line mentioning \"800 lines\")",
                rel(&f)
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
