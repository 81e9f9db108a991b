//! Integration tests of the meter: hand-computed cases and the conservation properties of docs/METERING.md.

use std::collections::{BTreeMap, BTreeSet};

use gpumeter_core::{
    ActivityRecord, ComputeCapability, CopyDirection, DeviceInfo, KernelLaunch, Meter, MeterConfig,
    MeterKind, TenantMap, UsageReport, WindowSize, Work,
};
use proptest::prelude::*;

mod check;
mod common;
mod merge;
use common::{device, kernel, per_tenant, BASE, S};

#[test]
fn two_tenants_capped_in_proportion_and_busy_divided() {
    // Device of 100 SMs. alice: kernel holding 80 SMs on [0, 1000); bob: 60 SMs on [500, 1500).
    // On [500, 1000) they hold 140 > 100: alice gets 80/140·100, bob 60/140·100 per ns.
    let mut meter = Meter::new(MeterConfig::default());
    let mut tm = TenantMap::default();
    tm.external.insert(1, tn("alice"));
    tm.external.insert(2, tn("bob"));
    meter.set_tenant_map(tm);
    let dev = meter.register_device(device(Some(100)));
    let mut a = ActivityRecord::new(dev, BASE + 1, BASE + 1001, kernel(80));
    a.external_id = Some(1);
    let mut b = ActivityRecord::new(dev, BASE + 501, BASE + 1501, kernel(60));
    b.external_id = Some(2);
    b.correlation_id = 2;
    meter.push(a);
    meter.push(b);
    let r = meter.finish().expect("report");
    let sm = per_tenant(&r, MeterKind::SmNs);
    // alice: 500·80 + 500·80·100/140 = 40000 + 28571.43; bob: 500·60·100/140 + 500·60 = 21428.57 + 30000
    assert_eq!(sm["alice"], 68_571);
    assert_eq!(sm["bob"], 51_429);
    assert_eq!(sm["alice"] + sm["bob"], 500 * 80 + 500 * 100 + 500 * 60);
    let busy = per_tenant(&r, MeterKind::GpuBusyNs);
    // Busy [0,1500): alice alone 500, shared 500 (250 each), bob alone 500.
    assert_eq!(busy["alice"], 750);
    assert_eq!(busy["bob"], 750);
    assert_eq!(r.device_total("GPU-test", MeterKind::KernelNs), 2000);
}

#[test]
fn odd_division_goes_to_first_name() {
    let mut meter = Meter::new(MeterConfig::default());
    let mut tm = TenantMap::default();
    tm.pid.insert(10, tn("zed"));
    tm.pid.insert(11, tn("amy"));
    meter.set_tenant_map(tm);
    let dev = meter.register_device(device(None));
    for (i, pid) in [(0u32, 10u32), (1, 11)] {
        let mut r = ActivityRecord::new(dev, BASE + 10, BASE + 13, kernel(1));
        r.process_id = Some(pid);
        r.correlation_id = i;
        meter.push(r);
    }
    let r = meter.finish().expect("report");
    let busy = per_tenant(&r, MeterKind::GpuBusyNs);
    assert_eq!((busy["amy"], busy["zed"]), (2, 1));
    // No SM count: sm_ns (and with it warp_ns) not meterable, everything else metered.
    assert!(per_tenant(&r, MeterKind::SmNs).is_empty());
    assert!(per_tenant(&r, MeterKind::WarpNs).is_empty());
    let nm: Vec<MeterKind> = r.devices[0].not_meterable.iter().map(|n| n.meter).collect();
    assert_eq!(nm, vec![MeterKind::SmNs, MeterKind::WarpNs]);
    assert!(r.devices[0].not_meterable[0].reason.contains("warp_ns"));
    for n in &r.devices[0].not_meterable {
        assert_eq!(n.code, gpumeter_core::NotMeterableCode::SmCountUnknown);
    }
    assert_eq!(r.device_total("GPU-test", MeterKind::KernelLaunches), 2);
}

