//! Helpers the CLI's test targets share (`tests/main.rs`, `tests/bank.rs`, `tests/bank_transfer.rs`): where the project
//! and the shared traces are, running the binary, reading its output, validating JSON against
//! the project's schemas. Each test target uses some of them.
#![allow(dead_code)]

pub mod fakes;

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

/// Exit 0, or a failure showing what the command said.
pub fn ok(o: Output, what: &str) -> Output {
    assert!(
        o.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        stdout(&o),
        stderr(&o)
    );
    o
}

/// 2026-11-02T07:00:00Z, an hour edge: the base of the synthetic traces.
pub const BASE_NS: u64 = 1_793_602_800_000_000_000;

/// A one-GPU Kineto trace (an H100 with a UUID) with `kernels` as (ts µs after the base
/// [`BASE_NS`], dur µs, grid x).
pub fn kineto(kernels: &[(u64, u64, u64)]) -> String {
    let events: Vec<Value> = kernels
        .iter()
        .enumerate()
        .map(|(i, &(ts, dur, grid))| {
            serde_json::json!({"ph": "X", "cat": "kernel", "name": format!("k{i}"), "pid": 0,
                               "tid": 7, "ts": ts, "dur": dur,
                               "args": {"device": 0, "stream": 7, "correlation": i + 1,
                                        "grid": [grid, 1, 1], "block": [128, 1, 1]}})
        })
        .collect();
    serde_json::json!({
        "schemaVersion": 1,
        "baseTimeNanoseconds": BASE_NS,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9,
                              "computeMinor": 0, "numSms": 132,
                              "uuid": "GPU-5b0ac4f5-0e2a-4c1e-9f31-7d3f00c0ffee"}],
        "traceEvents": events
    })
    .to_string()
}
