//! Review of the concurrent-kernel limit (issue 13): every kernel pushed is metered or lost
//! exactly once across the reports a meter hands out (drains and the final report).

use gpumeter_core::{
    ActivityRecord, ComputeCapability, DeviceInfo, KernelLaunch, Meter, MeterConfig, MeterKind,
    UsageReport, Work, MAX_RESIDENT_GRIDS,
};

const BASE: u64 = 1_700_000_000_000_000_000;
const SEC: u64 = 1_000_000_000;

fn meter_with_gpu() -> (Meter, gpumeter_core::DeviceSlot) {
    let mut meter = Meter::new(MeterConfig::default());
    let mut gpu = DeviceInfo::bare("GPU-0", 0);
    gpu.sm_count = Some(132);
    gpu.compute_capability = Some(ComputeCapability { major: 9, minor: 0 });
    let dev = meter.register_device(gpu);
    (meter, dev)
}

fn kernel(dev: gpumeter_core::DeviceSlot, i: u64, start: u64, end: u64) -> ActivityRecord {
    let k = KernelLaunch {
        grid: Some([1, 1, 1]),
        block: Some([128, 1, 1]),
        registers_per_thread: Some(32),
        shared_mem_bytes: Some(0),
        ..KernelLaunch::default()
    };
    let mut r = ActivityRecord::new(dev, start, end, Work::Kernel(k));
    r.process_id = Some(1000 + i as u32);
    r.correlation_id = i as u32;
    r
}

fn lost(r: &UsageReport) -> u64 {
    r.loss
        .iter()
        .filter(|l| l.reason == "concurrent_kernel_limit")
        .map(|l| l.records)
        .sum()
}

/// `MAX_RESIDENT_GRIDS + 1` kernels all start at one instant, 10 s in; a drain at 5 s (before
/// the sweep reaches them) hands out a report, then the meter finishes. Across the two
/// reports each kernel is metered or lost once: records.kernel + loss = kernels pushed, and
/// the launches metered equal records.kernel.
///
/// The drain finds the 129 kernels still buffered (not started): it counts none of them, the
/// final report counts 128 as records and one as loss. (Counting them at arrival in the
/// drained report made 129 + 1 = 130 records for 129 pushed.)
#[test]
fn a_kernel_lost_after_a_drain_is_not_counted_twice() {
    let n = u64::from(MAX_RESIDENT_GRIDS) + 1;
    let (mut meter, dev) = meter_with_gpu();
    let start = BASE + 10 * SEC;
    for i in 0..n {
        meter.push(kernel(dev, i, start, start + SEC));
    }
    let first = meter.drain(BASE + 5 * SEC).expect("a drain");
    assert_eq!(first.records.kernel, 0, "still buffered at the drain");
    let last = meter.finish().expect("a report");
    let kernels = first.records.kernel + last.records.kernel;
    let loss = lost(&first) + lost(&last);
    let launches = first.device_total("GPU-0", MeterKind::KernelLaunches)
        + last.device_total("GPU-0", MeterKind::KernelLaunches);
    assert_eq!(loss, 1);
    assert_eq!(launches, u128::from(n - 1));
    assert_eq!(kernels + loss, n, "records.kernel {kernels} + loss {loss}");
    assert_eq!(u128::from(kernels), launches);
}

/// The same with a snapshot instead of a drain: the snapshot and the report agree.
#[test]
fn a_snapshot_before_the_sweep_agrees_with_the_report() {
    let n = u64::from(MAX_RESIDENT_GRIDS) + 3;
    let (mut meter, dev) = meter_with_gpu();
    let start = BASE + 10 * SEC;
    for i in 0..n {
        meter.push(kernel(dev, i, start, start + SEC));
    }
    let snap = meter.snapshot().expect("a snapshot");
    let last = meter.finish().expect("a report");
    assert_eq!(snap.records, last.records);
    assert_eq!(snap.loss, last.loss);
    assert_eq!(snap.usage, last.usage);
    assert_eq!(last.records.kernel + lost(&last), n);
}