#[test]
fn loss_reasons_feed_no_meter() {
    let mut meter = Meter::new(MeterConfig::default());
    let dev = meter.register_device(device(Some(10)));
    meter.push(ActivityRecord::new(dev, 0, BASE + 5, kernel(1)));
    meter.push(ActivityRecord::new(dev, BASE + 5, 0, kernel(1)));
    meter.push(ActivityRecord::new(dev, BASE + 9, BASE + 5, kernel(1)));
    meter.push(ActivityRecord::new(
        dev,
        BASE + 1,
        BASE + 8 * 86_400 * S,
        kernel(1),
    ));
    let good = ActivityRecord::new(dev, BASE + 100, BASE + 200, kernel(1));
    meter.push(good.clone());
    meter.push(good); // duplicate
                      // A late record: far beyond the horizon, then one 61 s older.
    meter.push(ActivityRecord::new(
        dev,
        BASE + 1000 * S,
        BASE + 1000 * S + 5,
        Work::Memset { bytes: 4 },
    ));
    meter.push(ActivityRecord::new(
        dev,
        BASE + 900 * S,
        BASE + 900 * S + 5,
        Work::Memset { bytes: 4 },
    ));
    // Zero duration is valid.
    meter.push(ActivityRecord::new(
        dev,
        BASE + 1001 * S,
        BASE + 1001 * S,
        kernel(1),
    ));
    let r = meter.finish().expect("report");
    let k = "GPU-test";
    assert_eq!(r.lost(k, "zero_timestamp"), 2);
    assert_eq!(r.lost(k, "end_before_start"), 1);
    assert_eq!(r.lost(k, "too_long"), 1);
    assert_eq!(r.lost(k, "duplicate"), 1);
    assert_eq!(r.lost(k, "late"), 1);
    assert_eq!(r.device_total(k, MeterKind::KernelLaunches), 2);
    assert_eq!(r.device_total(k, MeterKind::KernelNs), 100);
    assert_eq!(r.device_total(k, MeterKind::MemsetBytes), 4);
    assert_eq!(r.device_total(k, MeterKind::GpuBusyNs), 105);
    assert!(r.warnings.iter().any(|w| w.contains("lost")));
}

/// The digest is computed from the report itself (no `serde_json::Value` of it): it must be
/// the RFC 8785 digest of the report's JSON value without `sha256`, with and without
/// extensions (gpumeter's own and unknown keys) and with an empty `usage`.
#[test]
fn the_digest_is_that_of_the_reports_json_value_without_it() {
    let by_value = |r: &UsageReport| {
        let v = serde_json::to_value(r).expect("a JSON value");
        gpumeter_core::document_sha256(&v, "sha256").expect("a digest")
    };
    let mut meter = Meter::new(MeterConfig::default());
    let dev = meter.register_device(device(Some(10)));
    meter.push(ActivityRecord::new(dev, BASE + 100, BASE + 200, kernel(3)));
    meter.push(ActivityRecord::new(dev, 0, BASE + 5, kernel(1)));
    let mut r = meter.finish().expect("report");
    assert!(!r.usage.is_empty() && !r.loss.is_empty());
    assert_eq!(r.sha256, by_value(&r));
    assert!(r.verify_digest());
    r.extensions.earlier_sources.push("ab".repeat(32));
    r.extensions.other.insert(
        "x-\u{e9}\t".to_string(),
        serde_json::json!({"b": 1.5, "a": [1, "é"]}),
    );
    r.seal().expect("sealed");
    assert_eq!(r.sha256, by_value(&r));
    r.usage.clear();
    assert!(!r.verify_digest());
    r.seal().expect("sealed");
    assert_eq!(r.sha256, by_value(&r));
}

#[test]
fn window_split_of_time_meters_and_counts_at_start() {
    let mut meter = Meter::new(MeterConfig {
        window: WindowSize::parse("60s").expect("window"),
        ..MeterConfig::default()
    });
    let dev = meter.register_device(device(Some(4)));
    // A kernel from 50 s to 130 s after a window edge: 10 s, 60 s, 10 s in three windows.
    meter.push(ActivityRecord::new(
        dev,
        BASE + 50 * S,
        BASE + 130 * S,
        kernel(8),
    ));
    meter.push(ActivityRecord::new(
        dev,
        BASE + 59 * S,
        BASE + 61 * S,
        Work::Memcpy {
            bytes: 7,
            direction: CopyDirection::HostToDevice,
        },
    ));
    let r = meter.finish().expect("report");
    let rows: Vec<(String, MeterKind, u128)> = r
        .usage
        .iter()
        .map(|u| (u.window_start.clone(), u.meter, u.quantity.0))
        .collect();
    let kernel_ns: Vec<u128> = rows
        .iter()
        .filter(|r| r.1 == MeterKind::KernelNs)
        .map(|r| r.2)
        .collect();
    assert_eq!(
        kernel_ns,
        vec![10 * S as u128, 60 * S as u128, 10 * S as u128]
    );
    let sm: Vec<u128> = rows
        .iter()
        .filter(|r| r.1 == MeterKind::SmNs)
        .map(|r| r.2)
        .collect();
    assert_eq!(sm, vec![40 * S as u128, 240 * S as u128, 40 * S as u128]);
    let bytes: Vec<&(String, MeterKind, u128)> = rows
        .iter()
        .filter(|r| r.1 == MeterKind::MemcpyHtodBytes)
        .collect();
    assert_eq!(bytes.len(), 1);
    assert_eq!(bytes[0].2, 7);
    assert!(r.verify_digest());
}

