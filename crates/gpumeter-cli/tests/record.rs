//! `gpumeter record` and `gpumeter recording show` without a GPU: a command that never
//! initialises CUDA yields a valid empty recording that `usage` reads, exit codes pass
//! through, and a missing injection library is a clear error. With the fake libcupti and fake
//! CUDA program of `crates/gpumeter-inject/tests/c` (compiled against the CUPTI 12.8 wheel's
//! headers; with `CI=true` missing headers fail the test), the GPU smoke test's checks run on
//! the CPU: kernel count from `usage`, names from `recording show`, and `preview`.
//!
//! The injection library is `libgpumeter_inject.so` from this build (`cargo build -p
//! gpumeter-inject`, which `.ci/run` does before the tests): beside the `gpumeter` binary or in
//! its `deps/`. The test fails with that instruction when it is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::fakes::{build_fakes, inject_lib};

fn gpumeter() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpumeter"))
}

fn record(out: &Path, command: &[&str]) -> Output {
    gpumeter()
        .args(["record", "--out"])
        .arg(out)
        .arg("--")
        .args(command)
        .env("GPUMETER_INJECT_LIB", inject_lib())
        .output()
        .expect("run gpumeter record")
}

/// `gpumeter recording show --json PATH`, which must succeed, as JSON.
fn show_json(path: &Path) -> serde_json::Value {
    let o = gpumeter()
        .args(["recording", "show", "--json"])
        .arg(path)
        .output()
        .expect("show");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_command_without_cuda_yields_an_empty_recording_that_meters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("sub/x.gmr");
    let o = record(&out, &["true"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        o.stdout.is_empty(),
        "record adds nothing to the command's stdout"
    );
    assert!(err.contains("wrote an empty recording"), "{err}");
    assert!(
        err.contains(&format!("recording written to {}", out.display())),
        "{err}"
    );

    let bytes = std::fs::read(&out).expect("recording exists");
    let file = gpumeter_recording::gmr::read_gmr(&bytes).expect("valid .gmr");
    assert!(file.finished && file.torn.is_none() && file.frames.is_empty());
    assert_eq!(file.header.cupti_api_version, 26);
    assert_eq!(file.header.producer.name, "gpumeter record");
    assert_ne!(file.header.process_id, 0);

    let usage = gpumeter()
        .arg("usage")
        .arg(&out)
        .arg("--json")
        .output()
        .expect("usage");
    assert_eq!(usage.status.code(), Some(0), "{}", text(&usage.stderr));
    let v: serde_json::Value = serde_json::from_slice(&usage.stdout).expect("JSON");
    assert_eq!(v["schema"], "gpumeter.usage/v1");
    assert_eq!(v["sources"][0]["format"], "gmr");
    assert_eq!(v["usage"].as_array().map(Vec::len), Some(0));

    let table = gpumeter().arg("usage").arg(&out).output().expect("usage");
    assert_eq!(table.status.code(), Some(0), "{}", text(&table.stderr));

    let s = show_json(&out);
    assert_eq!(s["buffers"], 0);
    assert_eq!(s["kernels"], 0);
    assert_eq!(s["finished"], true);
    let show = gpumeter()
        .args(["recording", "show"])
        .arg(&out)
        .output()
        .expect("show");
    assert!(text(&show.stdout).contains("0 kernel records"));
}

#[test]
fn exit_codes_pass_through() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("x.gmr");
    let cases: [(&[&str], i32); 4] = [
        (&["sh", "-c", "exit 3"], 3),
        (&["sh", "-c", "kill -TERM $$"], 128 + 15),
        (&["false"], 1),
        (&["/nonexistent/program"], 127),
    ];
    for (cmd, code) in cases {
        let o = record(&out, cmd);
        assert_eq!(o.status.code(), Some(code), "{cmd:?}: {}", text(&o.stderr));
    }
}

