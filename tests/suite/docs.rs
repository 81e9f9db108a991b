//! Crate docs that stand alone on docs.rs (issue 14): no rustdoc comment (`///`, `//!`) of a
//! published crate refers to the design file outside the crate ("DESIGN §4", `DESIGN.md`).
//! The docs state the rule where it applies instead. Plain `//` comments may keep the
//! references: they are read beside the repository, not on docs.rs.

use std::path::{Path, PathBuf};

/// The `src/` folders of the published crates: the facade and every crate under `crates/`
/// except `gpumeter-synth` (a dev tool, `publish = false`).
fn published_sources(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![root.join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("read crates/")
        .map(|e| e.expect("a crates/ entry").path())
        .filter(|p| p.file_name().is_some_and(|n| n != "gpumeter-synth"))
        .map(|p| p.join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.sort();
    dirs.extend(crates);
    dirs
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read a source folder")
        .map(|e| e.expect("a source entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `file:line: text` of each rustdoc line in `text` that names the design file.
fn design_references(file: &str, text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            (t.starts_with("///") || t.starts_with("//!")) && t.contains("DESIGN")
        })
        .map(|(i, l)| format!("{file}:{}: {}", i + 1, l.trim()))
        .collect()
}

#[test]
fn the_probe_sees_doc_lines_and_only_them() {
    let text =
        "/// Rule (DESIGN §4).\n// DESIGN §4 in a code comment\n    //! DESIGN.md\nlet x = 1;\n";
    assert_eq!(
        design_references("f.rs", text),
        ["f.rs:1: /// Rule (DESIGN §4).", "f.rs:3: //! DESIGN.md"]
    );
}

#[test]
fn published_crate_docs_name_no_design_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in published_sources(root) {
        rust_files(&dir, &mut files);
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read a source file");
        let name = f.strip_prefix(root).unwrap_or(f).display().to_string();
        found.extend(design_references(&name, &text));
    }
    assert!(
        found.is_empty(),
        "{} rustdoc lines refer to the design file outside the crate; state the rule in the \
         doc comment (or move the reference to a plain // comment):\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The C header is the C ABI's reference for people who never read the Rust: its comments
/// (the C ABI's rustdoc, and the header text of `bindings/c/cbindgen.toml`) name no design
/// file either.
#[test]
fn the_c_header_names_no_design_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in ["bindings/c/gpumeter.h", "bindings/c/cbindgen.toml"] {
        let text = std::fs::read_to_string(root.join(file)).expect("read the C header");
        let found: Vec<String> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains("DESIGN"))
            .map(|(i, l)| format!("{file}:{}: {}", i + 1, l.trim()))
            .collect();
        assert!(found.is_empty(), "{}", found.join("\n"));
    }
}
