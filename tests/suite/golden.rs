//! Golden usage reports (issue 13): every shared trace, committed recording and raw CUPTI
//! buffer of the repository is metered at a 1-hour and a 60-second window, and the whole
//! `gpumeter.usage/v1` report (pretty JSON, as `gpumeter usage --json` writes it up to
//! terminal escapes) must equal, byte for byte, the one committed in `tests/golden/`.
//!
//! The golden files were written by the meter as it stood before the streaming,
//! allocation-free rewrite, so any change of a metered quantity, a count, a loss, a warning or
//! the order of rows fails here. `GPUMETER_BLESS=1 cargo test --test main golden` rewrites
//! them; a change that does so must say why in its commit message. Every report also passes
//! the checks every reader makes ([`gpumeter::core::check_report`]).

use std::path::{Path, PathBuf};

use gpumeter::core::{MeterConfig, WindowSize};
use gpumeter::cupti::ApiVersion;
use gpumeter::{meter_inputs, Format, UsageOptions};

use crate::{data_dir, ok};

/// The repository's own inputs: (path relative to the repository root, CUPTI API version of a
/// raw buffer).
const REPOSITORY_INPUTS: &[(&str, Option<u32>)] = &[
    ("examples/data/finetune-2xh100.json.gz", None),
    ("examples/data/h200-cuda13-green-context.gmr", None),
    ("examples/data/h200-cuda13-instructions-2threads.gmr", None),
    ("examples/data/h200-cuda13-instructions.gmr", None),
    ("examples/data/h200-cuda13-smoke.gmr", None),
    ("fuzz/seeds/gmr_reader/recording_130001.gmr", None),
    ("fuzz/seeds/gmr_reader/recording_130401.gmr", None),
    ("fuzz/seeds/gmr_reader/recording_26.gmr", None),
    (
        "crates/gpumeter-cupti/tests/c/live/h200_r580_cupti_130001.bin",
        Some(130_001),
    ),
    (
        "crates/gpumeter-cupti/tests/c/live/h200_r580_cupti_130401.bin",
        Some(130_401),
    ),
    (
        "crates/gpumeter-cupti/tests/c/live/h200_r580_cupti_26.bin",
        Some(26),
    ),
];

/// The shared traces of `../shared/data` (recordings of other tools: docs/METERING.md, "Inputs per source").
const SHARED_TRACES: &[&str] = &[
    "hta_alexnet_benchmark_result_2869224_1695835535_trace.json.gz",
    "hta_sampled_rank-0.json.gz",
    "hta_sampled_rank-1.json.gz",
    "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    "tracelens_b200_eager_trace.json.gz",
    "tracelens_h100_gaunernst_bert-small-uncased__1016001.json.gz",
];

/// The windows every input is metered at.
const WINDOWS: &[(&str, u64)] = &[("1h", 3600), ("60s", 60)];

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// The report of one input at one window, as pretty JSON with a final newline.
fn report_json(input: &Path, api: Option<u32>, window_s: u64) -> String {
    let mut options = UsageOptions {
        meter: MeterConfig {
            window: ok(WindowSize::from_seconds(window_s)),
            ..MeterConfig::default()
        },
        ..UsageOptions::default()
    };
    if let Some(v) = api {
        options.cupti_api = Some(ok(ApiVersion::from_cupti(v)).cupti_api_version());
        options.format = Format::Cupti;
    }
    let report = ok(meter_inputs(&[input.to_path_buf()], &options));
    // Every report the meter writes passes the checks every reader makes (issue 30 item 11).
    if let Err(e) = report.check() {
        panic!(
            "{} at {window_s} s fails the readers' checks: {e}",
            input.display()
        );
    }
    let mut text = ok(serde_json::to_string_pretty(&report));
    text.push('\n');
    text
}

/// Compares (or, with `GPUMETER_BLESS=1`, writes) the golden file of each input and window;
/// fails listing every input whose report differs.
fn check(inputs: &[(PathBuf, Option<u32>)]) {
    let bless = std::env::var("GPUMETER_BLESS").as_deref() == Ok("1");
    let dir = golden_dir();
    let mut differ = Vec::new();
    for (input, api) in inputs {
        let stem = input
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("input");
        for &(label, seconds) in WINDOWS {
            let got = report_json(input, *api, seconds);
            let file = dir.join(format!("{stem}.{label}.json"));
            if bless {
                ok(std::fs::create_dir_all(&dir));
                ok(std::fs::write(&file, &got));
                continue;
            }
            let want = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("golden file {}: {e}", file.display()));
            if want != got {
                let line = want
                    .lines()
                    .zip(got.lines())
                    .position(|(a, b)| a != b)
                    .map_or(want.lines().count().min(got.lines().count()), |n| n);
                differ.push(format!(
                    "{} at {label}: first difference at line {}",
                    input.display(),
                    line + 1
                ));
            }
        }
    }
    assert!(
        differ.is_empty(),
        "usage reports differ from tests/golden (GPUMETER_BLESS=1 rewrites them):\n{}",
        differ.join("\n")
    );
}

#[test]
fn repository_inputs_meter_as_their_golden_reports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let inputs: Vec<(PathBuf, Option<u32>)> = REPOSITORY_INPUTS
        .iter()
        .map(|&(p, api)| (root.join(p), api))
        .collect();
    check(&inputs);
}

#[test]
fn shared_traces_meter_as_their_golden_reports() {
    let Some(dir) = data_dir() else {
        return;
    };
    let inputs: Vec<(PathBuf, Option<u32>)> =
        SHARED_TRACES.iter().map(|n| (dir.join(n), None)).collect();
    check(&inputs);
}
