//! Heavily overlapping kernels meter in bounded memory (issue 13): each test re-runs itself
//! in a child process under `ulimit -v` (address space, KiB), so a meter that grows with the
//! overlap fails by running out of memory rather than by being slow. Time is never asserted
//! (`examples/overlap.rs` and docs/PERFORMANCE.md measure it).

use std::process::Command;

use gpumeter_core::{
    ActivityRecord, ComputeCapability, DeviceInfo, KernelLaunch, Meter, MeterConfig, MeterKind,
    TenantMap, TenantName, UsageReport, WindowSize, Work, MAX_RESIDENT_GRIDS,
};

/// Set in the child: run the workload instead of spawning.
const CHILD: &str = "GPUMETER_OVERLAP_CHILD";
/// The address-space ceiling of the child, KiB: 1 GiB.
const CEILING_KIB: u64 = 1 << 20;
const BASE: u64 = 1_700_000_000_000_000_000;
/// Every kernel runs `n + TAIL` ns, so all `n` overlap.
const TAIL: u64 = 10_000;
const SMS: u32 = 132;

/// Runs test `name` in a child under the ceiling; `true` in the child (run the workload).
fn in_child(name: &str) -> bool {
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {CEILING_KIB} && exec \"$0\" --exact {name} --test-threads=1 --nocapture"
        ))
        .arg(exe)
        .env(CHILD, "1")
        .status()
        .expect("sh runs");
    assert!(
        status.success(),
        "{name} failed under a {CEILING_KIB} KiB address-space ceiling: {status}"
    );
    false
}

/// `n` kernels of `blocks` blocks, kernel `i` of process `pid(i)` from `i` ns to
/// `n + i + TAIL` ns.
fn meter(n: u64, blocks: u32, pid: impl Fn(u64) -> u32, map: TenantMap) -> UsageReport {
    let mut meter = Meter::new(MeterConfig::default());
    meter.set_tenant_map(map);
    let mut gpu = DeviceInfo::bare("GPU-0", 0);
    gpu.sm_count = Some(SMS);
    gpu.compute_capability = Some(ComputeCapability { major: 9, minor: 0 });
    let dev = meter.register_device(gpu);
    for i in 0..n {
        let k = KernelLaunch {
            grid: Some([blocks, 1, 1]),
            block: Some([128, 1, 1]),
            registers_per_thread: Some(32),
            shared_mem_bytes: Some(0),
            ..KernelLaunch::default()
        };
        let mut r = ActivityRecord::new(dev, BASE + i, BASE + n + i + TAIL, Work::Kernel(k));
        r.process_id = Some(pid(i));
        r.correlation_id = i as u32;
        meter.push(r);
    }
    meter.finish().expect("a report")
}

/// Kernels that run: every kernel starts before the first one ends, so only the first
/// `MAX_RESIDENT_GRIDS` start; the rest are loss.
fn ran(n: u64) -> u64 {
    n.min(u64::from(MAX_RESIDENT_GRIDS))
}

/// Σ over each ns of min(SMs held by the kernels running, SMs): the device-capped sm_ns,
/// counted directly from the layout (kernel `i < ran(n)` runs `[i, n + i + TAIL)`).
fn capped_sm_ns(n: u64, blocks: u32) -> u128 {
    let k = ran(n);
    let held = u64::from(blocks.min(SMS));
    let mut sum = 0u128;
    for t in 0..n + k + TAIL {
        // Kernels i < k with i <= t < n + i + TAIL.
        let first = t.saturating_sub(n + TAIL - 1);
        let last = t.min(k - 1);
        let running = (last + 1).saturating_sub(first);
        sum += u128::from((running * held).min(u64::from(SMS)));
    }
    sum
}

fn check_totals(r: &UsageReport, n: u64, blocks: u32) {
    let k = ran(n);
    assert_eq!(
        r.device_total("GPU-0", MeterKind::KernelLaunches),
        u128::from(k)
    );
    assert_eq!(
        r.device_total("GPU-0", MeterKind::KernelNs),
        u128::from(k) * u128::from(n + TAIL)
    );
    assert_eq!(
        r.device_total("GPU-0", MeterKind::GpuBusyNs),
        u128::from(n + k - 1 + TAIL)
    );
    assert_eq!(
        r.device_total("GPU-0", MeterKind::SmNs),
        capped_sm_ns(n, blocks)
    );
    // Every record is metered or lost, the lost ones for the limit.
    assert_eq!(r.records.kernel, k);
    let lost: u64 = r
        .loss
        .iter()
        .filter(|l| l.reason == "concurrent_kernel_limit")
        .map(|l| l.records)
        .sum();
    assert_eq!(lost, n - k);
    assert_eq!(r.loss.len(), usize::from(n > k));
}

#[test]
fn fifty_thousand_overlapping_kernels_of_one_tenant() {
    if !in_child("fifty_thousand_overlapping_kernels_of_one_tenant") {
        return;
    }
    let n = 50_000;
    let r = meter(n, 1, |_| 1, TenantMap::default());
    check_totals(&r, n, 1);
    assert!(r.totals.iter().all(|t| t.tenant == "unattributed"));
}

