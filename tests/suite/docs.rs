//! Crate docs that stand alone on docs.rs (issue 14): no rustdoc comment (`///`, `//!`) of a
//! published crate refers to the design file outside the crate (by its section numbers or its name).
//! The docs state the rule where it applies instead. Since issue 31 no code comment of the
//! workspace does either (sources, tests, benches, examples): a clone alone has no design
//! file, so comments cite docs/ARCHITECTURE.md, docs/METERING.md or the page that says it.
//!
//! And the project's Markdown docs (README.md, docs/, issue 31): they cite no file outside the
//! repository, and no line says something is "not implemented".

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

/// `file:line: text` of each comment line in `text` (`//`, `///`, `//!`) that names the design
/// file.
fn design_references(file: &str, text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            t.starts_with("//") && t.contains("DESIGN")
        })
        .map(|(i, l)| format!("{file}:{}: {}", i + 1, l.trim()))
        .collect()
}

#[test]
fn the_probe_sees_comment_lines_and_only_them() {
    let text = "/// Rule (DESIGN §4).\n// DESIGN §4 in a code comment\n    //! DESIGN.md\n\
                let x = \"DESIGN\";\n";
    assert_eq!(
        design_references("f.rs", text),
        [
            "f.rs:1: /// Rule (DESIGN §4).",
            "f.rs:2: // DESIGN §4 in a code comment",
            "f.rs:3: //! DESIGN.md"
        ]
    );
}

/// Every folder of Rust code in the workspace: each package's `src`, `tests`, `benches` and
/// `examples` (the facade's and every crate's, development tools included).
fn code_folders(root: &Path) -> Vec<PathBuf> {
    let mut packages = vec![root.to_path_buf()];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("read crates/")
        .map(|e| e.expect("a crates/ entry").path())
        .collect();
    crates.sort();
    packages.extend(crates);
    packages
        .iter()
        .flat_map(|p| ["src", "tests", "benches", "examples"].map(|d| p.join(d)))
        .filter(|d| d.is_dir())
        .collect()
}

/// `file:line: text` of every comment line naming the design file in the `.rs` files under
/// `dirs`, which must hold more than `at_least` files (a walk that found nothing proves nothing).
fn design_references_under(root: &Path, dirs: &[PathBuf], at_least: usize) -> Vec<String> {
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(dir, &mut files);
    }
    assert!(
        files.len() > at_least,
        "found only {} Rust files",
        files.len()
    );
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read a Rust file");
        let name = f.strip_prefix(root).unwrap_or(f).display().to_string();
        found.extend(design_references(&name, &text));
    }
    found
}

#[test]
fn no_code_comment_cites_the_design_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = design_references_under(root, &code_folders(root), 100);
    assert!(
        found.is_empty(),
        "{} comment lines cite the design file outside the repository; cite \
         docs/ARCHITECTURE.md, docs/METERING.md or the page that says it:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn published_crate_docs_name_no_design_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = design_references_under(root, &published_sources(root), 50);
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

/// README.md and every `.md` file under `docs/`, sorted: the project's own documentation.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("read a docs folder")
            .map(|e| e.expect("a docs entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let mut files = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut files);
    files
}

/// `file:line: text` of each line of `text` that `bad` finds fault with.
fn lines_where(file: &str, text: &str, bad: impl Fn(&str) -> bool) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| bad(l))
        .map(|(i, l)| format!("{file}:{}: {}", i + 1, l.trim()))
        .collect()
}

/// A line of prose with its inline code spans (`` `…` ``) removed: what a doc says in its own
/// words, not what it quotes.
fn prose(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// Every line of the project's docs that `bad` finds fault with, as `file:line: text`.
fn doc_lines_where(bad: impl Fn(&str) -> bool) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = markdown_files(root);
    assert!(files.len() > 10, "found only {} docs", files.len());
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read a doc");
        let name = f.strip_prefix(root).unwrap_or(f).display().to_string();
        found.extend(lines_where(&name, &text, &bad));
    }
    found
}

#[test]
fn the_doc_probes_see_prose_and_only_prose() {
    let text = "--format usage is not implemented yet\nall implemented\nNot Implemented\n";
    assert_eq!(
        lines_where("d.md", text, |l| l
            .to_lowercase()
            .contains("not implemented")),
        [
            "d.md:1: --format usage is not implemented yet",
            "d.md:3: Not Implemented"
        ]
    );
    assert_eq!(prose("a `DESIGN §4` b `c` d"), "a   b   d");
}

/// Issue 31: a doc that says a feature is "not implemented" is checked against the code the
/// day it becomes true, so the phrase is not left in the docs: say what exists instead, or
/// what it does not do.
#[test]
fn the_docs_say_nothing_is_not_implemented() {
    let found = doc_lines_where(|l| l.to_lowercase().contains("not implemented"));
    assert!(
        found.is_empty(),
        "{} lines of README.md or docs/ say \"not implemented\"; check each against the code \
         and say what is there:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// Issue 31: the docs stand alone in a clone. They cite the project's own pages
/// (docs/ARCHITECTURE.md, docs/METERING.md, …), never the design file beside the repository;
/// `../shared/data`, the shared test traces the tests read, is the one path outside it they
/// name. Quotes in inline code (an old warning's text) are not citations.
#[test]
fn the_docs_cite_no_file_outside_the_repository() {
    let found = doc_lines_where(|l| {
        let p = prose(l);
        p.contains("DESIGN") || p.replace("../shared/data", "").contains("../shared")
    });
    assert!(
        found.is_empty(),
        "{} lines of README.md or docs/ cite a file outside the repository; cite \
         docs/ARCHITECTURE.md, docs/METERING.md or the page that says it:\n{}",
        found.len(),
        found.join("\n")
    );
}
