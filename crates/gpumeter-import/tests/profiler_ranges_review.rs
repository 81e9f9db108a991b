//! Hostile review of issue 17's Kineto profiler-range import: inputs a user or a converter can
//! write that make GPU work or FLOPs appear twice, vanish silently, or depend on input order.

use gpumeter_core::WarningCode;

use super::profiler_ranges::{kernel, launch, meter_text, trace};
use super::*;

const UUID_BASE: &str = r#""baseTimeNanoseconds": 1700000000000000000, "deviceProperties": [{"id": 0, "uuid": "GPU-5d2a1f44-0000-0000-0000-000000000017", "name": "NVIDIA A100-PG509-200", "numSms": 108, "computeMajor": 8, "computeMinor": 0}]"#;

/// fp32 counters: n fadd, 0 fmul, n ffma → 3n FLOPs; fp64 and fp16 zero.
fn fp32_args(n: u64) -> String {
    let mut a = String::new();
    for p in ['d', 'f', 'h'] {
        for op in ["add", "mul", "fma"] {
            let v = if p == 'f' && op != "mul" { n } else { 0 };
            a.push_str(&format!(
                r#""smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum": {v}, "#
            ));
        }
    }
    a.push_str(r#""sm__cycles_active.avg": 1"#);
    a
}

/// A kernel event on device 1 and its range, whose `args.device` is the string "1" (which
/// the importer reads as device 1 everywhere else): the range's counts must attach to the
/// kernel, not make a second launch.
#[test]
fn a_range_whose_device_is_a_string_is_not_a_second_launch() {
    let range = format!(
        r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "gemm", "pid": 1, "tid": 0, "ts": 1000, "dur": 50, "args": {{"device": "1", {}}}}}"#,
        fp32_args(10)
    );
    let (r, s) = meter_text(&trace(&[
        launch(1, 10),
        kernel("gemm", 1, 100, 10, 1),
        range,
    ]));
    let key = source_key(&s, 1);
    assert_eq!(
        r.device_total(&key, MeterKind::KernelLaunches),
        1,
        "one kernel ran; warnings: {:?}",
        r.warnings
    );
    assert_eq!(r.device_total(&key, MeterKind::KernelNs), 10_000);
    assert_eq!(r.device_total(&key, MeterKind::FlopsFp32), 30);
}

/// A range-only trace whose measured ranges are written as B/E pairs (a converter's or a
/// hand-edited trace; Kineto writes X): the GPU work must be metered, or at least warned
/// about — never only a `records.skipped` count, the silence issue 17 was filed for.
#[test]
fn begin_end_ranges_with_counters_are_not_silently_skipped() {
    let args = fp32_args(10);
    let events = vec![
        format!(
            r#"{{"ph": "B", "cat": "cuda_profiler_range", "name": "gemm", "pid": 0, "tid": 0, "ts": 1000, "args": {{{args}}}}}"#
        ),
        r#"{"ph": "E", "cat": "cuda_profiler_range", "name": "gemm", "pid": 0, "tid": 0, "ts": 1050}"#
            .to_string(),
    ];
    let (r, _) = meter_text(&trace(&events));
    let metered = r
        .totals
        .iter()
        .any(|t| t.meter == MeterKind::KernelLaunches);
    assert!(
        metered || !r.warnings.is_empty(),
        "a measured kernel range vanished without a warning: skipped {:?}",
        r.records.skipped
    );
}

/// Kernel launches on the CPU side, memcpys but no kernel recorded GPU-side (kernel events
/// filtered out, or a CUPTI buffer of kernels dropped): the launched kernels are GPU work
/// not metered, and must be warned about as the no-GPU-events case is.
#[test]
fn kernel_launches_without_kernel_events_warn_even_when_memcpys_were_recorded() {
    let memcpy = r#"{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 5, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": 99, "bytes": 1024}}"#;
    let events = vec![
        memcpy.to_string(),
        launch(1, 10),
        launch(2, 20),
        launch(3, 30),
    ];
    let (r, _) = meter_text(&trace(&events));
    assert!(
        r.warnings
            .iter()
            .any(|w| w.code() == &WarningCode::LaunchesWithoutGpuEvents),
        "3 kernel launches, 0 kernels metered, no warning: {:?}",
        r.warnings
    );
}