#[test]
fn same_source_twice_is_metered_once() {
    let mut meter = Meter::new(MeterConfig::default());
    let src = gpumeter_core::SourceInfo {
        name: "a.json".into(),
        format: "kineto".into(),
        sha256: "ab".into(),
    };
    assert!(meter.begin_source(src.clone()));
    assert!(!meter.begin_source(gpumeter_core::SourceInfo {
        name: "b.json".into(),
        ..src
    }));
    let r = meter.finish().expect("report");
    assert_eq!(r.sources.len(), 1);
    assert!(r.warnings.iter().any(|w| w.contains("same SHA-256")));
}

#[test]
fn memory_is_bounded_by_horizon_and_cells_not_records() {
    // 200 000 kernels, 1 ms apart, over 200 s; horizon 1 s: at most ~1000 records buffered.
    let mut meter = Meter::new(MeterConfig {
        reorder_horizon_ns: S,
        window: WindowSize::parse("1m").expect("window"),
        ..MeterConfig::default()
    });
    let dev = meter.register_device(device(Some(8)));
    let mut peak = 0;
    for i in 0..200_000u64 {
        let t = BASE + i * 1_000_000;
        let mut r = ActivityRecord::new(dev, t, t + 500_000, kernel(4));
        r.correlation_id = i as u32;
        meter.push(r);
        peak = peak.max(meter.buffered_records());
    }
    assert!(peak <= 2 * 1_001 + 2, "peak buffered records {peak}");
    assert!(meter.cells() <= 5, "cells {}", meter.cells());
    let r = meter.finish().expect("report");
    assert_eq!(
        r.device_total("GPU-test", MeterKind::KernelLaunches),
        200_000
    );
    assert_eq!(
        r.device_total("GPU-test", MeterKind::KernelNs),
        200_000 * 500_000
    );
    assert_eq!(
        r.device_total("GPU-test", MeterKind::SmNs),
        200_000 * 500_000 * 4
    );
}

#[test]
fn a_huge_grid_saturates_instead_of_overflowing() {
    let mut meter = Meter::new(MeterConfig::default());
    let dev = meter.register_device(device(Some(132)));
    let k = Work::Kernel(KernelLaunch {
        grid: Some([4_194_304, 2_097_152, 2_097_152]),
        ..KernelLaunch::default()
    });
    meter.push(ActivityRecord::new(dev, BASE + 10, BASE + 20, k));
    let r = meter.finish().expect("report");
    assert_eq!(r.device_total("GPU-test", MeterKind::SmNs), 132 * 10);
}

#[test]
fn a_kernel_without_grid_makes_sm_ns_not_meterable() {
    let mut meter = Meter::new(MeterConfig::default());
    let dev = meter.register_device(device(Some(132)));
    meter.push(ActivityRecord::new(dev, BASE + 10, BASE + 20, kernel(4)));
    let mut r = ActivityRecord::new(
        dev,
        BASE + 30,
        BASE + 40,
        Work::Kernel(KernelLaunch::default()),
    );
    r.correlation_id = 1;
    meter.push(r);
    let r = meter.finish().expect("report");
    assert_eq!(r.device_total("GPU-test", MeterKind::SmNs), 0);
    assert_eq!(r.device_total("GPU-test", MeterKind::KernelNs), 20);
    // The device has no compute capability: warp_ns is not meterable either.
    let nm: Vec<MeterKind> = r.devices[0].not_meterable.iter().map(|n| n.meter).collect();
    assert_eq!(nm, vec![MeterKind::SmNs, MeterKind::WarpNs]);
    assert!(r.devices[0].not_meterable[0].reason.contains("1 kernels"));
}

