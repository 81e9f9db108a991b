//! Kineto traces in CUPTI-profiler mode (issue 17): `cuda_profiler_range` events carrying
//! CUPTI's SASS op and tensor-path counters. Range-only traces meter each range as a kernel
//! launch with its FLOPs; traces with kernels attach the ranges' counters to them (each kernel
//! once); CPU-side launches with nothing GPU-side recorded are warned about.

use gpumeter_core::WarningCode;
use proptest::prelude::*;

use super::*;

pub(super) const BASE: &str = r#""baseTimeNanoseconds": 1700000000000000000, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-PG509-200", "numSms": 108, "computeMajor": 8, "computeMinor": 0}, {"id": 1, "name": "NVIDIA A100-PG509-200", "numSms": 108, "computeMajor": 8, "computeMinor": 0}]"#;

const PRECISIONS: [char; 3] = ['d', 'f', 'h'];

pub(super) fn meter_text(text: &str) -> (UsageReport, ImportSummary) {
    let mut meter = Meter::new(MeterConfig::default());
    let s = ok(import_bytes(
        &mut meter,
        "prof.json",
        text.as_bytes(),
        &ImportOptions::default(),
    ));
    (ok(meter.finish()), s)
}

fn codes(r: &UsageReport) -> Vec<WarningCode> {
    r.warnings.iter().map(|w| w.code().clone()).collect()
}

/// One range's counters: per precision (d, f, h) add, mul, fma; then tensor-path ops of two
/// source types and a sparsity part (which must not be added).
#[derive(Debug, Clone)]
struct Counters {
    sass: [[u64; 3]; 3],
    tensor: Option<[u64; 3]>,
}

impl Counters {
    fn args(&self) -> String {
        let mut a = String::new();
        for (p, vals) in PRECISIONS.iter().zip(self.sass) {
            for (op, v) in ["add", "mul", "fma"].iter().zip(vals) {
                a.push_str(&format!(
                    r#""smsp__sass_thread_inst_executed_op_{p}{op}_pred_on.sum": {v}, "#
                ));
            }
        }
        if let Some([f16, bf16, sparse]) = self.tensor {
            a.push_str(&format!(
                r#""sm__ops_path_tensor_src_fp16_dst_fp32.sum": {f16}, "sm__ops_path_tensor_src_bf16_dst_fp32.sum": {bf16}, "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_on.sum": {sparse}, "#
            ));
        }
        a.push_str(r#""sm__cycles_active.avg": 12.5"#);
        a
    }

    fn flops(&self, p: usize) -> u128 {
        let [add, mul, fma] = self.sass[p];
        u128::from(add) + u128::from(mul) + 2 * u128::from(fma)
    }

    fn tensor_ops(&self) -> Option<u128> {
        self.tensor.map(|[a, b, _]| u128::from(a) + u128::from(b))
    }
}

/// A `cuda_profiler_range` event on device `dev` from `ts` µs for `dur` µs.
fn range(name: &str, dev: u32, ts: u64, dur: u64, c: &Counters) -> String {
    format!(
        r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "{name}", "pid": {dev}, "tid": 0, "ts": {ts}, "dur": {dur}, "args": {{{}}}}}"#,
        c.args()
    )
}

pub(super) fn kernel(name: &str, dev: u32, ts: u64, dur: u64, corr: u32) -> String {
    format!(
        r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": {dev}, "tid": 7, "ts": {ts}, "dur": {dur}, "args": {{"device": {dev}, "stream": 7, "correlation": {corr}, "grid": [4, 1, 1], "block": [128, 1, 1], "registers per thread": 32, "shared memory": 0}}}}"#
    )
}

pub(super) fn launch(corr: u32, ts: u64) -> String {
    format!(
        r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": {ts}, "dur": 3, "args": {{"correlation": {corr}, "cbid": 211}}}}"#
    )
}