/// 20 000 processes, each with one kernel (and one copy) in a 1 s window of its own: a cell
/// holds what was booked in it, never an entry per key of its device (20 000 cells × 20 000
/// keys of 16-byte accumulators would be 6.4 GB; docs/decisions/metering-at-memory-speed.md,
/// "Cells as flat arrays").
#[test]
fn keys_each_in_a_window_of_their_own_hold_no_cells_times_keys() {
    if !in_child("keys_each_in_a_window_of_their_own_hold_no_cells_times_keys") {
        return;
    }
    let n: u64 = 20_000;
    let mut meter = Meter::new(MeterConfig {
        window: WindowSize::from_seconds(1).expect("1 s divides a day"),
        ..MeterConfig::default()
    });
    let mut gpu = DeviceInfo::bare("GPU-0", 0);
    gpu.sm_count = Some(SMS);
    gpu.compute_capability = Some(ComputeCapability { major: 9, minor: 0 });
    let dev = meter.register_device(gpu);
    let second = 1_000_000_000;
    let base = BASE - BASE % second;
    for i in 0..n {
        let k = KernelLaunch {
            grid: Some([4, 1, 1]),
            block: Some([128, 1, 1]),
            registers_per_thread: Some(32),
            shared_mem_bytes: Some(0),
            ..KernelLaunch::default()
        };
        let t = base + i * second + 1_000;
        let mut r = ActivityRecord::new(dev, t, t + 5_000, Work::Kernel(k));
        r.process_id = Some(i as u32 + 1);
        r.correlation_id = i as u32;
        meter.push(r);
        let mut c = ActivityRecord::new(dev, t + 10_000, t + 11_000, Work::Memset { bytes: 64 });
        c.process_id = Some(i as u32 + 1);
        c.correlation_id = (n + i) as u32;
        meter.push(c);
    }
    assert_eq!(meter.cells(), n as usize);
    let r = meter.finish().expect("a report");
    let n128 = u128::from(n);
    assert_eq!(r.device_total("GPU-0", MeterKind::KernelLaunches), n128);
    assert_eq!(r.device_total("GPU-0", MeterKind::KernelNs), n128 * 5_000);
    assert_eq!(r.device_total("GPU-0", MeterKind::SmNs), n128 * 5_000 * 4);
    assert_eq!(r.device_total("GPU-0", MeterKind::MemsetBytes), n128 * 64);
    assert_eq!(
        r.device_total("GPU-0", MeterKind::GpuBusyNs),
        n128 * (5_000 + 1_000)
    );
    // One window per process: kernel_launches, kernel_ns, sm_ns, warp_ns, memset_bytes and
    // gpu_busy_ns, every row of the window's one tenant (all unattributed here).
    assert_eq!(r.usage.len(), n as usize * 6);
}

/// 128 kernels of 2 blocks hold 256 SMs on a 132-SM device: the device cap applies.
#[test]
fn overlapping_kernels_over_the_sms_are_capped() {
    if !in_child("overlapping_kernels_over_the_sms_are_capped") {
        return;
    }
    let n = 1_000;
    let r = meter(n, 2, |_| 1, TenantMap::default());
    check_totals(&r, n, 2);
    assert!(capped_sm_ns(n, 2) < u128::from(ran(n) * 2) * u128::from(n + TAIL));
}

/// 5 000 overlapping kernels of 5 000 processes, each its own tenant (issue 13): the 128 that
/// start first run, each billed to its tenant; the rest are loss.
#[test]
fn overlapping_kernels_of_as_many_tenants() {
    if !in_child("overlapping_kernels_of_as_many_tenants") {
        return;
    }
    let n = 5_000;
    let mut map = TenantMap::default();
    for i in 0..n {
        let name = format!("p{i}");
        map.pid.insert(
            i as u32 + 1,
            TenantName::parse(&name).expect("a tenant name"),
        );
    }
    let r = meter(n, 1, |i| i as u32 + 1, map);
    check_totals(&r, n, 1);
    let tenants: std::collections::BTreeSet<&str> =
        r.totals.iter().map(|t| t.tenant.as_str()).collect();
    let expected: std::collections::BTreeSet<String> =
        (0..ran(n)).map(|i| format!("p{i}")).collect();
    assert_eq!(
        tenants,
        expected
            .iter()
            .map(String::as_str)
            .collect::<std::collections::BTreeSet<_>>()
    );
}