#[test]
fn conflicting_descriptions_of_one_device_warn() {
    let mut meter = Meter::new(MeterConfig::default());
    meter.register_device(device(Some(132)));
    let mut other = device(Some(108));
    other.name = Some("NVIDIA A100".into());
    meter.register_device(other);
    let dev = meter.register_device(device(None));
    meter.push(ActivityRecord::new(dev, BASE + 10, BASE + 20, kernel(1)));
    let r = meter.finish().expect("report");
    assert_eq!(r.devices[0].sm_count, Some(132));
    assert!(
        r.warnings.iter().any(|w| w.contains("described twice")),
        "{:?}",
        r.warnings
    );
}

const H100: ComputeCapability = ComputeCapability { major: 9, minor: 0 };

fn launch(grid: u32, block: u32, regs: u32, smem: u64) -> Work {
    Work::Kernel(KernelLaunch {
        grid: Some([grid, 1, 1]),
        block: Some([block, 1, 1]),
        registers_per_thread: Some(regs),
        shared_mem_bytes: Some(smem),
        ..KernelLaunch::default()
    })
}

fn device_cc(sms: u32, cc: Option<ComputeCapability>) -> DeviceInfo {
    let mut d = device(Some(sms));
    d.compute_capability = cc;
    d
}

#[test]
fn warp_ns_hand_computed() {
    // cc 9.0, 132 SMs. 256-thread blocks, 32 registers, no shared memory: 8 warps per block;
    // active blocks per SM = 8 (64 warp slots ÷ 8; registers 32·32·8 = 8 K per block allow 8;
    // the 1 KiB reserve per block and 32 blocks per SM do not bind).
    // Grid 264 on 132 SMs: ⌈264 ÷ 132⌉ = 2 blocks resident → 2 × 8 = 16 warps per SM.
    // Grid 2640: ⌈2640 ÷ 132⌉ = 20 > 8 → 8 × 8 = 64 warps per SM.
    let mut meter = Meter::new(MeterConfig::default());
    let dev = meter.register_device(device_cc(132, Some(H100)));
    meter.push(ActivityRecord::new(
        dev,
        BASE + 1_000,
        BASE + 2_000,
        launch(264, 256, 32, 0),
    ));
    let mut b = ActivityRecord::new(dev, BASE + 5_000, BASE + 6_000, launch(2640, 256, 32, 0));
    b.correlation_id = 1;
    meter.push(b);
    let r = meter.finish().expect("report");
    assert_eq!(r.device_total("GPU-test", MeterKind::SmNs), 2 * 132 * 1_000);
    assert_eq!(
        r.device_total("GPU-test", MeterKind::WarpNs),
        132 * 1_000 * 16 + 132 * 1_000 * 64
    );
    assert!(r.devices[0].not_meterable.is_empty());
}

#[test]
fn warp_ns_capped_two_tenants_sum_to_the_device() {
    // 100 SMs, cc 9.0. alice: 80 blocks of 128 threads (4 warps) on [0, 1000): 1 block per SM
    // → 4 warps; bob: 60 blocks of 256 threads (8 warps) on [500, 1500) → 8 warps.
    // On [500, 1000) they hold 140 > 100 SMs: shares × 100/140.
    // alice: 500·80·4 + 500·80·4·100/140 = 160000 + 114285.71 = 274285.71
    // bob:   500·60·8·100/140 + 500·60·8 = 171428.57 + 240000 = 411428.57
    // total 685714.29 → 685714; floors 274285 + 411428, one unit to alice (.71 > .57).
    let mut meter = Meter::new(MeterConfig::default());
    let mut tm = TenantMap::default();
    tm.external.insert(1, tn("alice"));
    tm.external.insert(2, tn("bob"));
    meter.set_tenant_map(tm);
    let dev = meter.register_device(device_cc(100, Some(H100)));
    let mut a = ActivityRecord::new(dev, BASE + 1, BASE + 1001, launch(80, 128, 32, 0));
    a.external_id = Some(1);
    let mut b = ActivityRecord::new(dev, BASE + 501, BASE + 1501, launch(60, 256, 32, 0));
    b.external_id = Some(2);
    b.correlation_id = 2;
    meter.push(a);
    meter.push(b);
    let r = meter.finish().expect("report");
    let w = per_tenant(&r, MeterKind::WarpNs);
    assert_eq!(w["alice"], 274_286);
    assert_eq!(w["bob"], 411_428);
    assert_eq!(
        w["alice"] + w["bob"],
        r.device_total("GPU-test", MeterKind::WarpNs)
    );
    assert_eq!(r.device_total("GPU-test", MeterKind::WarpNs), 685_714);
    // sm_ns unchanged by the new meter.
    let sm = per_tenant(&r, MeterKind::SmNs);
    assert_eq!((sm["alice"], sm["bob"]), (68_571, 51_429));
}

