//! Helpers the CLI's test targets share (`tests/main.rs`, `tests/bank.rs`): where the project
//! and the shared traces are, running the binary, reading its output, validating JSON against
//! the project's schemas. Each test target uses some of them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether this run is CI (`CI=true`), where a missing dependency fails instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// A shared trace, or `None` (with a notice) when ../shared/data lacks it outside CI.
pub fn shared(name: &str) -> Option<PathBuf> {
    let p = root().join("../shared/data").join(name);
    if p.exists() {
        return Some(p);
    }
    if in_ci() {
        panic!("CI=true but the shared trace {} is missing", p.display());
    }
    {
        // Straight to stderr, past the test harness's capture: a skip is never silent.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: {} missing; test body not run (outside CI)",
            p.display()
        );
    }
    None
}

/// The README's example input.
pub fn example() -> PathBuf {
    root().join("examples/data/finetune-2xh100.json.gz")
}

/// The example price book.
pub fn book() -> PathBuf {
    root().join("examples/pricebook.toml")
}

/// The `gpumeter` binary as a command.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpumeter"))
}

/// Runs `gpumeter args…` to completion.
pub fn gpumeter(args: &[&str]) -> Output {
    bin().args(args).output().expect("run gpumeter")
}

/// A path as `&str` for an argument.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Standard output, lossily.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Standard error, lossily.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Standard output as JSON of a successful run.
pub fn json(o: &Output) -> Value {
    assert!(o.status.success(), "gpumeter failed: {}", stderr(o));
    serde_json::from_slice(&o.stdout).expect("JSON output")
}

/// Asserts `doc` validates against `schemas/<schema_file>`.
pub fn validate(schema_file: &str, doc: &Value) {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("schemas").join(schema_file)).expect("schema"),
    )
    .expect("schema JSON");
    let v = jsonschema::validator_for(&schema).expect("valid schema");
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{schema_file}: {errors:#?}");
}