#[test]
fn the_command_keeps_its_arguments_and_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("x.gmr");
    let o = record(
        &out,
        &[
            "sh",
            "-c",
            "printf '%s|%s' \"$GPUMETER_OUT\" \"$CUDA_INJECTION64_PATH\"",
            "--version",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    let (gout, inject) = stdout.split_once('|').expect("two values");
    assert_eq!(Path::new(gout), out.as_path(), "absolute GPUMETER_OUT");
    assert!(inject.ends_with("libgpumeter_inject.so"), "{inject}");
    assert!(Path::new(inject).is_absolute());
}

#[test]
fn pm_sampling_flags_reach_the_injection_library_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("pm.gmr");
    let show = "printf '%s|%s' \"$GPUMETER_PM_SAMPLING\" \"$GPUMETER_PM_INTERVAL_NS\"";
    let run = |flags: &[&str]| {
        gpumeter()
            .args(["record", "--out"])
            .arg(&out)
            .args(flags)
            .args(["--", "sh", "-c", show])
            .env("GPUMETER_INJECT_LIB", inject_lib())
            // Inherited values never leak into the command's settings.
            .env("GPUMETER_PM_SAMPLING", "1")
            .env("GPUMETER_PM_INTERVAL_NS", "777")
            .output()
            .expect("run gpumeter record")
    };
    let o = run(&["--pm-sampling", "--pm-interval", "250us"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "1|250000");
    let o = run(&["--pm-sampling"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "1|", "the library's default interval");
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "|", "off unless asked for");
}

#[test]
fn pm_interval_is_validated_before_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    for (flags, needle) in [
        (&["--pm-interval", "1ms"][..], "--pm-sampling"),
        (
            &["--pm-sampling", "--pm-interval", "0us"][..],
            "outside 1us..=1s",
        ),
        (
            &["--pm-sampling", "--pm-interval", "2s"][..],
            "outside 1us..=1s",
        ),
        (
            &["--pm-sampling", "--pm-interval", "fast"][..],
            "not a duration",
        ),
    ] {
        let o = gpumeter()
            .args(["record", "--out"])
            .arg(dir.path().join("x.gmr"))
            .args(flags)
            .arg("--")
            .arg("touch")
            .arg(&marker)
            .env("GPUMETER_INJECT_LIB", inject_lib())
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains(needle),
            "{flags:?}: {}",
            text(&o.stderr)
        );
        assert!(!marker.exists(), "{flags:?}: the command was not run");
    }
    // The edges are accepted.
    for v in ["1us", "1s"] {
        let o = gpumeter()
            .args(["record", "--out"])
            .arg(dir.path().join("edge.gmr"))
            .args(["--pm-sampling", "--pm-interval", v, "--", "true"])
            .env("GPUMETER_INJECT_LIB", inject_lib())
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(0), "{v}: {}", text(&o.stderr));
    }
}

#[test]
fn a_missing_injection_library_is_an_error_before_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let o = gpumeter()
        .args(["record", "--out"])
        .arg(dir.path().join("x.gmr"))
        .arg("--")
        .args(["touch"])
        .arg(&marker)
        .env("GPUMETER_INJECT_LIB", dir.path().join("nope.so"))
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(125), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("nope.so"));
    assert!(!marker.exists(), "the command was not run");
}