#[test]
fn warp_ns_not_meterable_without_compute_capability_or_launch_facts() {
    let mut meter = Meter::new(MeterConfig::default());
    let dev = meter.register_device(device_cc(132, None));
    meter.push(ActivityRecord::new(
        dev,
        BASE + 10,
        BASE + 20,
        launch(264, 256, 32, 0),
    ));
    let r = meter.finish().expect("report");
    assert_eq!(r.device_total("GPU-test", MeterKind::SmNs), 132 * 10);
    assert_eq!(r.device_total("GPU-test", MeterKind::WarpNs), 0);
    let nm = &r.devices[0].not_meterable;
    assert_eq!(nm.len(), 1);
    assert_eq!(nm[0].meter, MeterKind::WarpNs);
    assert!(
        nm[0].reason.contains("compute capability"),
        "{}",
        nm[0].reason
    );
    assert!(r.warnings.iter().any(|w| w.contains("warp_ns")));

    // Known capability, but one kernel without registers per thread: never guessed.
    let mut meter = Meter::new(MeterConfig::default());
    let dev = meter.register_device(device_cc(132, Some(H100)));
    meter.push(ActivityRecord::new(
        dev,
        BASE + 10,
        BASE + 20,
        launch(264, 256, 32, 0),
    ));
    let mut b = ActivityRecord::new(dev, BASE + 30, BASE + 40, kernel(4));
    b.correlation_id = 1;
    meter.push(b);
    let r = meter.finish().expect("report");
    assert_eq!(r.device_total("GPU-test", MeterKind::WarpNs), 0);
    let nm = &r.devices[0].not_meterable;
    assert_eq!(nm.len(), 1);
    assert_eq!(nm[0].meter, MeterKind::WarpNs);
    assert!(nm[0].reason.contains("1 kernels"), "{}", nm[0].reason);
}

// ---------------------------------------------------------------------------------------------
// Property tests: an independent reference computes each cell's device totals.

#[derive(Debug, Clone)]
struct Rec {
    start: u64,
    len: u64,
    grid: u32,
    tenant: u8,
    memcpy: bool,
    block: u32,
    regs: u32,
    smem: u64,
}

fn arb_rec() -> impl Strategy<Value = Rec> {
    (
        (
            0u64..4 * S,
            0u64..2 * S,
            1u32..40,
            0u8..4,
            prop::bool::weighted(0.2),
        ),
        (
            prop::sample::select(vec![32u32, 64, 96, 128, 256, 500, 1024]),
            prop::sample::select(vec![16u32, 32, 40, 64]),
            prop::sample::select(vec![0u64, 4096, 40_000, 100_000]),
        ),
    )
        .prop_map(
            |((start, len, grid, tenant, memcpy), (block, regs, smem))| Rec {
                start,
                len,
                grid,
                tenant,
                memcpy,
                block,
                regs,
                smem,
            },
        )
}

/// Reference resident warps per SM (docs/METERING.md), from the occupancy calculator's active blocks.
fn ref_warps(r: &Rec, sms: u64) -> u64 {
    use gpumeter_core::occupancy::{active_blocks_per_sm, LaunchConfig, Mode};
    let occ = active_blocks_per_sm(
        H100,
        &LaunchConfig::new(r.block, r.regs, r.smem),
        Mode::Corrected,
    )
    .expect("launch accepted");
    let held = u64::from(r.grid).min(sms);
    let per_sm = u64::from(r.grid).div_ceil(held);
    u64::from(occ.active_blocks).min(per_sm) * u64::from(r.block.div_ceil(32))
}