pub(super) fn trace(events: &[String]) -> String {
    format!(r#"{{{BASE}, "traceEvents": [{}]}}"#, events.join(",\n"))
}

fn arb_counters() -> impl Strategy<Value = Counters> {
    let v = || prop_oneof![Just(0u64), 0u64..10_000, 0u64..(1 << 50)];
    (
        prop::array::uniform3(prop::array::uniform3(v())),
        prop::option::of(prop::array::uniform3(v())),
    )
        .prop_map(|(sass, tensor)| Counters { sass, tensor })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// A profiler-mode trace (ranges with the counters, no kernel events): each range is one
    /// kernel launch on its device, timed by the range, and each FLOP meter is exactly
    /// Σ (add + mul + 2 × fma) of its precision over the device's ranges; tensor_ops is Σ of
    /// the tensor-path counters (not their sparsity part), and is metered only where every
    /// range records it.
    #[test]
    fn range_only_traces_meter_launches_and_flops_as_the_counters_sum(
        ranges in prop::collection::vec((0u32..2, 1u64..500, arb_counters()), 1..25),
    ) {
        let mut events = Vec::new();
        let mut ts = 1_000u64;
        for (i, (dev, dur, c)) in ranges.iter().enumerate() {
            events.push(range(&format!("k{}", i % 3), *dev, ts, *dur, c));
            events.push(launch(i as u32 + 1, ts));
            ts += dur;
        }
        let (r, s) = meter_text(&trace(&events));
        prop_assert!(r.loss.is_empty(), "{:?}", r.loss);
        prop_assert!(codes(&r).contains(&WarningCode::InstrumentedRun));
        prop_assert!(!codes(&r).contains(&WarningCode::LaunchesWithoutGpuEvents));
        prop_assert!(!r.records.skipped.contains_key("cuda_profiler_range"));
        for dev in 0..2u32 {
            let on: Vec<&(u32, u64, Counters)> =
                ranges.iter().filter(|(d, _, _)| *d == dev).collect();
            if on.is_empty() {
                continue;
            }
            let key = source_key(&s, dev);
            prop_assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), on.len() as u128);
            let ns: u128 = on.iter().map(|(_, d, _)| u128::from(*d) * 1_000).sum();
            prop_assert_eq!(r.device_total(&key, MeterKind::KernelNs), ns);
            for (p, m) in [MeterKind::FlopsFp64, MeterKind::FlopsFp32, MeterKind::FlopsFp16]
                .into_iter()
                .enumerate()
            {
                let want: u128 = on.iter().map(|(_, _, c)| c.flops(p)).sum();
                prop_assert_eq!(r.device_total(&key, m), want, "{}", m);
            }
            let tensor: Option<u128> = on.iter().map(|(_, _, c)| c.tensor_ops()).sum();
            prop_assert_eq!(r.device_total(&key, MeterKind::TensorOps), tensor.unwrap_or(0));
            let entry = r
                .devices
                .iter()
                .find(|d| d.device_key == key)
                .and_then(|d| d.not_meterable.iter().find(|n| n.meter == MeterKind::TensorOps));
            let some_count = on.iter().any(|(_, _, c)| c.tensor.is_some());
            prop_assert_eq!(entry.is_some(), tensor.is_none() && some_count);
        }
    }
}

#[test]
fn a_trace_with_kernels_and_ranges_counts_each_kernel_once() {
    let c = |n: u64| Counters {
        sass: [[0, 0, 0], [n, 0, n], [0, 0, 0]],
        tensor: Some([n, 0, 0]),
    };
    let events = vec![
        launch(1, 10),
        launch(2, 11),
        launch(3, 12),
        kernel("gemm", 0, 100, 10, 1),
        kernel("relu", 0, 120, 5, 2),
        kernel("gemm", 0, 130, 10, 3),
        // The profiler's replay: ranges in launch order, then one more `gemm` range than
        // kernels, and one without a kernel name.
        range("gemm", 0, 1_000, 50, &c(1)),
        range("relu", 0, 1_050, 50, &c(10)),
        range("gemm", 0, 1_100, 50, &c(100)),
        range("gemm", 0, 1_150, 50, &c(1_000)),
        range("__missing__", 0, 1_200, 50, &c(10_000)),
    ];
    let (r, s) = meter_text(&trace(&events));
    let key = source_key(&s, 0);
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 3);
    // Times are the kernels', never the ranges'.
    assert_eq!(r.device_total(&key, MeterKind::KernelNs), 25_000);
    // fp32: fadd + 2 × ffma = 3 per unit, from the three matched ranges only.
    assert_eq!(r.device_total(&key, MeterKind::FlopsFp32), 3 * 111);
    assert_eq!(r.device_total(&key, MeterKind::TensorOps), 111);
    assert_eq!(r.device_total(&key, MeterKind::FlopsFp64), 0);
    assert_eq!(r.records.skipped.get("cuda_profiler_range"), Some(&2));
    let c = codes(&r);
    assert!(c.contains(&WarningCode::UnmatchedProfilerRanges), "{c:?}");
    assert!(c.contains(&WarningCode::InstrumentedRun), "{c:?}");
    let w = r
        .warnings
        .iter()
        .find(|w| w.code() == &WarningCode::UnmatchedProfilerRanges)
        .expect("warning");
    assert!(w.contains("2 CUPTI-profiler ranges"), "{}", &**w);
    assert!(
        r.devices[0]
            .not_meterable
            .iter()
            .all(|n| n.meter != MeterKind::FlopsFp32),
        "{:?}",
        r.devices[0].not_meterable
    );
}