/// What scripts/gpu-smoke.sh checks on a GPU, with a fake CUPTI: `record` passes the exit
/// code, `usage` counts every kernel, `recording show` names them, `preview` prices the
/// device by the name from its DEVICE record.
#[test]
fn a_fake_cuda_program_records_meters_and_previews() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((fake, app)) = build_fakes(dir.path()) else {
        return;
    };
    let out = dir.path().join("run.gmr");
    let o = gpumeter()
        .args(["record", "--out"])
        .arg(&out)
        .arg("--")
        .arg(&app)
        .arg("4")
        .env("GPUMETER_INJECT_LIB", inject_lib())
        .env("GPUMETER_CUPTI_LIB", &fake)
        .env("FAKE_CUPTI_KERNELS", "40")
        .output()
        .expect("record");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(text(&o.stdout).contains("InitializeInjection=1"), "{err}");
    assert!(
        err.contains("(2 activity buffers, 40 kernel records)"),
        "{err}"
    );

    let usage = gpumeter()
        .args(["usage", "--json"])
        .arg(&out)
        .output()
        .expect("usage");
    assert_eq!(usage.status.code(), Some(0), "{}", text(&usage.stderr));
    let v: serde_json::Value = serde_json::from_slice(&usage.stdout).expect("JSON");
    let launches: u64 = v["totals"]
        .as_array()
        .expect("totals")
        .iter()
        .filter(|t| t["meter"] == "kernel_launches")
        .map(|t| {
            t["quantity"]
                .as_str()
                .and_then(|q| q.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(launches, 40);
    assert_eq!(v["devices"][0]["name"], "NVIDIA H200");

    let s = show_json(&out);
    assert_eq!(s["kernels"], 40);
    assert_eq!(s["unnamed_kernels"], 0);
    assert_eq!(s["kernel_names"][0]["name"], "fake_kernel_add");
    assert_eq!(s["kernel_names"][0]["count"], 20);
    assert_eq!(s["kernel_names"][1]["name"], "fake_kernel_scale");
    assert_eq!(s["header"]["producer"]["name"], "gpumeter-inject");

    let book = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/pricebook.toml");
    let p = gpumeter()
        .arg("preview")
        .arg(&out)
        .arg("--prices")
        .arg(&book)
        .output()
        .expect("preview");
    assert_eq!(p.status.code(), Some(0), "{}", text(&p.stderr));
    assert!(text(&p.stdout).contains("h200"), "{}", text(&p.stdout));
}

/// `recording show` summarises energy frames per device: first and last reading, the delta,
/// and frames out of time order or with a falling counter (a hand-written recording).
#[test]
fn recording_show_summarises_energy_per_device() {
    use gpumeter_recording::gmr::{EnergySample, Frame, GmrHeader, GmrWriter};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("energy.gmr");
    let header = GmrHeader {
        cupti_api_version: 26,
        ..GmrHeader::default()
    };
    let mut w = GmrWriter::new(Vec::new(), &header).expect("header");
    let e = |device_id, timestamp_ns, energy_mj| {
        Frame::Energy(EnergySample {
            device_id,
            timestamp_ns,
            energy_mj,
        })
    };
    for f in [
        e(1, 1_000_000_500, 700),
        e(0, 1_000_000_000, 10_000),
        e(0, 2_000_000_000, 12_500),
        e(1, 2_000_000_500, 650),
        e(0, 3_500_000_000, 15_000),
    ] {
        w.write_frame(&f).expect("frame");
    }
    std::fs::write(&path, w.finish().expect("finish")).expect("write");

    let s = show_json(&path);
    assert_eq!(s["energy_samples"], 5);
    assert_eq!(
        s["energy"],
        serde_json::json!([
            {"device": 0, "samples": 3, "first_timestamp_ns": 1_000_000_000u64,
             "last_timestamp_ns": 3_500_000_000u64, "first_mj": 10_000, "last_mj": 15_000,
             "delta_mj": 5_000, "out_of_order": 0, "decreases": 0},
            {"device": 1, "samples": 2, "first_timestamp_ns": 1_000_000_500u64,
             "last_timestamp_ns": 2_000_000_500u64, "first_mj": 700, "last_mj": 650,
             "delta_mj": 0, "out_of_order": 0, "decreases": 1},
        ])
    );

    let o = gpumeter()
        .args(["recording", "show"])
        .arg(&path)
        .output()
        .expect("show");
    let out = text(&o.stdout);
    assert!(
        out.contains(
            "energy        device 0: 3 samples over 2.500000000 s, 1970-01-01T00:00:01.000000000Z \
             to 1970-01-01T00:00:03.500000000Z; 5,000 mJ (counter 10,000 to 15,000 mJ)\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("device 1: 2 samples over 1.000000000 s")
            && out.contains("the counter fell 1 time (a driver reload)"),
        "{out}"
    );
}

/// A recording whose program never started CUPTI has a zero clock: `recording show` says it
/// was not read instead of showing the Unix epoch as its time.
#[test]
fn recording_show_tells_a_clock_that_was_not_read() {
    use gpumeter_recording::gmr::{GmrHeader, GmrWriter};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("empty.gmr");
    let mut header = GmrHeader {
        cupti_api_version: 26,
        ..GmrHeader::default()
    };
    header.clock.unix_time_ns = 1_796_207_556_211_636_317;
    let w = GmrWriter::new(Vec::new(), &header).expect("header");
    std::fs::write(&path, w.finish().expect("finish")).expect("write");
    let o = gpumeter()
        .args(["recording", "show"])
        .arg(&path)
        .output()
        .expect("show");
    let out = text(&o.stdout);
    assert!(
        out.contains(
            "\nclock         CUPTI not read (0 ns), wall clock 2026-12-02T10:32:36.211636317Z \
             (1796207556211636317 ns)\n"
        ),
        "{out}"
    );
    assert!(!out.contains("1970"), "{out}");
}

/// `recording show` lists instruction-count frames (instrumented mode): how many, and the
/// warp instructions per function summed over them (a hand-written recording).
#[test]
fn recording_show_sums_instruction_counts_per_function() {
    use gpumeter_recording::gmr::{
        Frame, FunctionInstructions, GmrHeader, GmrWriter, InstructionCounts,
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("instr.gmr");
    let header = GmrHeader {
        cupti_api_version: 130001,
        instrumented: true,
        ..GmrHeader::default()
    };
    let mut w = GmrWriter::new(Vec::new(), &header).expect("header");
    let launch = |correlation_id, functions: &[(&str, u64)]| {
        Frame::Instructions(InstructionCounts {
            correlation_id,
            device_id: 0,
            context_id: 1,
            functions: functions
                .iter()
                .map(|&(name, warp_instructions)| FunctionInstructions {
                    name: name.to_string(),
                    warp_instructions,
                })
                .collect(),
        })
    };
    for f in [
        launch(5, &[("_Z6vecAddPKfS0_Pfi", 1_000)]),
        launch(9, &[("_Z6vecAddPKfS0_Pfi", 1_000)]),
        launch(12, &[("_Z5scalePfi", 40), ("_Z6vecAddPKfS0_Pfi", 1_000)]),
    ] {
        w.write_frame(&f).expect("frame");
    }
    std::fs::write(&path, w.finish().expect("finish")).expect("write");

    let s = show_json(&path);
    assert_eq!(s["header"]["instrumented"], true);
    assert_eq!(s["instruction_frames"], 3);
    assert_eq!(
        s["instructions"],
        serde_json::json!([
            {"name": "_Z6vecAddPKfS0_Pfi", "launches": 3, "warp_instructions": 3_000,
             "min_per_launch": 1_000, "max_per_launch": 1_000},
            {"name": "_Z5scalePfi", "launches": 1, "warp_instructions": 40,
             "min_per_launch": 40, "max_per_launch": 40},
        ])
    );

    let o = gpumeter()
        .args(["recording", "show"])
        .arg(&path)
        .output()
        .expect("show");
    let out = text(&o.stdout);
    assert!(
        out.contains("instructions  3 instruction-count frames (instrumented run")
            && out.contains("              WARP INSTRUCTIONS  LAUNCHES  FUNCTION\n")
            && out.contains("                          3,000         3  _Z6vecAddPKfS0_Pfi\n")
            && out.contains("                             40         1  _Z5scalePfi"),
        "{out}"
    );
}

/// PM sampling end to end with the fake libcupti: `record --pm-sampling --pm-interval` sets the
/// library up through every PM sampling and profiler host call (struct sizes checked by the
/// fake against CUPTI 12.8's headers), and the samples land in the recording as one
/// PM-sample frame, the overflow flagged and the negative value left out.
#[test]
fn a_fake_cuda_program_records_pm_samples() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((fake, app)) = build_fakes(dir.path()) else {
        return;
    };
    let out = dir.path().join("pm.gmr");
    let o = gpumeter()
        .args(["record", "--out"])
        .arg(&out)
        .args(["--pm-sampling", "--pm-interval", "10us", "--"])
        .arg(&app)
        .env("GPUMETER_INJECT_LIB", inject_lib())
        .env("GPUMETER_CUPTI_LIB", &fake)
        .env("GPUMETER_ENERGY", "0")
        .env("FAKE_CUPTI_PM_INTERVAL", "10000")
        .env("FAKE_CUPTI_PM_OVERFLOW", "1")
        .output()
        .expect("record");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(text(&o.stdout).contains("InitializeInjection=1"), "{err}");
    // The overflow and the unusable value are reported, never silent.
    assert!(err.contains("overflowed 1 time"), "{err}");
    assert!(err.contains("1 counter value"), "{err}");
    let file = gpumeter_recording::gmr::read_gmr(&std::fs::read(&out).expect("read")).expect("gmr");
    let frames: Vec<_> = file
        .frames
        .into_iter()
        .filter_map(|f| match f.frame {
            gpumeter_recording::gmr::Frame::PmSamples(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0].device_id, 0);
    let s = &frames[0].samples;
    // 3 decoded samples, then a counter-free sample carrying the overflow (nothing followed).
    assert_eq!(s.len(), 4, "{s:?}");
    let active: Vec<_> = s.iter().map(|x| x.sm_active_cycles).collect();
    assert_eq!(active, vec![Some(500), Some(1000), Some(1500), None]);
    assert!(s[..3].iter().all(|x| x.sm_elapsed_cycles == Some(1000)));
    assert!(s[..3].iter().all(|x| x.dram_read_bytes == Some(4096)));
    let write: Vec<_> = s.iter().map(|x| x.dram_write_bytes).collect();
    assert_eq!(write, vec![Some(2048), Some(2048), None, None]);
    assert!(s.windows(2).all(|w| w[0].end_ns <= w[1].start_ns));
    assert_eq!(s[0].end_ns - s[0].start_ns, 1000);
    let flags: Vec<_> = s.iter().map(|x| x.overflow).collect();
    assert_eq!(flags, vec![false, false, false, true]);
    assert_eq!((s[3].start_ns, s[3].end_ns), (s[2].end_ns, s[2].end_ns));
    // `recording show` tells the same.
    let pm = &show_json(&out)["pm"];
    assert_eq!(pm[0]["device"], 0, "{pm}");
    assert_eq!(pm[0]["samples"], 4, "{pm}");
    assert_eq!(pm[0]["overflows"], 1, "{pm}");
}

/// Without permission to read GPU counters the program and its activity recording go on, and
/// the library says how to allow it.
#[test]
fn pm_sampling_without_permission_says_how_to_allow_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((fake, app)) = build_fakes(dir.path()) else {
        return;
    };
    let out = dir.path().join("denied.gmr");
    let o = gpumeter()
        .args(["record", "--out"])
        .arg(&out)
        .args(["--pm-sampling", "--"])
        .arg(&app)
        .env("GPUMETER_INJECT_LIB", inject_lib())
        .env("GPUMETER_CUPTI_LIB", &fake)
        .env("GPUMETER_ENERGY", "0")
        .env("FAKE_CUPTI_PM_ENABLE_RC", "35")
        .output()
        .expect("record");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("NVreg_RestrictProfilingToAdminUsers=0"),
        "{err}"
    );
    assert!(err.contains("device 0"), "{err}");
    let file = gpumeter_recording::gmr::read_gmr(&std::fs::read(&out).expect("read")).expect("gmr");
    assert!(file.finished);
    assert!(!file
        .frames
        .iter()
        .any(|f| matches!(f.frame, gpumeter_recording::gmr::Frame::PmSamples(_))));
}

/// `--flops` reaches the injection library as GPUMETER_FLOPS=1, and an inherited value never
/// leaks into a run without it.
#[test]
fn flops_flag_reaches_the_injection_library_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("flops.gmr");
    let run = |flags: &[&str]| {
        gpumeter()
            .args(["record", "--out"])
            .arg(&out)
            .args(flags)
            .args(["--", "sh", "-c", "printf '%s' \"$GPUMETER_FLOPS\""])
            .env("GPUMETER_INJECT_LIB", inject_lib())
            .env("GPUMETER_FLOPS", "1")
            .output()
            .expect("run gpumeter record")
    };
    let o = run(&["--flops"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "1");
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), "", "off unless asked for");
}