/// Two kernel names each with one more range than kernels: the `unmatched_profiler_ranges`
/// warning says "the first, traceEvents[i]"; it must name the first such range, and the
/// same one on every run (a report's digest must not depend on a hash seed).
#[test]
fn the_unmatched_ranges_warning_names_the_first_range_every_time() {
    let args = fp32_args(1);
    let r = |name: &str, ts: u64| {
        format!(
            r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "{name}", "pid": 0, "tid": 0, "ts": {ts}, "dur": 10, "args": {{{args}}}}}"#
        )
    };
    // traceEvents[2] (`a`, second of its name) is the first range left over.
    let events = vec![
        kernel("a", 0, 100, 10, 1),
        kernel("b", 0, 120, 10, 2),
        r("a", 1_000),
        r("a", 1_010),
        r("b", 1_020),
        r("b", 1_030),
    ];
    let text = trace(&events);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..16 {
        let (rep, _) = meter_text(&text);
        let w = rep
            .warnings
            .iter()
            .find(|w| w.code() == &WarningCode::UnmatchedProfilerRanges)
            .expect("unmatched_profiler_ranges");
        seen.insert(w.to_string());
    }
    assert_eq!(seen.len(), 1, "the warning varies between runs: {seen:#?}");
    let w = seen.into_iter().next().unwrap_or_default();
    assert!(w.contains("traceEvents[3]"), "{w}");
}

/// Two ranges on a range-only device with the same name, counters and times (Kineto splits
/// its span evenly over the ranges: with more ranges than time units, they share `ts` and
/// `dur`): two kernel launches ran, and both must be metered, not one taken for a duplicate
/// of the other.
#[test]
fn identical_ranges_are_two_launches() {
    let args = fp32_args(10);
    let r = format!(
        r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "gemm", "pid": 0, "tid": 0, "ts": 1000, "dur": 0, "args": {{{args}}}}}"#
    );
    let (rep, s) = meter_text(&trace(&[r.clone(), r]));
    let key = source_key(&s, 0);
    assert_eq!(
        rep.device_total(&key, MeterKind::KernelLaunches),
        2,
        "loss: {:?}",
        rep.loss
    );
    assert_eq!(rep.device_total(&key, MeterKind::FlopsFp32), 60);
}

/// A profiler-mode trace (ranges, no kernel events) of one process, metered with a tenant
/// map by pid naming that process: the FLOPs are that tenant's, or the report says why
/// they could not be attributed.
#[test]
fn range_only_flops_reach_the_tenant_of_the_traced_process_or_say_why_not() {
    let args = fp32_args(10);
    let events = vec![
        launch(1, 10),
        format!(
            r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "gemm", "pid": 0, "tid": 0, "ts": 1000, "dur": 50, "args": {{{args}}}}}"#
        ),
    ];
    let mut meter = Meter::new(MeterConfig::default());
    meter.set_tenant_map(TenantMap {
        external: HashMap::new(),
        pid: HashMap::from([(4242, tn("acme"))]),
    });
    ok(import_bytes(
        &mut meter,
        "prof.json",
        trace(&events).as_bytes(),
        &ImportOptions::default(),
    ));
    let r = ok(meter.finish());
    let acme: u128 = r
        .totals
        .iter()
        .filter(|t| t.tenant == "acme" && t.meter == MeterKind::FlopsFp32)
        .map(|t| t.quantity.0)
        .sum();
    let told = r.warnings.iter().any(|w| {
        let w = w.to_string();
        w.contains("pid") || w.contains("process id") || w.contains("tenant")
    });
    assert!(
        acme == 30 || told,
        "FLOPs of process 4242 went to {:?} without a word; warnings {:?}",
        r.totals
            .iter()
            .filter(|t| t.meter == MeterKind::FlopsFp32)
            .map(|t| (&t.tenant, t.quantity.0))
            .collect::<Vec<_>>(),
        r.warnings
    );
}