/// Two green contexts of the same size, one per process, registered in either order (the
/// order the inputs declare them: `gpumeter usage A B` vs `B A`); 65 kernels of each start at
/// one instant, so 2 are over the limit. Which process loses them must not depend on which
/// green context was registered first.
#[test]
fn the_kernels_over_the_limit_do_not_depend_on_the_partitions_registration_order() {
    let run = |x_first: bool| {
        let (mut meter, dev) = meter_with_gpu();
        let mut map = gpumeter_core::TenantMap::default();
        for pid in [1u32, 2] {
            let name = gpumeter_core::TenantName::parse(&format!("p{pid}")).expect("a name");
            map.pid.insert(pid, name);
        }
        meter.set_tenant_map(map);
        let (x, y) = if x_first {
            let x = meter.register_partition(dev, 40).expect("x");
            let y = meter.register_partition(dev, 40).expect("y");
            (x, y)
        } else {
            let y = meter.register_partition(dev, 40).expect("y");
            let x = meter.register_partition(dev, 40).expect("x");
            (x, y)
        };
        let half = u64::from(MAX_RESIDENT_GRIDS) / 2 + 1;
        for i in 0..2 * half {
            let mut r = kernel(dev, i, BASE, BASE + SEC);
            let in_x = i < half;
            r.process_id = Some(if in_x { 1 } else { 2 });
            r.partition = Some(if in_x { x } else { y });
            meter.push(r);
        }
        meter.finish().expect("a report")
    };
    let a = run(true);
    let b = run(false);
    assert_eq!(lost(&a), 2);
    assert_eq!(a.totals, b.totals);
}

/// The digest computed from the report equals `document_sha256` of its JSON value for values
/// where RFC 8785 is delicate: integers past 2^53, floats, keys ordered by UTF-16 code units
/// (astral vs high BMP), nested objects, escapes.
#[test]
fn the_digest_matches_the_value_path_on_delicate_values() {
    let by_value = |r: &UsageReport| {
        let v = serde_json::to_value(r).expect("a JSON value");
        gpumeter_core::document_sha256(&v, "sha256").expect("a digest")
    };
    let (mut meter, dev) = meter_with_gpu();
    meter.push(kernel(dev, 1, BASE, BASE + 10));
    let mut r = meter.finish().expect("a report");
    r.records.kernel = u64::MAX;
    r.records.memcpy = (1 << 53) + 1;
    r.window_seconds = u64::MAX - 1;
    r.records
        .skipped
        .insert("\u{1F600}".into(), 9_007_199_254_740_993);
    r.records.skipped.insert("\u{FF61}".into(), 1);
    r.warnings.push(gpumeter_core::Warning::new(
        gpumeter_core::WarningCode::RecordsLost,
        "\u{0}\u{1f}\"\\/\u{7f}\u{2028}",
    ));
    r.extensions.other.insert(
        "\u{FF61}".into(),
        serde_json::json!({"\u{1F600}": [1e21, 1e-7, -0.0, 5e-324, 0.1, 123456789012345680000.0]}),
    );
    r.extensions
        .other
        .insert("\u{1F600}".into(), serde_json::json!(u64::MAX));
    r.extensions
        .other
        .insert("a".into(), serde_json::json!(i64::MIN));
    r.seal().expect("sealed");
    assert_eq!(r.sha256, by_value(&r));
    // Read back from its JSON, the report keeps its digest.
    let text = serde_json::to_string(&r).expect("JSON");
    let back: UsageReport = serde_json::from_str(&text).expect("read back");
    assert!(back.verify_digest());
    assert_eq!(by_value(&back), r.sha256);
}