/// Reference warp·ns per window: Σ over elementary intervals of len × Σ held·warps, times
/// SMs ÷ Σ held when capped; exact, floored per window.
fn reference_warp(recs: &[Rec], sms: u64, window: u64) -> BTreeMap<u64, u128> {
    use num_bigint::BigInt;
    use num_rational::BigRational;
    use num_traits::{ToPrimitive, Zero};
    let mut points: BTreeSet<u64> = BTreeSet::new();
    for r in recs {
        points.insert(BASE + r.start);
        points.insert(BASE + r.start + r.len);
    }
    if let (Some(&lo), Some(&hi)) = (points.first(), points.last()) {
        let mut w = lo - lo % window;
        while w <= hi {
            points.insert(w);
            w += window;
        }
    }
    let pts: Vec<u64> = points.into_iter().collect();
    let mut exact: BTreeMap<u64, BigRational> = BTreeMap::new();
    for p in pts.windows(2) {
        let (a, b) = (p[0], p[1]);
        let kernels: Vec<&Rec> = recs
            .iter()
            .filter(|r| !r.memcpy && r.len > 0)
            .filter(|r| BASE + r.start <= a && BASE + r.start + r.len >= b)
            .collect();
        let held: u64 = kernels.iter().map(|r| u64::from(r.grid).min(sms)).sum();
        let hw: u128 = kernels
            .iter()
            .map(|r| u128::from(u64::from(r.grid).min(sms)) * u128::from(ref_warps(r, sms)))
            .sum();
        if hw == 0 {
            continue;
        }
        let mut q = BigRational::from_integer(BigInt::from(u128::from(b - a) * hw));
        if held > sms {
            q *= BigRational::new(BigInt::from(sms), BigInt::from(held));
        }
        *exact
            .entry(a - a % window)
            .or_insert_with(BigRational::zero) += q;
    }
    exact
        .into_iter()
        .map(|(w, q)| (w, q.floor().to_integer().to_u128().expect("fits")))
        .filter(|&(_, q)| q > 0)
        .collect()
}

/// Reference: per window, the union length and ∫ min(Σ held, SMs) over elementary intervals.
fn reference(recs: &[Rec], sms: u64, window: u64) -> (BTreeMap<u64, u128>, BTreeMap<u64, u128>) {
    let mut points: BTreeSet<u64> = BTreeSet::new();
    for r in recs {
        points.insert(BASE + r.start);
        points.insert(BASE + r.start + r.len);
    }
    if let (Some(&lo), Some(&hi)) = (points.first(), points.last()) {
        let mut w = lo - lo % window;
        while w <= hi {
            points.insert(w);
            w += window;
        }
    }
    let pts: Vec<u64> = points.into_iter().collect();
    let mut busy = BTreeMap::new();
    let mut sm = BTreeMap::new();
    for p in pts.windows(2) {
        let (a, b) = (p[0], p[1]);
        let running: Vec<&Rec> = recs
            .iter()
            .filter(|r| BASE + r.start <= a && BASE + r.start + r.len >= b && r.len > 0)
            .collect();
        if running.is_empty() {
            continue;
        }
        let w = a - a % window;
        *busy.entry(w).or_insert(0u128) += u128::from(b - a);
        let held: u64 = running
            .iter()
            .filter(|r| !r.memcpy)
            .map(|r| u64::from(r.grid).min(sms))
            .sum();
        if held > 0 {
            *sm.entry(w).or_insert(0u128) += u128::from(b - a) * u128::from(held.min(sms));
        }
    }
    (busy, sm)
}

fn run(recs: &[Rec], sms: u32, window: WindowSize, shuffle: &[usize]) -> UsageReport {
    let mut meter = Meter::new(MeterConfig {
        window,
        ..MeterConfig::default()
    });
    let mut tm = TenantMap::default();
    for t in 0..4u32 {
        tm.pid.insert(t, tn(&format!("tenant-{t}")));
    }
    meter.set_tenant_map(tm);
    let dev = meter.register_device(device_cc(sms, Some(H100)));
    for &i in shuffle {
        let r = &recs[i];
        let work = if r.memcpy {
            Work::Memcpy {
                bytes: u64::from(r.grid),
                direction: CopyDirection::DeviceToDevice,
            }
        } else {
            launch(r.grid, r.block, r.regs, r.smem)
        };
        let mut a = ActivityRecord::new(dev, BASE + r.start, BASE + r.start + r.len, work);
        a.process_id = Some(u32::from(r.tenant));
        a.correlation_id = i as u32;
        meter.push(a);
    }
    meter.finish().expect("report")
}