/// The same kernel in two traces of one GPU (same UUID): one without its profiler range, one
/// with. Through `import_paths` (the CLI's path, which compares whole sources before pushing)
/// the FLOPs billed do not depend on the order the files are given in. (Pushed record by
/// record with `import_bytes`, the meter keeps the first copy of a duplicate: see the closing
/// note of issue 17.)
#[test]
fn merged_trace_files_bill_the_same_flops_in_either_order() {
    let range = format!(
        r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "gemm", "pid": 0, "tid": 0, "ts": 1000, "dur": 50, "args": {{{}}}}}"#,
        fp32_args(10)
    );
    let k = kernel("gemm", 0, 100, 10, 1);
    let dir = std::env::temp_dir().join(format!("gpumeter-review17-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let plain = dir.join("plain.json");
    let measured = dir.join("measured.json");
    std::fs::write(&plain, format!(r#"{{{UUID_BASE}, "traceEvents": [{k}]}}"#)).expect("write");
    std::fs::write(
        &measured,
        format!(r#"{{{UUID_BASE}, "traceEvents": [{k}, {range}]}}"#),
    )
    .expect("write");
    let run = |paths: &[&std::path::Path]| {
        let mut meter = Meter::new(MeterConfig::default());
        ok(import_paths(&mut meter, paths, &ImportOptions::default()));
        let r = ok(meter.finish());
        let key = "GPU-5d2a1f44-0000-0000-0000-000000000017";
        (
            r.device_total(key, MeterKind::FlopsFp32),
            r.device_total(key, MeterKind::KernelLaunches),
        )
    };
    let a = run(&[&measured, &plain]);
    let b = run(&[&plain, &measured]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(a, (30, 1));
    assert_eq!(b, a, "(flops_fp32, kernel_launches)");
}

/// PyTorch's default CUPTI-profiler mode (`_ExperimentalConfig(profiler_metrics=[…])`,
/// `profiler_measure_per_kernel` false) profiles a user range: Kineto writes one
/// `cuda_profiler_range` per device named `__profile__` (its `kRootUserRangeName`) holding the
/// counters of every kernel of the session. That range is not one kernel launch: billing it
/// as `kernel_launches` 1 under-bills launches, so it must not be counted as one kernel (its
/// FLOPs are still the session's), or the report must say the range is a whole session.
#[test]
fn a_user_range_of_the_whole_session_is_not_one_kernel_launch() {
    let args = fp32_args(1_000_000);
    let session = format!(
        r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "__profile__", "pid": 0, "tid": 0, "ts": 1000, "dur": 900000, "args": {{{args}}}}}"#
    );
    let (r, s) = meter_text(&trace(&[session]));
    let key = source_key(&s, 0);
    assert_eq!(r.device_total(&key, MeterKind::FlopsFp32), 3_000_000);
    let told = r.warnings.iter().any(|w| w.contains("__profile__"));
    assert!(
        r.device_total(&key, MeterKind::KernelLaunches) != 1 || told,
        "a whole profiling session billed as 1 kernel launch of 900 ms: {:?}",
        r.warnings
    );
}

/// Two `gemm` launches of two processes (tenants) on two streams: the first launched
/// (correlation 1, `acme`) starts on the GPU after the second (correlation 2, `beta`). The
/// profiler replays kernels in launch order, so the first range holds the first launch's
/// counters; matching ranges to kernels by GPU start time instead gives each tenant the
/// other's FLOPs.
#[test]
fn ranges_follow_launch_order_not_gpu_start_order_across_streams() {
    let args = |n: u64| fp32_args(n);
    let api = |corr: u32, pid: u32, ts: u64| {
        format!(
            r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, "tid": {pid}, "ts": {ts}, "dur": 3, "args": {{"correlation": {corr}, "cbid": 211}}}}"#
        )
    };
    let on_stream = |corr: u32, stream: u32, ts: u64| {
        kernel("gemm", 0, ts, 10, corr).replace(r#""stream": 7"#, &format!(r#""stream": {stream}"#))
    };
    let range = |ts: u64, n: u64| {
        format!(
            r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "gemm", "pid": 0, "tid": 0, "ts": {ts}, "dur": 50, "args": {{{}}}}}"#,
            args(n)
        )
    };
    let events = vec![
        api(1, 4242, 10),
        api(2, 5151, 20),
        on_stream(1, 7, 200),
        on_stream(2, 8, 100),
        range(1_000, 10),
        range(1_050, 1_000),
    ];
    let mut meter = Meter::new(MeterConfig::default());
    meter.set_tenant_map(TenantMap {
        external: HashMap::new(),
        pid: HashMap::from([(4242, tn("acme")), (5151, tn("beta"))]),
    });
    ok(import_bytes(
        &mut meter,
        "prof.json",
        trace(&events).as_bytes(),
        &ImportOptions::default(),
    ));
    let r = ok(meter.finish());
    let of = |t: &str| -> u128 {
        r.totals
            .iter()
            .filter(|x| x.tenant == t && x.meter == MeterKind::FlopsFp32)
            .map(|x| x.quantity.0)
            .sum()
    };
    assert_eq!((of("acme"), of("beta")), (30, 3_000));
}

