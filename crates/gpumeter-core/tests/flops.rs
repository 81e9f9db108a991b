//! The operation meters `flops_fp64`, `flops_fp32`, `flops_fp16` and `tensor_ops` (docs/METERING.md,
//! issue 17): booked per kernel to the window of its start, summed per tenant, all or nothing
//! per device; and their conservation across tenants and window sizes (proptest).

use std::collections::BTreeMap;

use gpumeter_core::{
    ActivityRecord, KernelLaunch, Meter, MeterConfig, MeterKind, NotMeterableCode, OpCounts,
    TenantMap, UsageReport, WindowSize, Work, OP_METERS,
};
use proptest::prelude::*;

mod common;
use common::{device, kernel, per_tenant, BASE, KEY, S};

fn tn(name: &str) -> gpumeter_core::TenantName {
    match gpumeter_core::TenantName::parse(name) {
        Ok(t) => t,
        Err(e) => panic!("{name:?}: {e}"),
    }
}

/// A tenant map of process ids 1..=n to tenants `t1`..`tn`.
fn tenants(n: u32) -> TenantMap {
    let mut tm = TenantMap::default();
    for p in 1..=n {
        tm.pid.insert(p, tn(&format!("t{p}")));
    }
    tm
}

/// A kernel of `ops` from `a` to `b` ns after [`BASE`], launched by process `pid`.
fn k(a: u64, b: u64, ops: OpCounts, pid: u32) -> ActivityRecord {
    let mut r = ActivityRecord::new(
        gpumeter_core::DeviceSlot(0),
        BASE + a,
        BASE + b,
        Work::Kernel(KernelLaunch {
            grid: Some([4, 1, 1]),
            block: Some([128, 1, 1]),
            ops: Some(Box::new(ops)),
            ..KernelLaunch::default()
        }),
    );
    r.process_id = Some(pid);
    r.correlation_id = (a as u32).wrapping_mul(31).wrapping_add(pid);
    r
}

fn all(fp64: u64, fp32: u64, fp16: u64, tensor: u64) -> OpCounts {
    OpCounts {
        flops_fp64: Some(fp64),
        flops_fp32: Some(fp32),
        flops_fp16: Some(fp16),
        tensor_ops: Some(tensor),
    }
}

fn meter(window_s: u64, n_tenants: u32) -> (Meter, gpumeter_core::DeviceSlot) {
    let mut m = Meter::new(MeterConfig {
        window: WindowSize::from_seconds(window_s).expect("window"),
        ..MeterConfig::default()
    });
    m.set_tenant_map(tenants(n_tenants));
    let dev = m.register_device(device(Some(8)));
    (m, dev)
}

fn not_meterable(r: &UsageReport) -> Vec<(MeterKind, NotMeterableCode)> {
    r.devices
        .iter()
        .flat_map(|d| d.not_meterable.iter().map(|n| (n.meter, n.code.clone())))
        .filter(|(m, _)| OP_METERS.contains(m))
        .collect()
}

#[test]
fn flops_sum_per_tenant_and_go_to_the_window_of_the_kernels_start() {
    let (mut m, dev) = meter(60, 2);
    // A kernel from 59 s to 61 s books its operations to the window [0, 60 s).
    let mut a = k(59 * S, 61 * S, all(1, 20, 300, 4000), 1);
    a.device = dev;
    let mut b = k(61 * S, 62 * S, all(5, 0, 7, 11), 1);
    b.device = dev;
    let mut c = k(10 * S, 11 * S, all(100, 200, 300, 400), 2);
    c.device = dev;
    for r in [a, b, c] {
        m.push(r);
    }
    let r = m.finish().expect("report");
    let fp64 = per_tenant(&r, MeterKind::FlopsFp64);
    assert_eq!((fp64["t1"], fp64["t2"]), (6, 100));
    assert_eq!(per_tenant(&r, MeterKind::FlopsFp32)["t1"], 20);
    assert_eq!(per_tenant(&r, MeterKind::FlopsFp16)["t1"], 307);
    assert_eq!(per_tenant(&r, MeterKind::TensorOps)["t1"], 4011);
    assert_eq!(r.device_total(KEY, MeterKind::TensorOps), 4411);
    let t1_first_window: u128 = r
        .usage
        .iter()
        .filter(|u| u.meter == MeterKind::FlopsFp16 && u.tenant == "t1")
        .filter(|u| u.window_start.ends_with("00:00Z"))
        .map(|u| u.quantity.0)
        .sum();
    assert_eq!(t1_first_window, 300, "{:?}", r.usage);
    assert!(not_meterable(&r).is_empty(), "{:?}", not_meterable(&r));
    // The unit prices see FLOPs as operations.
    assert_eq!(MeterKind::FlopsFp32.canonical_unit(), "FLOP");
}