/// Which kernels starting at one instant are over the limit is chosen by what they are: the
/// same records in two orders give the same report.
#[test]
fn the_kernels_over_the_limit_do_not_depend_on_the_input_order() {
    let records = |rev: bool| {
        let mut meter = Meter::new(MeterConfig::default());
        let mut map = TenantMap::default();
        let mut gpu = DeviceInfo::bare("GPU-0", 0);
        gpu.sm_count = Some(SMS);
        let dev = meter.register_device(gpu);
        let n = u64::from(MAX_RESIDENT_GRIDS) + 40;
        let mut order: Vec<u64> = (0..n).collect();
        if rev {
            order.reverse();
        }
        let pid = |i: u64| 1 + (i % 7) as u32 * 1000 + i as u32;
        for i in 0..n {
            let name = TenantName::parse(&format!("t{}", pid(i))).expect("a tenant name");
            map.pid.insert(pid(i), name);
        }
        meter.set_tenant_map(map);
        for i in order {
            let k = KernelLaunch {
                grid: Some([1 + (i % 3) as u32, 1, 1]),
                ..KernelLaunch::default()
            };
            // All start together; ends in three groups, so ties are broken by SMs held and
            // then by process.
            let mut r =
                ActivityRecord::new(dev, BASE, BASE + 1_000 + (i % 2) * 10, Work::Kernel(k));
            r.process_id = Some(pid(i));
            r.correlation_id = i as u32;
            meter.push(r);
        }
        meter.finish().expect("a report")
    };
    let a = records(false);
    let b = records(true);
    assert_eq!(a.usage, b.usage);
    assert_eq!(a.loss, b.loss);
    assert_eq!(a.records.kernel, u64::from(MAX_RESIDENT_GRIDS));
    assert_eq!(a.sha256, b.sha256);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Random kernels, up to three times more overlapping than the limit, of a few processes
    /// and grids: every kernel is metered or lost (`concurrent_kernel_limit`, the only loss
    /// here), `kernel_launches` counts the metered ones, no more than the limit ever run at
    /// once (the busy and kernel time stay within what `MAX_RESIDENT_GRIDS` kernels can
    /// give), and the records in any order give the same report.
    #[test]
    fn over_the_limit_every_kernel_is_metered_or_lost_in_any_order(
        kernels in proptest::collection::vec((0u64..2_000, 1u64..3_000, 1u32..300, 1u32..9), 1..400),
        seed in 0u64..1_000,
    ) {
        let report = |order: &[usize]| {
            let mut meter = Meter::new(MeterConfig::default());
            let mut map = TenantMap::default();
            for p in 1..9 {
                map.pid.insert(p, TenantName::parse(&format!("t{p}")).expect("a tenant name"));
            }
            meter.set_tenant_map(map);
            let mut gpu = DeviceInfo::bare("GPU-0", 0);
            gpu.sm_count = Some(SMS);
            let dev = meter.register_device(gpu);
            for &i in order {
                let (start, len, blocks, pid) = kernels[i];
                let k = KernelLaunch { grid: Some([blocks, 1, 1]), ..KernelLaunch::default() };
                let mut r = ActivityRecord::new(dev, BASE + start, BASE + start + len, Work::Kernel(k));
                r.process_id = Some(pid);
                r.correlation_id = i as u32;
                meter.push(r);
            }
            meter.finish().expect("a report")
        };
        let n = kernels.len();
        let forward: Vec<usize> = (0..n).collect();
        // A deterministic shuffle from the seed.
        let mut shuffled = forward.clone();
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        for i in (1..n).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let a = report(&forward);
        let b = report(&shuffled);
        proptest::prop_assert_eq!(&a.usage, &b.usage);
        proptest::prop_assert_eq!(&a.loss, &b.loss);
        let lost: u64 = a.loss.iter().map(|l| {
            assert_eq!(l.reason, "concurrent_kernel_limit");
            l.records
        }).sum();
        proptest::prop_assert_eq!(a.records.kernel + lost, n as u64);
        proptest::prop_assert_eq!(
            a.device_total("GPU-0", MeterKind::KernelLaunches),
            u128::from(a.records.kernel)
        );
        // The rule, straightforwardly: in order of (start, end, SMs held, process), a kernel
        // runs when fewer than MAX_RESIDENT_GRIDS kept kernels run at its start.
        let mut sorted: Vec<(u64, u64, u32, u32)> = kernels
            .iter()
            .map(|&(s, len, b, p)| (s, s + len, b.min(SMS), p))
            .collect();
        sorted.sort();
        let mut kept: Vec<(u64, u64, u32, u32)> = Vec::new();
        for k in sorted {
            let running = kept.iter().filter(|o| o.0 <= k.0 && k.0 < o.1).count();
            if running < MAX_RESIDENT_GRIDS as usize {
                kept.push(k);
            }
        }
        proptest::prop_assert_eq!(a.records.kernel, kept.len() as u64);
        proptest::prop_assert_eq!(
            a.device_total("GPU-0", MeterKind::KernelNs),
            kept.iter().map(|k| u128::from(k.1 - k.0)).sum::<u128>()
        );
        for p in 1..9u32 {
            let ns: u128 = kept.iter().filter(|k| k.3 == p).map(|k| u128::from(k.1 - k.0)).sum();
            let got: u128 = a
                .totals
                .iter()
                .filter(|t| t.tenant == format!("t{p}") && t.meter == MeterKind::KernelNs)
                .map(|t| t.quantity.0)
                .sum();
            proptest::prop_assert_eq!(got, ns);
        }
    }
}