/// 128 kernels with a grid and instruction counts hold the device; one more, without a grid
/// and with instructions, starts with them, runs across three windows and ends last, so it
/// is the one lost: sm_ns stays meterable, and its launch, kernel_ns (every window) and
/// warp instructions are taken back.
#[test]
fn a_lost_kernel_without_grid_takes_everything_back() {
    let n = u64::from(MAX_RESIDENT_GRIDS);
    let (mut meter, dev) = meter_with_gpu();
    let start = BASE + SEC / 2;
    for i in 0..n {
        let mut r = kernel(dev, i, start, start + 10);
        if let Work::Kernel(k) = &mut r.work {
            k.warp_instructions = Some(7);
        }
        meter.push(r);
    }
    let mut r = kernel(dev, n, start, start + 2 * SEC);
    if let Work::Kernel(k) = &mut r.work {
        k.grid = None;
        k.warp_instructions = Some(1_000);
    }
    meter.push(r);
    let report = meter.finish().expect("a report");
    assert_eq!(lost(&report), 1);
    assert_eq!(report.records.kernel, n);
    assert_eq!(
        report.device_total("GPU-0", MeterKind::KernelLaunches),
        u128::from(n)
    );
    assert_eq!(
        report.device_total("GPU-0", MeterKind::KernelNs),
        u128::from(n) * 10
    );
    assert_eq!(
        report.device_total("GPU-0", MeterKind::WarpInstructions),
        u128::from(n) * 7
    );
    let d = report.device("GPU-0").expect("the device");
    assert!(d.not_meterable.is_empty(), "{:?}", d.not_meterable);
    assert!(report.device_total("GPU-0", MeterKind::SmNs) > 0);
    assert!(
        report
            .usage
            .iter()
            .all(|u| u.window_start.as_str() < "2023-11-14T22:13:21"),
        "no usage past the first window"
    );
}

/// 129 kernels start at one instant T; the one of process 129 ends first, so it is kept and
/// another is lost. Pushed all before anything moves the sweep, or with a kernel
/// `reorder_horizon_ns` later in between (which moves the sweep to T exactly, and a kernel
/// starting at T is still accepted, not late): the same kernel must be lost either way.
#[test]
fn the_kernels_over_the_limit_do_not_depend_on_when_the_sweep_reaches_their_start() {
    let horizon = MeterConfig::default().reorder_horizon_ns;
    let run = |split: bool| {
        let (mut meter, dev) = meter_with_gpu();
        let mut map = gpumeter_core::TenantMap::default();
        for pid in 1..=130u32 {
            let name = gpumeter_core::TenantName::parse(&format!("p{pid}")).expect("a name");
            map.pid.insert(pid, name);
        }
        meter.set_tenant_map(map);
        let t = BASE + SEC;
        let with_pid = |mut r: ActivityRecord, pid: u32| {
            r.process_id = Some(pid);
            r
        };
        for pid in 1..=128u32 {
            meter.push(with_pid(kernel(dev, u64::from(pid), t, t + SEC), pid));
        }
        let first = with_pid(kernel(dev, 129, t, t + 10), 129);
        let later = with_pid(kernel(dev, 130, t + horizon, t + horizon + 10), 130);
        if split {
            meter.push(later);
            meter.push(first);
        } else {
            meter.push(first);
            meter.push(later);
        }
        meter.finish().expect("a report")
    };
    let a = run(false);
    let b = run(true);
    assert_eq!(lost(&a), 1);
    assert_eq!(lost(&b), 1);
    assert_eq!(a.totals, b.totals);
}

