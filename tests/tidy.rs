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
    base::sort::sort(&mut out);
    out
}

/// The `src/` folder of every crate of the workspace: the daemon's and each one under
/// `crates/`.
fn src_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![root().join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .expect("read crates/")
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    base::sort::sort(&mut crates);
    dirs.extend(crates);
    dirs
}

/// Every `.rs` file of every crate's `src/`.
fn all_rust_files() -> Vec<PathBuf> {
    src_dirs().iter().flat_map(|d| rust_files(d)).collect()
}

/// The module path of a file under its crate's `src/`: `src/a/b.rs` and
/// `src/a/b/mod.rs` are `["a", "b"]`; `lib.rs` and `main.rs` are the crate root (empty).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
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

/// Lower layers never import higher ones: between the crates the compiler judges (a
/// crate cannot name one that is not its dependency); inside each crate, between its
/// modules and between sibling files of one module, the `crate::`/`super::` import
/// graph has no cycle.
#[test]
fn no_import_cycles_between_modules() {
    let mut cycles = Vec::new();
    for src in src_dirs() {
        cycles.extend(cycles_in(&src));
    }
    assert!(
        cycles.is_empty(),
        "import cycles (a lower module must not import a higher one):\n{}",
        cycles.join("\n")
    );
}

/// The import cycles between the modules of the crate whose `src/` is `src`.
fn cycles_in(src: &Path) -> Vec<String> {
    let files = rust_files(src);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(src, f)).collect();
    // Edges between modules that share a parent (the crate's top-level modules are
    // the children of the root): a file in `a/b…` naming `a/c…` is an edge b → c
    // under `a`. A parent and its own children are not compared.
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for f in &files {
        let me = module_path(src, f);
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
            cycles.push(format!("{}, under {at}: {}", rel(src), c.join(" → ")));
        }
    }
    cycles
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