fn cell_sums(r: &UsageReport, meter: MeterKind) -> BTreeMap<u64, u128> {
    let mut m = BTreeMap::new();
    for u in r.usage.iter().filter(|u| u.meter == meter) {
        let w = gpumeter_core::time::parse_rfc3339(&u.window_start).expect("window start");
        *m.entry(w).or_insert(0) += u.quantity.0;
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Conservation (docs/METERING.md, "Conservation: what the property tests check"): per (device, window) cell the tenants' shares sum to the device's
    /// busy union and capped SM·ns; a record's window parts sum to the record; counts and bytes
    /// are conserved; sm_ns ≤ SMs × busy per window; arrival order within the horizon does not
    /// change the report.
    #[test]
    fn conservation(
        recs in prop::collection::vec(arb_rec(), 1..40),
        sms in 1u32..64,
        win in prop::sample::select(vec![1u64, 2, 60]),
        seed in any::<u64>(),
    ) {
        let window = WindowSize::from_seconds(win).expect("window");
        let order: Vec<usize> = (0..recs.len()).collect();
        let r = run(&recs, sms, window, &order);
        let (busy, sm) = reference(&recs, u64::from(sms), window.ns());
        prop_assert_eq!(cell_sums(&r, MeterKind::GpuBusyNs), busy.clone());
        prop_assert_eq!(cell_sums(&r, MeterKind::SmNs), sm.clone());
        for (w, s) in &sm {
            prop_assert!(*s <= u128::from(sms) * busy.get(w).copied().unwrap_or(0));
        }
        // warp_ns: per cell, the tenants sum to the reference; ≤ max warps per SM × sm_ns.
        let warp = reference_warp(&recs, u64::from(sms), window.ns());
        prop_assert!(r.devices[0].not_meterable.is_empty());
        prop_assert_eq!(cell_sums(&r, MeterKind::WarpNs), warp.clone());
        for (w, q) in &warp {
            prop_assert!(*q <= 64 * sm.get(w).copied().unwrap_or(0));
        }
        let kernel_ns: u128 = recs.iter().filter(|r| !r.memcpy).map(|r| u128::from(r.len)).sum();
        prop_assert_eq!(r.totals.iter().filter(|t| t.meter == MeterKind::KernelNs).map(|t| t.quantity.0).sum::<u128>(), kernel_ns);
        let launches = recs.iter().filter(|r| !r.memcpy).count() as u128;
        prop_assert_eq!(r.totals.iter().filter(|t| t.meter == MeterKind::KernelLaunches).map(|t| t.quantity.0).sum::<u128>(), launches);
        let bytes: u128 = recs.iter().filter(|r| r.memcpy).map(|r| u128::from(r.grid)).sum();
        prop_assert_eq!(r.totals.iter().filter(|t| t.meter == MeterKind::MemcpyDtodBytes).map(|t| t.quantity.0).sum::<u128>(), bytes);
        // Per tenant: kernel_ns equals the tenant's own records.
        for t in 0..4u8 {
            let own: u128 = recs.iter().filter(|r| !r.memcpy && r.tenant == t).map(|r| u128::from(r.len)).sum();
            let got: u128 = r.totals.iter().filter(|x| x.meter == MeterKind::KernelNs && x.tenant == format!("tenant-{t}")).map(|x| x.quantity.0).sum();
            prop_assert_eq!(got, own);
        }
        // Shuffled arrival (all within the 60 s horizon) gives the same report.
        let mut shuffled = order.clone();
        let mut s = seed;
        for i in (1..shuffled.len()).rev() {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            shuffled.swap(i, (s >> 33) as usize % (i + 1));
        }
        let r2 = run(&recs, sms, window, &shuffled);
        prop_assert_eq!(&r2.usage, &r.usage);
        prop_assert!(r2.loss.is_empty());
    }
}

/// A tenant name known to be valid (a test's fixed name).
fn tn(name: &str) -> gpumeter_core::TenantName {
    match gpumeter_core::TenantName::parse(name) {
        Ok(t) => t,
        Err(e) => panic!("{name:?}: {e}"),
    }
}