/// Review of the drain rule (a drain counts no kernel the sweep has not started): bursts of
/// kernels at single instants, many past [`MAX_RESIDENT_GRIDS`], some exactly at window edges,
/// with several drains among them (at the bursts' edges, before them, twice at one edge): the
/// drained reports and the final one count every kernel pushed once, as metered or lost, and
/// sum to the undrained report's counts, launches, kernel time and loss.
#[test]
fn drains_among_bursts_over_the_limit_count_every_kernel_once() {
    const MIN: u64 = 60 * SEC;
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |n: u64| {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) % n
    };
    let (mut over_limit, mut drains) = (0u64, 0usize);
    for case in 0..60 {
        let config = || MeterConfig {
            window: gpumeter_core::WindowSize::from_seconds(60).expect("a window"),
            ..MeterConfig::default()
        };
        let build = || {
            let mut meter = Meter::new(config());
            let mut gpu = DeviceInfo::bare("GPU-0", 0);
            gpu.sm_count = Some(132);
            gpu.compute_capability = Some(ComputeCapability { major: 9, minor: 0 });
            let dev = meter.register_device(gpu);
            (meter, dev)
        };
        let (mut drained, dev) = build();
        let (mut whole, _) = build();
        let mut reports = Vec::new();
        let mut pushed = 0u64;
        let mut id = 0u64;
        // Bursts a window or two apart (so no kernel is late for a drain made before its
        // burst), each at a window edge or just after one.
        let mut t = BASE - BASE % MIN + MIN;
        for _ in 0..6 {
            t += MIN * (1 + next(2));
            let at = t + [0, 0, 1, SEC][next(4) as usize];
            let n = 60 + next(140);
            // A drain before the burst, at its window's edge (the burst may start there).
            if next(2) == 0 {
                reports.push(drained.drain(at - at % MIN).expect("a drain"));
            }
            for _ in 0..n {
                let len = [SEC, 2 * MIN, 1][next(3) as usize];
                let r = kernel(dev, id, at, at + len);
                id += 1;
                drained.push(r.clone());
                whole.push(r);
                pushed += 1;
                if next(50) == 0 {
                    reports.push(drained.drain(at - at % MIN).expect("a drain"));
                }
            }
        }
        reports.push(drained.finish().expect("a report"));
        let all = whole.finish().expect("a report");
        let sum = |f: &dyn Fn(&UsageReport) -> u128| reports.iter().map(f).sum::<u128>();
        let loss = |r: &UsageReport| r.loss.iter().map(|l| u128::from(l.records)).sum::<u128>();
        let kernels = sum(&|r| u128::from(r.records.kernel));
        assert_eq!(
            kernels + sum(&loss),
            u128::from(pushed),
            "case {case}: records.kernel + loss"
        );
        assert_eq!(kernels, u128::from(all.records.kernel), "case {case}");
        assert_eq!(sum(&loss), loss(&all), "case {case}");
        assert_eq!(sum(&lost_u128), lost_u128(&all), "case {case}");
        over_limit += lost(&all);
        drains += reports.len() - 1;
        for m in [
            MeterKind::KernelLaunches,
            MeterKind::KernelNs,
            MeterKind::SmNs,
        ] {
            assert_eq!(
                sum(&|r| r.device_total("GPU-0", m)),
                all.device_total("GPU-0", m),
                "case {case}: {m:?}"
            );
        }
        assert_eq!(
            sum(&|r| r.device_total("GPU-0", MeterKind::KernelLaunches)),
            kernels,
            "case {case}: launches metered = kernels counted"
        );
    }
    // The limit and the drains are exercised.
    assert!(over_limit > 100 && drains > 100, "{over_limit} {drains}");
}

fn lost_u128(r: &UsageReport) -> u128 {
    u128::from(lost(r))
}

/// Review: a kernel in the last window a timestamp can name (at or after the window start of
/// `u64::MAX`), drained with everything (`drain(u64::MAX)`): the drain and the final report
/// count it once, as the undrained report does.
#[test]
fn a_kernel_in_the_last_window_drained_with_everything_is_counted_once() {
    let (mut drained, dev) = meter_with_gpu();
    let (mut whole, _) = meter_with_gpu();
    let start = u64::MAX - 1_000;
    for m in [&mut drained, &mut whole] {
        m.push(kernel(dev, 1, BASE, BASE + SEC));
        m.push(kernel(dev, 2, start, start + 10));
    }
    let first = drained.drain(u64::MAX).expect("a drain");
    let last = drained.finish().expect("a report");
    let all = whole.finish().expect("a report");
    let launches = |r: &UsageReport| r.device_total("GPU-0", MeterKind::KernelLaunches);
    assert_eq!(
        first.records.kernel + last.records.kernel,
        all.records.kernel,
        "records.kernel"
    );
    assert_eq!(
        launches(&first) + launches(&last),
        launches(&all),
        "launches"
    );
    assert_eq!(all.records.kernel, 2);
}