/// Every crate's `src/` file is in ARCHITECTURE.md's code map exactly once (named in
/// backquotes, e.g. `src/pleg.rs`, `crates/base/src/loops.rs`), and the map names no
/// file that does not exist.
#[test]
fn code_map_lists_every_source_file_once() {
    let map = architecture_section("Code map");
    let mut named: BTreeMap<String, usize> = BTreeMap::new();
    for token in map.split('`').skip(1).step_by(2) {
        if (token.starts_with("src/") || token.starts_with("crates/")) && token.ends_with(".rs") {
            *named.entry(token.to_string()).or_default() += 1;
        }
    }
    let files: Vec<String> = all_rust_files().iter().map(|p| rel(p)).collect();
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
    for f in all_rust_files() {
        // The loop helper, and the test helper that names a test's own threads.
        if ["crates/base/src/loops.rs", "crates/base/src/testutil.rs"].contains(&rel(&f).as_str()) {
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
        "threads spawned outside crates/base/src/loops.rs:\n{}",
        problems.join("\n")
    );
}

/// The name of the type a line declares (`pub enum X`, `struct Y(…)`), if it does.
fn declared_type(line: &str) -> Option<String> {
    let l = line.trim();
    let l = ["pub(crate) ", "pub(super) ", "pub "]
        .iter()
        .find_map(|p| l.strip_prefix(p))
        .unwrap_or(l);
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
    for f in all_rust_files() {
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
            let is_pub_enum =
                trimmed.starts_with("pub enum ") || trimmed.starts_with("pub(crate) enum ");
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
    for f in all_rust_files() {
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

/// The name `item` declares when `line` is a top-level `pub` item (`pub fn x`,
/// `pub struct X<…>`, `pub const X`, …), if it is one.
fn top_level_pub_item(line: &str) -> Option<String> {
    let rest = line.strip_prefix("pub ")?;
    let rest = [
        "fn ", "struct ", "enum ", "trait ", "const ", "static ", "type ",
    ]
    .iter()
    .find_map(|k| rest.strip_prefix(k))?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Whether `word` stands in `text` as a whole word.
fn has_word(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

/// The lines of a crate's shipped code that make up its public signatures: `pub`
/// declarations (functions, fields, aliases) and the variants of its `pub enum`s.
fn public_signature_lines(src: &Path) -> String {
    let mut out = String::new();
    for f in rust_files(src) {
        let text = read(&f);
        let mut in_pub_enum = false;
        // Inside a `pub fn` signature spread over several lines.
        let mut in_signature = false;
        for line in code_of(shipped(&text)).lines() {
            let trimmed = line.trim_start();
            if line.starts_with("pub enum ") {
                in_pub_enum = true;
            } else if line.starts_with('}') {
                in_pub_enum = false;
            }
            if trimmed.starts_with("pub fn ") {
                in_signature = true;
            }
            if in_pub_enum || in_signature || trimmed.starts_with("pub ") {
                out.push_str(line);
                out.push('\n');
            }
            if line.contains('{') || line.contains(';') {
                in_signature = false;
            }
        }
    }
    out
}

/// A lower crate's `pub` is its promise to the crates above: every top-level `pub`
/// item of `crates/*/src` is named somewhere outside its crate (another crate, the
/// daemon, its tests or benches) or in one of its crate's public signatures (an
/// error that is another's source, a type a public function takes); the rest is
/// `pub(crate)` or private. (Methods are not checked here; `#![warn(unreachable_pub)]`
/// and review keep those.)
#[test]
fn every_pub_item_is_used_outside_its_crate() {
    let mut outside_text: BTreeMap<PathBuf, String> = BTreeMap::new();
    let everything: Vec<PathBuf> = src_dirs()
        .into_iter()
        .chain([
            root().join("tests"),
            root().join("benches"),
            root().join("fuzz"),
        ])
        .flat_map(|d| rust_files(&d))
        .collect();
    for f in &everything {
        outside_text.insert(f.clone(), code_of(&read(f)));
    }
    let mut unused = Vec::new();
    for src in src_dirs() {
        // The daemon's library is used by its binary (`main.rs`), the tests, the
        // benches and the fuzz targets; a lower crate by every other crate.
        let daemon = !src.starts_with(root().join("crates"));
        let krate = src.parent().expect("crate dir").to_path_buf();
        let main = root().join("src").join("main.rs");
        let others: String = outside_text
            .iter()
            .filter(|(p, _)| {
                if daemon {
                    !p.starts_with(&src) || **p == main
                } else {
                    !p.starts_with(&krate)
                }
            })
            .map(|(_, t)| t.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let signatures = public_signature_lines(&src);
        for f in rust_files(&src).into_iter().filter(|f| *f != main) {
            let text = read(&f);
            for (i, line) in shipped(&text).lines().enumerate() {
                if let Some(name) = top_level_pub_item(line) {
                    let in_a_signature = signatures
                        .lines()
                        .filter(|l| !l.starts_with(&format!("pub struct {name}")))
                        .filter(|l| !l.starts_with(&format!("pub enum {name}")))
                        .filter(|l| top_level_pub_item(l).as_deref() != Some(name.as_str()))
                        .any(|l| has_word(l, &name));
                    if !has_word(&others, &name) && !in_a_signature {
                        unused.push(format!("{}:{}: {name}", rel(&f), i + 1));
                    }
                }
            }
        }
    }
    assert!(
        unused.is_empty(),
        "`pub` items no other crate names (make them `pub(crate)` or private):\n{}",
        unused.join("\n")
    );
}

/// The file that declares the module `file` is in (its parent module): `a/b.rs` and
/// `a/b/mod.rs` are declared by `a.rs` or `a/mod.rs` (the crate root for a top-level
/// module). None for a crate root.
fn parent_file(src: &Path, file: &Path) -> Option<PathBuf> {
    let module = module_path(src, file);
    let parent = module.get(..module.len().checked_sub(1)?)?;
    if parent.is_empty() {
        return [src.join("lib.rs"), src.join("main.rs")]
            .into_iter()
            .find(|p| p.exists());
    }
    let dir = parent.iter().fold(src.to_path_buf(), |d, p| d.join(p));
    [dir.with_extension("rs"), dir.join("mod.rs")]
        .into_iter()
        .find(|p| p.exists())
}

/// Whether `text` declares an item or module called `name` (not merely imports it).
fn declares(text: &str, name: &str) -> bool {
    code_of(text).lines().any(|line| {
        let mut words = line
            .trim_start()
            .split(|c: char| !c.is_alphanumeric() && c != '_');
        let mut previous = "";
        words.any(|w| {
            let hit = w == name
                && [
                    "fn", "struct", "enum", "mod", "const", "static", "type", "trait",
                ]
                .contains(&previous);
            if !w.is_empty() {
                previous = w;
            }
            hit
        })
    })
}

/// A module imports what it uses from where it is defined: no `use super::X` at a
/// file's top level reaches an `X` that the parent module only imported (a parent
/// `mod.rs` doubling as a hub of other modules' types).
#[test]
fn nothing_is_reached_through_a_parents_import() {
    let mut problems = Vec::new();
    for src in src_dirs() {
        for f in rust_files(&src) {
            let Some(parent) = parent_file(&src, &f) else {
                continue;
            };
            let parent_text = read(&parent);
            for line in code_of(&read(&f)).lines() {
                let Some(rest) = line.strip_prefix("use super::") else {
                    continue;
                };
                let rest = rest.trim_end_matches(';');
                let firsts: Vec<&str> = match rest.strip_prefix('{') {
                    Some(inner) => inner
                        .trim_end_matches('}')
                        .split(',')
                        .filter_map(|p| p.split("::").next())
                        .map(str::trim)
                        .collect(),
                    None => rest.split("::").next().into_iter().collect(),
                };
                for name in firsts {
                    let name = name.split_whitespace().next().unwrap_or_default();
                    if name.is_empty() || ["self", "super", "*"].contains(&name) {
                        continue;
                    }
                    if !declares(&parent_text, name) {
                        problems.push(format!(
                            "{}: `use super::{name}`, which {} does not declare: import it from where it is defined",
                            rel(&f),
                            rel(&parent)
                        ));
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