#[test]
fn a_kernel_without_a_count_makes_that_meter_not_meterable_on_its_device() {
    let (mut m, dev) = meter(3600, 1);
    let mut a = k(0, S, all(1, 2, 3, 4), 1);
    a.device = dev;
    // The second kernel counts FLOPs but no tensor operations.
    let mut b = k(
        S,
        2 * S,
        OpCounts {
            tensor_ops: None,
            ..all(1, 2, 3, 0)
        },
        1,
    );
    b.device = dev;
    m.push(a);
    m.push(b);
    let r = m.finish().expect("report");
    assert_eq!(r.device_total(KEY, MeterKind::FlopsFp16), 6);
    assert_eq!(r.device_total(KEY, MeterKind::TensorOps), 0);
    assert_eq!(
        not_meterable(&r),
        vec![(
            MeterKind::TensorOps,
            NotMeterableCode::KernelsWithoutOpCounts
        )]
    );
    let entry = r.devices[0]
        .not_meterable
        .iter()
        .find(|n| n.meter == MeterKind::TensorOps)
        .expect("tensor_ops entry");
    assert!(entry.reason.contains("1 of 2 kernels"), "{}", entry.reason);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("tensor_ops is not meterable")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn a_device_without_counts_has_no_operation_meters_and_no_entry() {
    let (mut m, dev) = meter(3600, 1);
    let mut a = k(0, S, OpCounts::default(), 1);
    a.device = dev;
    m.push(a);
    let r = m.finish().expect("report");
    for op in OP_METERS {
        assert_eq!(r.device_total(KEY, op), 0);
    }
    assert!(not_meterable(&r).is_empty());
}

#[test]
fn kernels_over_the_resident_grid_limit_take_their_operations_back() {
    // 130 kernels start at one instant: the 128 that end first run, the last two are loss
    // (`concurrent_kernel_limit`) and their operation counts are taken back with them.
    let (mut m, dev) = meter(3600, 1);
    for i in 0..130u64 {
        let Work::Kernel(mut launch) = kernel(1) else {
            unreachable!("a kernel")
        };
        launch.set_op_counts(all(i + 1, 0, 0, 0));
        let mut r = ActivityRecord::new(dev, BASE, BASE + 1_000 + i, Work::Kernel(launch));
        r.process_id = Some(1);
        r.correlation_id = i as u32;
        m.push(r);
    }
    let r = m.finish().expect("report");
    assert_eq!(r.device_total(KEY, MeterKind::KernelLaunches), 128);
    assert_eq!(r.device_total(KEY, MeterKind::FlopsFp64), 128 * 129 / 2);
    assert_eq!(r.device_total(KEY, MeterKind::FlopsFp32), 0);
    assert!(not_meterable(&r).is_empty(), "{:?}", not_meterable(&r));
    let lost: u64 = r.loss.iter().map(|l| l.records).sum();
    assert_eq!(lost, 2, "{:?}", r.loss);
}

/// One generated kernel: start and length in 100 ms steps, launching process (tenant), counts.
#[derive(Debug, Clone)]
struct G {
    start: u64,
    len: u64,
    pid: u32,
    ops: [u64; 4],
}

fn arb_kernel() -> impl Strategy<Value = G> {
    (
        0u64..40_000,
        1u64..6_000,
        1u32..=4,
        prop::array::uniform4(prop_oneof![Just(0u64), 0u64..1_000, 0u64..(1 << 52)]),
    )
        .prop_map(|(start, len, pid, ops)| G {
            start,
            len,
            pid,
            ops,
        })
}

fn run(ks: &[G], window_s: u64) -> UsageReport {
    let (mut m, dev) = meter(window_s, 4);
    // In start order: the meter's reordering horizon (60 s) would make older records loss.
    let mut ks = ks.to_vec();
    ks.sort_by_key(|g| g.start);
    for g in &ks {
        let mut r = k(
            g.start * S / 10,
            (g.start + g.len) * S / 10,
            all(g.ops[0], g.ops[1], g.ops[2], g.ops[3]),
            g.pid,
        );
        r.device = dev;
        r.correlation_id = r.correlation_id.wrapping_add(g.len as u32);
        m.push(r);
    }
    m.finish().expect("report")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Σ over tenants and windows of each operation meter is Σ over kernels of its count;
    /// each tenant gets exactly its kernels' counts, each window exactly the counts of the
    /// kernels that start in it; and the per-tenant totals do not depend on the window size.
    #[test]
    fn operation_meters_conserve_across_tenants_and_windows(
        ks in prop::collection::vec(arb_kernel(), 1..40),
        window_s in prop::sample::select(vec![60u64, 900, 3600]),
    ) {
        let r = run(&ks, window_s);
        let hourly = run(&ks, 3600);
        for (i, op) in OP_METERS.into_iter().enumerate() {
            let total: u128 = ks.iter().map(|g| u128::from(g.ops[i])).sum();
            prop_assert_eq!(r.device_total(KEY, op), total);
            let mut want: BTreeMap<String, u128> = BTreeMap::new();
            let mut want_windows: BTreeMap<(u64, String), u128> = BTreeMap::new();
            for g in &ks {
                if g.ops[i] > 0 {
                    *want.entry(format!("t{}", g.pid)).or_insert(0) += u128::from(g.ops[i]);
                    let w = (g.start * S / 10) / (window_s * S);
                    *want_windows.entry((w, format!("t{}", g.pid))).or_insert(0) +=
                        u128::from(g.ops[i]);
                }
            }
            let got = per_tenant(&r, op);
            let got: BTreeMap<String, u128> = got.into_iter().filter(|(_, q)| *q > 0).collect();
            prop_assert_eq!(&got, &want);
            let hourly_got: BTreeMap<String, u128> = per_tenant(&hourly, op)
                .into_iter()
                .filter(|(_, q)| *q > 0)
                .collect();
            prop_assert_eq!(&hourly_got, &want);
            let mut got_windows: BTreeMap<(u64, String), u128> = BTreeMap::new();
            for u in r.usage.iter().filter(|u| u.meter == op && u.quantity.0 > 0) {
                let start = gpumeter_core::time::parse_rfc3339(&u.window_start)
                    .expect("window start");
                let w = (start - BASE) / (window_s * S);
                *got_windows.entry((w, u.tenant.clone())).or_insert(0) += u.quantity.0;
            }
            prop_assert_eq!(got_windows, want_windows);
        }
    }
}

/// Σ of `meter` over a report's totals.
fn total(r: &UsageReport, meter: MeterKind) -> u128 {
    r.totals
        .iter()
        .filter(|t| t.meter == meter)
        .map(|t| t.quantity.0)
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Draining (streaming) with kernels' operation counts still pending, 130 kernels at
    /// one instant on a drain's edge (two of them over the resident-grid limit, taken back
    /// in the report after the drain), hands over every operation exactly once: the drained
    /// reports and the final one sum to the undrained report, per tenant.
    #[test]
    fn draining_with_operation_counts_pending_hands_each_over_once(
        ks in prop::collection::vec(arb_kernel(), 1..30),
        drains in prop::collection::vec(0u64..5_000, 0..4),
    ) {
        let window_s = 60;
        // The burst: 130 kernels at 60 s (a window edge) of fp64 1..=130.
        let burst: Vec<ActivityRecord> = (0..130u64)
            .map(|i| {
                let mut r = k(60 * S, 60 * S + 1_000 + i, all(i + 1, 0, 0, 0), 1);
                r.correlation_id = 1_000_000 + i as u32;
                r
            })
            .collect();
        let mut ks = ks.clone();
        ks.sort_by_key(|g| g.start);
        let records: Vec<ActivityRecord> = ks
            .iter()
            .map(|g| {
                let mut r = k(
                    g.start * S / 10,
                    (g.start + g.len) * S / 10,
                    all(g.ops[0], g.ops[1], g.ops[2], g.ops[3]),
                    g.pid,
                );
                r.correlation_id = r.correlation_id.wrapping_add(g.len as u32);
                r
            })
            .chain(burst)
            .collect();
        let mut records = records;
        records.sort_by_key(|r| r.start_ns);
        let mut edges: Vec<u64> = drains.iter().map(|d| BASE + d * S / 10).collect();
        edges.push(BASE + 60 * S);
        edges.sort_unstable();
        edges.dedup();

        let (mut whole, dev) = meter(window_s, 4);
        let (mut streamed, _) = meter(window_s, 4);
        let mut parts = Vec::new();
        let mut next_edge = 0;
        for mut r in records {
            r.device = dev;
            // Drain at each edge once the records before it are in.
            while next_edge < edges.len() && r.start_ns > edges[next_edge] {
                parts.push(streamed.drain(edges[next_edge]).expect("drain"));
                next_edge += 1;
            }
            whole.push(r.clone());
            streamed.push(r);
        }
        parts.push(streamed.finish().expect("final report"));
        let whole = whole.finish().expect("report");
        for op in OP_METERS.into_iter().chain([MeterKind::KernelLaunches]) {
            let got: u128 = parts.iter().map(|p| total(p, op)).sum();
            prop_assert_eq!(got, total(&whole, op), "{}", op);
            let mut by_tenant: BTreeMap<String, u128> = BTreeMap::new();
            for p in &parts {
                for (t, q) in per_tenant(p, op) {
                    *by_tenant.entry(t).or_insert(0) += q;
                }
            }
            by_tenant.retain(|_, q| *q > 0);
            let mut want = per_tenant(&whole, op);
            want.retain(|_, q| *q > 0);
            prop_assert_eq!(by_tenant, want, "{}", op);
        }
        let lost: u64 = parts
            .iter()
            .flat_map(|p| &p.loss)
            .filter(|l| l.reason == "concurrent_kernel_limit")
            .map(|l| l.records)
            .sum();
        prop_assert!(lost >= 2, "the burst's two over the limit: {lost}");
    }
}