/// The tensor-path counters of integer and FP64 sources have no `_dst_` part on A100/H100
/// (`sm__ops_path_tensor_src_int8.sum`, `_int4`, `_int1`, `_fp64`: `ncu --query-metrics`),
/// and METERING.md says `tensor_ops` sums INT8 sources. A range recording INT8 tensor work
/// must bill it, or the report must say the counter was left out — not drop it silently.
#[test]
fn int8_and_fp64_tensor_path_counters_are_counted_or_told() {
    for counter in [
        "sm__ops_path_tensor_src_int8.sum",
        "sm__ops_path_tensor_src_fp64.sum",
    ] {
        let r = format!(
            r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "igemm", "pid": 0, "tid": 0, "ts": 1000, "dur": 50, "args": {{{}, "{counter}": 4096}}}}"#,
            fp32_args(0)
        );
        let (rep, s) = meter_text(&trace(&[r]));
        let key = source_key(&s, 0);
        let told = rep.warnings.iter().any(|w| w.contains(counter));
        assert!(
            rep.device_total(&key, MeterKind::TensorOps) == 4096 || told,
            "{counter}: tensor_ops {} and no warning: {:?}",
            rep.device_total(&key, MeterKind::TensorOps),
            rep.warnings
        );
    }
}

/// Kineto's range profiler holds at most `KMaxAutoRanges` (1500) per-kernel ranges per
/// session (`CUPTI_PROFILER_MAX_RANGES`): the kernels launched after that have no range. In
/// per-kernel mode the trace has the CPU-side launches, so a trace with more kernel launches
/// than ranges (and no kernel events) ran GPU work that is not metered, and must say so.
#[test]
fn more_kernel_launches_than_ranges_warn() {
    let args = fp32_args(1);
    let r = |ts: u64| {
        format!(
            r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "k", "pid": 0, "tid": 0, "ts": {ts}, "dur": 10, "args": {{{args}}}}}"#
        )
    };
    let events = vec![
        launch(1, 10),
        launch(2, 20),
        launch(3, 30),
        r(1_000),
        r(1_010),
    ];
    let (rep, s) = meter_text(&trace(&events));
    assert_eq!(
        rep.device_total(&source_key(&s, 0), MeterKind::KernelLaunches),
        2
    );
    let told = rep
        .warnings
        .iter()
        .filter(|w| {
            !matches!(
                w.code(),
                WarningCode::InstrumentedRun | WarningCode::NotMeterable
            )
        })
        .any(|w| w.contains("launch"));
    assert!(
        told,
        "3 kernel launches, 2 ranges: one kernel's work is not metered, silently: {:?}",
        rep.warnings
    );
}

