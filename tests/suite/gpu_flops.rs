//! `scripts/gpu-flops.sh`, the FLOP check of issue 17, runs only on a GPU; its table builder
//! (`scripts/gpu-flops/table.py`) is checked here without one: its self-test works out the
//! expected FLOPs of launch shapes, the exact PASS/FAIL decision per meter, a device where a
//! FLOP meter is not meterable, the cost ratios and the exit statuses, against numbers worked
//! out by hand. The script must parse, answer `--help`, refuse unknown options, and say it
//! cannot run (exit 2) without its binaries.

use std::path::Path;
use std::process::Command;

use super::gpu_truth::{have, table_self_test};

#[test]
fn the_flops_table_builder_passes_its_self_test() {
    table_self_test("scripts/gpu-flops/table.py");
}

#[test]
fn the_flops_script_parses_answers_help_and_cannot_run_without_binaries() {
    if !have("bash", "--version", "scripts/gpu-flops.sh's checks") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("scripts/gpu-flops.sh");
    let parse = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("run bash");
    assert!(
        parse.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&parse.stderr)
    );
    let help = Command::new("bash")
        .arg(&script)
        .arg("--help")
        .output()
        .expect("run bash");
    let text = String::from_utf8_lossy(&help.stdout);
    assert_eq!(help.status.code(), Some(0));
    assert!(
        text.contains("scripts/gpu-flops.sh --prepare [DIR]"),
        "{text}"
    );
    assert!(text.contains("not packed half2"), "{text}");
    let bad = Command::new("bash")
        .arg(&script)
        .arg("--bogus")
        .output()
        .expect("run bash");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown option --bogus"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let none = Command::new("bash")
        .arg(&script)
        .arg(tmp.path())
        .env("TMPDIR", tmp.path())
        .output()
        .expect("run bash");
    let out = String::from_utf8_lossy(&none.stdout);
    assert_eq!(none.status.code(), Some(2), "{out}");
    assert!(out.contains("CANNOT RUN: no gpumeter binary"), "{out}");
}

/// The suite's expectations are the ones the table builder computes: the kernel names and the
/// keys of its `launch` lines agree between flops.cu and table.py.
#[test]
fn the_suite_and_the_table_name_the_same_kernels() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cu = std::fs::read_to_string(root.join("scripts/gpu-flops/flops.cu")).expect("cu");
    let py = std::fs::read_to_string(root.join("scripts/gpu-flops/table.py")).expect("py");
    for k in ["fma_fp64", "fma_fp32", "fma_fp16", "gemm_wmma"] {
        assert!(
            cu.contains(&format!("launch kernel={k} ")),
            "flops.cu prints no launch line for {k}"
        );
        assert!(
            py.contains(&format!("\"{k}\"")),
            "table.py does not know {k}"
        );
    }
    // fp16 uses scalar __hfma, never packed half2 (its counter counts instructions).
    assert!(cu.contains("__hfma(a, bb, cc)"));
    assert!(!cu.contains("__hfma2("));
}
