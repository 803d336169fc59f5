//! The layers of the core crate and which way their dependencies run (the crate docs'
//! map): `sync` <- `abi` <- `core` <- `walk` <- `fs` (the filesystem API only) and
//! `syscalls`, with the top level (`lib.rs`, `vfs.rs`, `task.rs`) above everything. Rust
//! allows module cycles, so folders alone do not keep the arrows one way: this test reads
//! every source file's `crate::` paths (its `use` lines and paths written inline) and
//! fails on one that points the wrong way, naming the file, the line and the rule.

use std::path::{Path, PathBuf};

/// The layers, and what each may name besides itself.
fn allowed(layer: &str) -> &'static [&'static str] {
    match layer {
        "sync" => &[],
        "abi" => &["sync"],
        "core" => &["sync", "abi"],
        "walk" => &["sync", "abi", "core"],
        // A filesystem sees the filesystem API of `core` only (checked below), never the
        // walk or a call.
        "fs" => &["sync", "abi", "core"],
        // Only the calls (and the top level) name a concrete filesystem.
        "syscalls" => &["sync", "abi", "core", "walk", "fs", "task", "vfs"],
        "top" => &["sync", "abi", "core", "walk", "fs", "syscalls", "task", "vfs"],
        _ => unreachable!(),
    }
}

/// What of `core` a filesystem may use: the objects it is handed and makes.
const FS_API: &[&str] = &["superblock", "inode", "dentry", "acl", "icache", "xattr", "file"];

fn layer_of(rel: &Path) -> &'static str {
    match rel.components().next().and_then(|c| c.as_os_str().to_str()) {
        Some("sync") => "sync",
        Some("abi") => "abi",
        Some("core") => "core",
        Some("walk") => "walk",
        Some("fs") => "fs",
        Some("syscalls") => "syscalls",
        Some("lib.rs" | "vfs.rs" | "task.rs") => "top",
        other => panic!("{}: a file outside the layers ({other:?})", rel.display()),
    }
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every `crate::a::b` path in `text` (skipping comments): (line number, `a`, `b`).
fn crate_paths(text: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let seg = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
            let first = seg(after);
            let second =
                after.strip_prefix(first.as_str()).and_then(|s| s.strip_prefix("::")).map(seg).unwrap_or_default();
            out.push((n + 1, first, second));
            rest = &after[1..];
        }
    }
    out
}

#[test]
fn dependencies_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let top_level: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".rs"))
        .collect();
    let mut top_sorted = top_level.clone();
    top_sorted.sort();
    assert_eq!(
        top_sorted,
        ["lib.rs", "task.rs", "vfs.rs"],
        "the top level holds only lib.rs, vfs.rs, task.rs and the folders"
    );
    // `pub use layer::...::{A, B};` lines of lib.rs: name -> layer.
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let mut reexports: Vec<(String, String)> = Vec::new();
    for line in lib.lines().filter_map(|l| l.strip_prefix("pub use ")) {
        let layer = line.split("::").next().unwrap_or("").to_string();
        let names = line.rsplit("::").next().unwrap_or("").trim_end_matches(';');
        for n in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            let n = n.split(" as ").last().unwrap_or("").trim();
            if !n.is_empty() {
                reexports.push((n.to_string(), layer.clone()));
            }
        }
    }
    let mut bad = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let layer = layer_of(rel);
        let text = std::fs::read_to_string(f).unwrap();
        for (line, first, second) in crate_paths(&text) {
            // A re-export at the root (`crate::Errno`, `crate::Task`) names its item's layer.
            let target = match first.as_str() {
                "sync" | "abi" | "core" | "walk" | "fs" | "syscalls" | "task" | "vfs" => first.clone(),
                name => match reexports.iter().find(|(n, _)| n == name) {
                    Some((_, l)) => l.clone(),
                    None => continue,
                },
            };
            if target == layer || (layer == "top" && ["task", "vfs"].contains(&target.as_str())) {
                continue;
            }
            let ok = allowed(layer).contains(&target.as_str())
                && !(layer == "fs" && target == "core" && !FS_API.contains(&second.as_str()));
            if !ok {
                bad.push(format!("{}:{line}: {layer} -> crate::{first}::{second}", rel.display()));
            }
        }
    }
    assert!(bad.is_empty(), "dependencies that run the wrong way:\n{}", bad.join("\n"));
}
