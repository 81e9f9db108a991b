//! `scripts/gpu-truth.sh`, the model-vs-hardware check of issue 16, runs only on a GPU; its
//! table builder (`scripts/gpu-truth/table.py`) is checked here, without one: its self-test
//! builds a synthetic work directory (a `.gmr` with PM sample frames, usage reports, the
//! suite's output lines), works out every ratio, window sum and PASS/FAIL decision, and
//! compares them with numbers computed by hand. The script itself must at least parse.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

/// Whether `tool ARG` runs; when not, says `skipped: …` on standard error (past the harness's
/// capture), naming `what` was not run, and fails under `CI=true`. Shared with `gpu_flops`.
pub(super) fn have(tool: &str, arg: &str, what: &str) -> bool {
    let ok = Command::new(tool)
        .arg(arg)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: {tool} not found; {what} cannot run"
        );
        let _ = writeln!(
            std::io::stderr(),
            "skipped: {tool} not found; {what} was not run (CI=true makes this a failure)"
        );
    }
    ok
}

/// Runs `python3 SCRIPT --self-test` (a GPU check's table builder) and asserts it passes.
pub(super) fn table_self_test(script: &str) {
    if !have("python3", "--version", &format!("{script}'s self-test")) {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join(script))
        .arg("--self-test")
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("self-test PASS"),
        "{script} --self-test: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_table_builder_passes_its_self_test() {
    table_self_test("scripts/gpu-truth/table.py");
}

#[test]
fn the_script_parses() {
    if !have("bash", "--version", "scripts/gpu-truth.sh's checks") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg("-n")
        .arg(root.join("scripts/gpu-truth.sh"))
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "bash -n scripts/gpu-truth.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `gpu-truth.sh --help` prints the usage from the script's head comment and exits 0; an
/// unknown option exits 2 naming it, and neither makes a work directory (before, `--help` was
/// taken for the binaries' directory: `cd --help` printed bash's help into the path).
#[test]
fn the_script_answers_help_and_refuses_unknown_options() {
    if !have("bash", "--version", "scripts/gpu-truth.sh's checks") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = |arg: &str| {
        Command::new("bash")
            .arg(root.join("scripts/gpu-truth.sh"))
            .arg(arg)
            .env("TMPDIR", tmp.path())
            .output()
            .expect("run bash")
    };
    let help = run("--help");
    let text = String::from_utf8_lossy(&help.stdout);
    assert_eq!(help.status.code(), Some(0), "{text}");
    for shown in [
        "scripts/gpu-truth.sh --prepare [DIR]",
        "Exit status: 0 PASS, 1 FAIL, 2 could not run",
        "Budget: under 5 minutes",
    ] {
        assert!(text.contains(shown), "{shown} not in --help:\n{text}");
    }
    assert!(!text.contains("set -uo pipefail"), "{text}");
    let bad = run("--frobnicate");
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("unknown option --frobnicate"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let made: Vec<_> = std::fs::read_dir(tmp.path()).expect("ls").collect();
    assert!(made.is_empty(), "work directories made: {made:?}");
}

/// Without the binaries the script cannot run: exit 2 with `CANNOT RUN` naming what is missing,
/// and `OUT` gets the (empty) work directory's contents without an error from `cp`.
#[test]
fn the_script_says_cannot_run_without_its_binaries() {
    if !have("bash", "--version", "scripts/gpu-truth.sh's checks") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let out_dir = tmp.path().join("out");
    let o = Command::new("bash")
        .arg(root.join("scripts/gpu-truth.sh"))
        .arg(tmp.path().join("no-binaries-here"))
        .env("TMPDIR", tmp.path())
        .env("OUT", &out_dir)
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stdout.contains("CANNOT RUN: no gpumeter binary at"),
        "{stdout}"
    );
    assert!(stdout.contains("artifacts copied to"), "{stdout}");
    assert!(stderr.is_empty(), "{stderr}");
    assert!(out_dir.is_dir());
}