#[test]
fn a_kernel_its_ranges_do_not_reach_leaves_the_flop_meters_unmeterable() {
    let c = Counters {
        sass: [[1, 1, 1], [1, 1, 1], [1, 1, 1]],
        tensor: None,
    };
    let events = vec![
        kernel("gemm", 0, 100, 10, 1),
        kernel("gemm", 0, 130, 10, 2),
        range("gemm", 0, 1_000, 50, &c),
    ];
    let (r, s) = meter_text(&trace(&events));
    let key = source_key(&s, 0);
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 2);
    assert_eq!(r.device_total(&key, MeterKind::FlopsFp32), 0);
    let nm: Vec<MeterKind> = r.devices[0].not_meterable.iter().map(|n| n.meter).collect();
    for m in [
        MeterKind::FlopsFp64,
        MeterKind::FlopsFp32,
        MeterKind::FlopsFp16,
    ] {
        assert!(nm.contains(&m), "{m}: {nm:?}");
    }
}

#[test]
fn launches_with_nothing_gpu_side_warn_and_say_how_many() {
    let events = vec![launch(1, 10), launch(2, 20), launch(3, 30)];
    let (r, _) = meter_text(&trace(&events));
    let w = r
        .warnings
        .iter()
        .find(|w| w.code() == &WarningCode::LaunchesWithoutGpuEvents)
        .expect("a warning");
    assert!(w.contains("3 times"), "{}", &**w);
    assert!(r.devices.is_empty());
    // Host functions are not GPU work; kernels recorded mean no warning.
    let host = r#"{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchHostFunc", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"correlation": 9}}"#;
    let (r, _) = meter_text(&trace(&[host.to_string()]));
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    let (r, _) = meter_text(&trace(&[launch(1, 10), kernel("k", 0, 20, 5, 1)]));
    assert!(!codes(&r).contains(&WarningCode::LaunchesWithoutGpuEvents));
}

#[test]
fn ranges_without_counters_are_skipped_and_bad_counters_are_named() {
    let plain = r#"{"ph": "X", "cat": "cuda_profiler_range", "name": "k", "pid": 0, "tid": 0, "ts": 5, "dur": 1, "args": {}}"#;
    let (r, _) = meter_text(&trace(&[plain.to_string()]));
    assert_eq!(r.records.skipped.get("cuda_profiler_range"), Some(&1));
    assert_eq!(r.records.kernel, 0);

    let bad = r#"{"ph": "X", "cat": "cuda_profiler_range", "name": "k", "pid": 0, "tid": 0, "ts": 5, "dur": 1, "args": {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": -4}}"#;
    let (r, _) = meter_text(&trace(&[bad.to_string()]));
    assert_eq!(r.records.kernel, 0);
    let w = r
        .warnings
        .iter()
        .find(|w| w.code() == &WarningCode::InvalidField)
        .expect("invalid_field");
    assert!(
        w.contains("args.smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"),
        "{}",
        &**w
    );
    assert!(w.contains("traceEvents[0]"), "{}", &**w);

    let bad_tensor = r#"{"ph": "X", "cat": "cuda_profiler_range", "name": "k", "pid": 0, "tid": 0, "ts": 5, "dur": 1, "args": {"sm__ops_path_tensor_src_tf32_dst_fp32.sum": "many"}}"#;
    let (r, _) = meter_text(&trace(&[bad_tensor.to_string()]));
    let w = r
        .warnings
        .iter()
        .find(|w| w.code() == &WarningCode::InvalidField)
        .expect("invalid_field");
    assert!(
        w.contains("sm__ops_path_tensor_src_tf32_dst_fp32.sum"),
        "{}",
        &**w
    );
}

#[test]
fn a_flop_meter_recorded_in_part_is_not_counted() {
    // fadd and ffma but no fmul: fp32 would under-bill, so that range has no fp32 count.
    let part = r#"{"ph": "X", "cat": "cuda_profiler_range", "name": "k", "pid": 0, "tid": 0, "ts": 5, "dur": 1, "args": {"smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 4, "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 4}}"#;
    let (r, s) = meter_text(&trace(&[part.to_string()]));
    let key = source_key(&s, 0);
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 1);
    assert_eq!(r.device_total(&key, MeterKind::FlopsFp32), 0);
    assert!(
        codes(&r).contains(&WarningCode::PartialOpCounters),
        "{:?}",
        r.warnings
    );
}
