//! `scripts/house`, the layout check CI runs (issue 31): it fails on an import circle between
//! files and on a file over 1 000 lines outside tests, follows `pub use` re-exports to the file
//! that defines an item, lets a module use its own parts, and exempts test code. Run on small
//! fixture crates written here, and on this repository, which must pass it.

use std::path::Path;
use std::process::{Command, Output};

/// Runs `python3 scripts/house ARGS`.
fn house(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/house"))
        .args(args)
        .output()
        .expect("python3 runs scripts/house (python3 comes with every machine the tests run on)")
}

/// Writes `files` (path, text) under `root`.
fn write_tree(root: &Path, files: &[(&str, String)]) {
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}

/// A fixture crate `fx`: `a.rs` and `b.rs` name each other's items (the circle; `a` through
/// the crate root's re-export of `b::B`), `p.rs` and its part `p/q.rs` use each other (a module
/// and its part: no circle), `long.rs` has `long_lines` lines, and the test module `tests.rs`
/// 1 500 (exempt).
fn fixture(root: &Path, circle: bool, long_lines: usize) {
    let b = if circle {
        "pub struct B;\npub fn f() -> crate::a::A {\n    crate::a::A\n}\n"
    } else {
        "pub struct B;\n"
    };
    let long: String = (0..long_lines).map(|i| format!("// line {i}\n")).collect();
    let tests: String = (0..1500).map(|i| format!("// test line {i}\n")).collect();
    write_tree(
        root,
        &[
            (
                "Cargo.toml",
                "[package]\nname = \"fx\"\nversion = \"0.0.0\"\n".into(),
            ),
            (
                "src/lib.rs",
                "mod a;\nmod b;\nmod long;\npub mod p;\n#[cfg(test)]\nmod tests;\npub use b::B;\n"
                    .into(),
            ),
            (
                "src/a.rs",
                "use crate::B;\npub struct A;\npub fn g(_: B) {}\n".into(),
            ),
            ("src/b.rs", b.into()),
            ("src/long.rs", long),
            (
                "src/p.rs",
                "mod q;\npub use q::Q;\npub struct P;\npub fn h() -> Q {\n    q::Q\n}\n".into(),
            ),
            (
                "src/p/q.rs",
                "pub struct Q;\npub fn k() -> super::P {\n    super::P\n}\n".into(),
            ),
            ("src/tests.rs", tests),
        ],
    );
}

#[test]
fn a_circle_through_a_re_export_and_a_long_file_fail_the_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    fixture(dir.path(), true, 1001);
    let out = house(&["--root", &dir.path().display().to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("import circle in fx: src/a.rs <-> src/b.rs"),
        "{stdout}"
    );
    assert!(
        stdout.contains("src/long.rs: 1001 lines outside tests"),
        "{stdout}"
    );
    // A module and its part using each other is no circle; a test file is no long file.
    let failures: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("house check failed"))
        .skip(1)
        .collect();
    assert_eq!(failures.len(), 2, "{stdout}");
    assert!(failures.iter().all(|l| !l.contains("src/p")), "{stdout}");
    assert!(
        failures.iter().all(|l| !l.contains("src/tests.rs")),
        "{stdout}"
    );
}

#[test]
fn without_the_circle_and_at_the_limit_the_check_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    fixture(dir.path(), false, 1000);
    let out = house(&["--root", &dir.path().display().to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("house check passed"), "{stdout}");
    // The per-crate summary counts every file, the test file included.
    assert!(stdout.contains("fx: "), "{stdout}");
}

#[test]
fn this_repository_passes_the_house_check() {
    let out = house(&["--quiet"]);
    assert!(
        out.status.success(),
        "scripts/house fails on this repository:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