/// FLOP counters end to end with the fake libcupti: `record --flops` sets the range profiler
/// up through every range-profiler and profiler host call (struct sizes checked by the fake
/// against CUPTI 12.8's headers; auto range, kernel replay), the launches' correlation ids are
/// noted through the launch callback, and the decoded ranges land in the recording as one
/// operation-counters frame; `recording show` lists it and `usage` meters the FLOPs exactly,
/// with the range-profiler instrumentation warning.
#[test]
fn a_fake_cuda_program_records_flop_counters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((fake, app)) = build_fakes(dir.path()) else {
        return;
    };
    let out = dir.path().join("flops.gmr");
    let o = gpumeter()
        .args(["record", "--out"])
        .arg(&out)
        .args(["--flops", "--"])
        .arg(&app)
        .env("GPUMETER_INJECT_LIB", inject_lib())
        .env("GPUMETER_CUPTI_LIB", &fake)
        .env("GPUMETER_ENERGY", "0")
        .env("FAKE_CUPTI_KERNELS", "4")
        .output()
        .expect("record");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    // The replay cost is said at exit.
    assert!(
        err.contains("10 metrics, 2 replay passes per kernel"),
        "{err}"
    );
    assert!(
        err.contains("4 kernel launches in 1 frames, 0 without counters"),
        "{err}"
    );
    let file = gpumeter_recording::gmr::read_gmr(&std::fs::read(&out).expect("read")).expect("gmr");
    let frames: Vec<_> = file
        .frames
        .into_iter()
        .filter_map(|f| match f.frame {
            gpumeter_recording::gmr::Frame::OpCounts(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(frames.len(), 1, "{frames:?}");
    let f = &frames[0];
    assert_eq!((f.device_id, f.context_id, f.passes), (0, 1, 2));
    let corr: Vec<u32> = f.kernels.iter().map(|k| k.correlation_id).collect();
    assert_eq!(corr, [1, 2, 3, 4]);
    for k in &f.kernels {
        // Nine SASS counters and the tensor total; its sparsity part is not collected.
        assert_eq!(k.counters.len(), 10, "{k:?}");
        assert!(k.counters.iter().all(|c| !c.metric.contains("sparsity")));
    }
    // Range r (from 0): counter k of dadd..hfma is (k+1)(r+1), so per precision p (0 fp64,
    // 1 fp32, 2 fp16) add + mul + 2 fma = (3p+1 + 3p+2 + 2(3p+3))(r+1) = (12p+9)(r+1); over
    // ranges 0..3, Σ(r+1) = 10. Tensor: 100(r+1), Σ = 1000.
    let usage = gpumeter()
        .args(["usage", "--json"])
        .arg(&out)
        .output()
        .expect("usage");
    assert_eq!(usage.status.code(), Some(0), "{}", text(&usage.stderr));
    let v: serde_json::Value = serde_json::from_slice(&usage.stdout).expect("JSON");
    let total = |meter: &str| -> u64 {
        v["totals"]
            .as_array()
            .expect("totals")
            .iter()
            .filter(|t| t["meter"] == meter)
            .map(|t| {
                t["quantity"]
                    .as_str()
                    .and_then(|q| q.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    };
    assert_eq!(total("flops_fp64"), 90, "{v}");
    assert_eq!(total("flops_fp32"), 210, "{v}");
    assert_eq!(total("flops_fp16"), 330, "{v}");
    assert_eq!(total("tensor_ops"), 1000, "{v}");
    let warned = v["warnings"].as_array().expect("warnings").iter().any(|w| {
        w["code"] == "instrumented_run"
            && w["message"]
                .as_str()
                .is_some_and(|m| m.contains("CUPTI range profiler for the FLOP counters"))
    });
    assert!(warned, "{v}");
    let show = show_json(&out);
    assert_eq!(show["op_frames"], 1, "{show}");
    assert_eq!(show["op_launches"], 4, "{show}");
    assert_eq!(show["op_passes"][0], 2, "{show}");
    let shown = gpumeter()
        .args(["recording", "show"])
        .arg(&out)
        .output()
        .expect("show");
    let s = text(&shown.stdout);
    assert!(
        s.contains("op counters   1 operation-counters frame for 4 kernel launches"),
        "{s}"
    );
}

/// Without permission to read GPU counters the program and its activity recording go on, and
/// the library says how to allow it; no operation-counters frame is written.
#[test]
fn flops_without_permission_says_how_to_allow_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((fake, app)) = build_fakes(dir.path()) else {
        return;
    };
    let out = dir.path().join("denied.gmr");
    let o = gpumeter()
        .args(["record", "--out"])
        .arg(&out)
        .args(["--flops", "--"])
        .arg(&app)
        .env("GPUMETER_INJECT_LIB", inject_lib())
        .env("GPUMETER_CUPTI_LIB", &fake)
        .env("GPUMETER_ENERGY", "0")
        .env("FAKE_CUPTI_RANGE_ENABLE_RC", "35")
        .output()
        .expect("record");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("NVreg_RestrictProfilingToAdminUsers=0"),
        "{err}"
    );
    let file = gpumeter_recording::gmr::read_gmr(&std::fs::read(&out).expect("read")).expect("gmr");
    assert!(file.finished);
    assert!(!file
        .frames
        .iter()
        .any(|f| matches!(f.frame, gpumeter_recording::gmr::Frame::OpCounts(_))));
}

/// A launch that returns an error makes no range: it is not noted, so the ranges stay paired
/// with the launches that made them (launch 2 failed: ranges 0, 1, 2 are launches 1, 3, 4),
/// and its kernel record, without counters, leaves the FLOP meters not meterable rather than
/// billed from another kernel's counts.
#[test]
fn a_failed_launch_does_not_shift_the_ranges() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((fake, app)) = build_fakes(dir.path()) else {
        return;
    };
    let out = dir.path().join("failed.gmr");
    let o = gpumeter()
        .args(["record", "--out"])
        .arg(&out)
        .args(["--flops", "--"])
        .arg(&app)
        .env("GPUMETER_INJECT_LIB", inject_lib())
        .env("GPUMETER_CUPTI_LIB", &fake)
        .env("GPUMETER_ENERGY", "0")
        .env("FAKE_CUPTI_KERNELS", "4")
        .env("FAKE_CUPTI_FAILED_LAUNCH", "2")
        .output()
        .expect("record");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("3 kernel launches in 1 frames, 0 without counters"),
        "{err}"
    );
    let file = gpumeter_recording::gmr::read_gmr(&std::fs::read(&out).expect("read")).expect("gmr");
    let kernels: Vec<(u32, u64)> = file
        .frames
        .into_iter()
        .filter_map(|f| match f.frame {
            gpumeter_recording::gmr::Frame::OpCounts(c) => Some(c.kernels),
            _ => None,
        })
        .flatten()
        .map(|k| {
            let dadd = k
                .counters
                .iter()
                .find(|c| c.metric == "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum")
                .map_or(0, |c| c.value);
            (k.correlation_id, dadd)
        })
        .collect();
    // dadd of range r is 1 × (r + 1).
    assert_eq!(kernels, [(1, 1), (3, 2), (4, 3)]);
}