/// A kernel device and a range-only device in one trace, the ranges of both named alike:
/// device 0's range attaches to its kernel, device 1's range is its own launch; nothing
/// crosses devices, nothing is counted twice.
#[test]
fn a_kernel_device_and_a_range_only_device_stay_apart() {
    let r = |dev: u32, ts: u64, n: u64| {
        format!(
            r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "gemm", "pid": {dev}, "tid": 0, "ts": {ts}, "dur": 10, "args": {{{}}}}}"#,
            fp32_args(n)
        )
    };
    let events = vec![
        launch(1, 10),
        kernel("gemm", 0, 100, 10, 1),
        r(1, 1_000, 100),
        r(0, 1_010, 1),
        r(1, 1_020, 10_000),
    ];
    let (rep, s) = meter_text(&trace(&events));
    let (k0, k1) = (source_key(&s, 0), source_key(&s, 1));
    assert_eq!(rep.device_total(&k0, MeterKind::KernelLaunches), 1);
    assert_eq!(rep.device_total(&k0, MeterKind::FlopsFp32), 3);
    assert_eq!(rep.device_total(&k0, MeterKind::KernelNs), 10_000);
    assert_eq!(rep.device_total(&k1, MeterKind::KernelLaunches), 2);
    assert_eq!(rep.device_total(&k1, MeterKind::FlopsFp32), 30_300);
    assert!(rep.loss.is_empty(), "{:?}", rep.loss);
    assert!(!rep.records.skipped.contains_key("cuda_profiler_range"));
    let w = rep
        .warnings
        .iter()
        .find(|w| w.code() == &WarningCode::InstrumentedRun)
        .expect("instrumented_run");
    assert!(
        w.contains("2 kernel launches") && w.contains("1 kernels carry"),
        "{}",
        &**w
    );
}

/// Counters as Kineto may write them (a double formatted as `1e+16` or `4.0`, a numeric
/// string) are read exactly; a fraction, a negative, a number past u64 or `true` make the
/// range a lost record (`invalid_field`), never a panic, and a `null` counter is not given.
#[test]
fn counter_spellings_are_read_exactly_or_lose_the_range() {
    let one = |v: &str| {
        let mut a = String::new();
        for p in ['d', 'f', 'h'] {
            for op in ["add", "mul", "fma"] {
                let val = if p == 'f' && op == "fma" { v } else { "0" };
                a.push_str(&format!(
                    r#""smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum": {val}, "#
                ));
            }
        }
        let r = format!(
            r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "k", "pid": 0, "tid": 0, "ts": 1000, "dur": 10, "args": {{{a}"x__y": 1}}}}"#
        );
        let (rep, s) = meter_text(&trace(&[r]));
        let key = source_key(&s, 0);
        (
            rep.device_total(&key, MeterKind::KernelLaunches),
            rep.device_total(&key, MeterKind::FlopsFp32),
            rep.loss.iter().map(|l| l.records).sum::<u64>(),
        )
    };
    assert_eq!(one("1e+16"), (1, 2 * 10_000_000_000_000_000, 0));
    assert_eq!(one("4.0"), (1, 8, 0));
    assert_eq!(one("\"12\""), (1, 24, 0));
    assert_eq!(one("-0"), (1, 0, 0));
    // A null ffma: fp32 recorded in part, so not counted; the launch is still metered.
    assert_eq!(one("null"), (1, 0, 0));
    for bad in [
        "0.5",
        "-1",
        "18446744073709551616",
        "true",
        "1e400",
        "[1]",
        "{}",
    ] {
        let (launches, flops, lost) = one(bad);
        assert_eq!((launches, flops, lost), (0, 0, 1), "{bad}");
    }
    // 2 × ffma past u64: the fp32 total overflows; the launch is metered without it.
    assert_eq!(one("18446744073709551615").0, 1);
    assert_eq!(one("18446744073709551615").1, 0);
}
