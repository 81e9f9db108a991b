//! Partitions, `memory_byte_ns`, `energy_mj` and `warp_instructions` (docs/METERING.md): hand-computed
//! cases and conservation properties.

use std::collections::BTreeMap;

use gpumeter_core::{
    ActivityRecord, KernelLaunch, MemoryEvent, MemoryOp, Meter, MeterConfig, MeterKind,
    PartitionId, TenantMap, UsageReport, WindowSize, Work, IDLE,
};
use proptest::prelude::*;

mod common;
use common::{device, kernel, per_tenant, BASE, KEY, S};

fn pids(map: &[(u32, &str)]) -> TenantMap {
    let mut tm = TenantMap::default();
    for (p, t) in map {
        tm.pid.insert(*p, tn(t));
    }
    tm
}

/// Asserts that the report has a warning containing `needle`.
fn assert_warns(r: &UsageReport, needle: &str) {
    assert!(
        r.warnings.iter().any(|w| w.contains(needle)),
        "no warning with `{needle}`: {:?}",
        r.warnings
    );
}

fn per_window(r: &UsageReport, meter: MeterKind) -> BTreeMap<String, u128> {
    let mut m = BTreeMap::new();
    for u in r.usage.iter().filter(|u| u.meter == meter) {
        *m.entry(format!("{} {}", u.window_start, u.tenant))
            .or_insert(0) += u.quantity.0;
    }
    m
}

fn rec(
    dev: gpumeter_core::DeviceSlot,
    a: u64,
    b: u64,
    work: Work,
    pid: u32,
    ctx: u32,
) -> ActivityRecord {
    let mut r = ActivityRecord::new(dev, BASE + a, BASE + b, work);
    r.process_id = Some(pid);
    r.context_id = ctx;
    r.correlation_id = pid * 1000 + ctx + a as u32;
    r
}

/// `r` in partition `p`.
fn within(mut r: ActivityRecord, p: Option<PartitionId>) -> ActivityRecord {
    r.partition = p;
    r
}

#[test]
fn green_context_cap_then_device_cap_hand_computed() {
    // Device of 100 SMs; green context 7 has 30 SMs. On [0, 1000) ns:
    //   alice (ctx 7) grid 50 → holds min(50, 30) = 30;  bob (ctx 7) grid 20 → holds 20;
    //   carol (ctx 0, the device) grid 90 → holds 90.
    // Partition cap: 30 + 20 = 50 > 30 → alice 30·30/50 = 18, bob 20·30/50 = 12.
    // Device cap: 18 + 12 + 90 = 120 > 100 → alice 15, bob 10, carol 75 (Σ = 100).
    let mut meter = Meter::new(MeterConfig::default());
    meter.set_tenant_map(pids(&[(1, "alice"), (2, "bob"), (3, "carol")]));
    let dev = meter.register_device(device(Some(100)));
    let g = meter.register_partition(dev, 30);
    assert!(g.is_some());
    meter.push(within(rec(dev, 0, 1000, kernel(50), 1, 7), g));
    meter.push(within(rec(dev, 0, 1000, kernel(20), 2, 7), g));
    meter.push(rec(dev, 0, 1000, kernel(90), 3, 0));
    let r = meter.finish().expect("report");
    let sm = per_tenant(&r, MeterKind::SmNs);
    assert_eq!(sm["alice"], 15_000);
    assert_eq!(sm["bob"], 10_000);
    assert_eq!(sm["carol"], 75_000);
    assert_eq!(r.device_total(KEY, MeterKind::SmNs), 100 * 1000);
}

#[test]
fn a_partition_alone_below_the_device_is_capped_at_its_own_sms() {
    // Green context of 40 SMs on a 132-SM device: a kernel of 100 blocks holds 40, two hold
    // 40 together (20 each), never more than the partition although the device has room.
    let mut meter = Meter::new(MeterConfig::default());
    meter.set_tenant_map(pids(&[(1, "alice"), (2, "bob")]));
    let dev = meter.register_device(device(Some(132)));
    let g = meter.register_partition(dev, 40);
    meter.push(within(rec(dev, 0, 1000, kernel(100), 1, 5), g));
    meter.push(within(rec(dev, 1000, 2000, kernel(100), 1, 5), g));
    meter.push(within(rec(dev, 1000, 2000, kernel(100), 2, 5), g));
    // An id that is not this device's partition, and 0 SMs, change nothing.
    assert_eq!(meter.register_partition(dev, 0), None);
    meter.push(within(
        rec(dev, 3000, 4000, kernel(100), 2, 5),
        Some(PartitionId(9)),
    ));
    let r = meter.finish().expect("report");
    let sm = per_tenant(&r, MeterKind::SmNs);
    assert_eq!(sm["alice"], 40_000 + 20_000);
    assert_eq!(sm["bob"], 20_000 + 100_000);
}

#[test]
fn memory_byte_ns_pairs_by_address_and_splits_at_windows() {
    let win = WindowSize::parse("60s").expect("window");
    let mut meter = Meter::new(MeterConfig {
        window: win,
        ..MeterConfig::default()
    });
    meter.set_tenant_map(pids(&[(1, "alice")]));
    let dev = meter.register_device(device(Some(10)));
    let ev = |t: u64, addr: u64, bytes: u64, op: MemoryOp| {
        let mut e = MemoryEvent::new(dev, BASE + t, addr, bytes, op);
        e.process_id = Some(1);
        e
    };
    // 1000 bytes at 0x10 from 50 s to 70 s: 10 s in window 0, 10 s in window 1.
    meter.push_memory(ev(50 * S, 0x10, 1000, MemoryOp::Allocation));
    // 8 bytes at 0x20 from 55 s to 56 s (release reports 0 bytes: the allocation's count).
    meter.push_memory(ev(55 * S, 0x20, 8, MemoryOp::Allocation));
    meter.push_memory(ev(56 * S, 0x20, 0, MemoryOp::Release));
    meter.push_memory(ev(70 * S, 0x10, 1000, MemoryOp::Release));
    // A release of an address never allocated: loss, no usage.
    meter.push_memory(ev(71 * S, 0x30, 64, MemoryOp::Release));
    let r = meter.finish().expect("report");
    let w = per_window(&r, MeterKind::MemoryByteNs);
    let w0 = gpumeter_core::time::rfc3339(BASE);
    let w1 = gpumeter_core::time::rfc3339(BASE + 60 * S);
    assert_eq!(
        w[&format!("{w0} alice")],
        1000 * 10 * u128::from(S) + 8 * u128::from(S)
    );
    assert_eq!(w[&format!("{w1} alice")], 1000 * 10 * u128::from(S));
    assert_eq!(r.lost(KEY, "release_without_allocation"), 1);
    assert!(r.open_allocations.is_empty());
}

#[test]
fn open_allocations_are_billed_to_the_end_and_carried_into_the_next_report() {
    // Report 1: 4096 bytes allocated at 10 ns, a kernel ends at 110 ns: billed 100 ns, open.
    let mut m1 = Meter::new(MeterConfig::default());
    m1.set_tenant_map(pids(&[(9, "dora")]));
    let dev = m1.register_device(device(Some(10)));
    let mut a = MemoryEvent::new(dev, BASE + 10, 0x7f00_0000_0000, 4096, MemoryOp::Allocation);
    a.process_id = Some(9);
    m1.push_memory(a);
    m1.push(rec(dev, 20, 110, kernel(1), 9, 0));
    let r1 = m1.finish().expect("report");
    assert_eq!(per_tenant(&r1, MeterKind::MemoryByteNs)["dora"], 4096 * 100);
    assert_eq!(r1.open_allocations.len(), 1);
    let open = &r1.open_allocations[0];
    assert_eq!(open.address, "0x7f0000000000");
    assert_eq!(open.tenant, "dora");
    assert_eq!(open.billed_to, gpumeter_core::time::rfc3339_ns(BASE + 110));
    // Report 2 (no tenant map): opening state from report 1, released at 1110 ns.
    let mut m2 = Meter::new(MeterConfig::default());
    m2.set_opening(std::slice::from_ref(open)).expect("opening");
    let dev2 = m2.register_device(device(Some(10)));
    let mut release = MemoryEvent::new(dev2, BASE + 1110, 0x7f00_0000_0000, 0, MemoryOp::Release);
    release.process_id = Some(9);
    m2.push_memory(release);
    let r2 = m2.finish().expect("report");
    // Attributed as report 1 resolved it; billed from 110 to 1110 ns: together, 10 → 1110.
    assert_eq!(
        per_tenant(&r2, MeterKind::MemoryByteNs)["dora"],
        4096 * 1000
    );
    assert!(r2.open_allocations.is_empty());
    // Bad opening state is a message naming the entry and field, not a panic, and nothing
    // of it is taken.
    let bad = |f: &dyn Fn(&mut gpumeter_core::OpenAllocation)| {
        let mut b = open.clone();
        f(&mut b);
        let mut m = Meter::new(MeterConfig::default());
        m.set_opening(&[open.clone(), b]).expect_err("bad entry")
    };
    for (err, field) in [
        (
            bad(&|b| b.address = "nowhere".into()),
            "open_allocations[1].address",
        ),
        (
            bad(&|b| b.tenant = " ".into()),
            "open_allocations[1].tenant",
        ),
        (
            bad(&|b| b.billed_to = "1970-01-01T00:00:00Z".into()),
            "open_allocations[1].billed_to",
        ),
        (
            bad(&|b| b.allocated_at = "2100-01-01T00:00:00Z".into()),
            "open_allocations[1].allocated_at",
        ),
        (bad(&|_| {}), "open_allocations[1].address"), // the same address twice
    ] {
        assert!(err.starts_with(field), "{err}");
    }
}

#[test]
fn opening_state_is_not_late_and_the_inputs_keep_their_device_ids() {
    // The opening's billed_to lies after the new records (overlapping reports): the records
    // are still metered, and the device keeps the id its input gives it.
    let open = gpumeter_core::OpenAllocation {
        device: 5,
        device_key: KEY.into(),
        address: "0x100".into(),
        bytes: gpumeter_core::Quantity(10),
        tenant: "dora".into(),
        process_id: Some(9),
        external_id: None,
        allocated_at: gpumeter_core::time::rfc3339_ns(BASE),
        billed_to: gpumeter_core::time::rfc3339_ns(BASE + 600 * S),
    };
    let mut m = Meter::new(MeterConfig::default());
    m.set_opening(&[open]).expect("opening");
    let dev = m.register_device(device(Some(10)));
    m.push(rec(dev, 10, 20, kernel(1), 9, 0));
    let mut release = MemoryEvent::new(dev, BASE + 700 * S, 0x100, 0, MemoryOp::Release);
    release.process_id = Some(9);
    m.push_memory(release);
    let r = m.finish().expect("report");
    assert!(r.loss.is_empty(), "{:?}", r.loss);
    assert_eq!(r.device_total(KEY, MeterKind::KernelLaunches), 1);
    assert_eq!(
        r.device_total(KEY, MeterKind::MemoryByteNs),
        10 * 100 * u128::from(S)
    );
    assert_eq!(r.devices[0].device, 0);
}

#[test]
fn memory_pairs_by_process_and_address_and_long_holds_are_billed_whole() {
    let mut m = Meter::new(MeterConfig::default());
    m.set_tenant_map(pids(&[(1, "alice"), (2, "bob")]));
    let dev = m.register_device(device(Some(10)));
    let ev = |t: u64, pid: u32, op: MemoryOp| {
        let mut e = MemoryEvent::new(dev, BASE + t, 0x500, 1000, op);
        e.process_id = Some(pid);
        e
    };
    // Two processes hold the same virtual address: two allocations, not a reallocation.
    m.push_memory(ev(1, 1, MemoryOp::Allocation));
    m.push_memory(ev(2, 2, MemoryOp::Allocation));
    m.push_memory(ev(5, 2, MemoryOp::Release));
    m.push_memory(ev(10, 1, MemoryOp::Release));
    // An allocation held for 8 days: memory may be held for any time (docs/METERING.md; the 7-day
    // bound is for work records), so all of it is billed.
    let mut old = MemoryEvent::new(dev, BASE + 20, 0x900, 1, MemoryOp::Allocation);
    old.process_id = Some(1);
    let mut late_release = old.clone();
    late_release.op = MemoryOp::Release;
    late_release.timestamp_ns = BASE + 20 + 8 * 86_400 * S;
    m.push_memory(old);
    m.push_memory(late_release);
    let r = m.finish().expect("report");
    let mem = per_tenant(&r, MeterKind::MemoryByteNs);
    let eight_days = u128::from(8 * 86_400 * S);
    assert_eq!((mem["alice"], mem["bob"]), (9000 + eight_days, 3000));
    assert!(r.loss.is_empty(), "{:?}", r.loss);
    assert_eq!(r.lost(KEY, "release_without_allocation"), 0);
    assert!(
        !r.warnings.iter().any(|w| w.contains("still held")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn a_device_with_only_memory_or_energy_has_no_sm_warnings_and_its_energy_is_idle() {
    let mut m = Meter::new(MeterConfig::default());
    let dev = m.register_device(device(None));
    m.push_energy(dev, BASE + 10 * S, 100);
    m.push_energy(dev, BASE + 20 * S, 150);
    m.push_memory(MemoryEvent::new(
        dev,
        BASE + 10,
        0x1,
        1,
        MemoryOp::Allocation,
    ));
    let r = m.finish().expect("report");
    assert!(r.devices[0].not_meterable.is_empty(), "{:?}", r.devices[0]);
    assert!(
        !r.warnings.iter().any(|w| w.contains("not meterable")),
        "{:?}",
        r.warnings
    );
    assert_eq!(per_tenant(&r, MeterKind::EnergyMj)[IDLE], 50);

    // Samples 8 days apart are not interpolated between (nor is a sample at 1 s after the
    // epoch), nor a rise faster than 100 kW: no energy, a warning, no per-window blow-up.
    for (samples, needle) in [
        (
            vec![
                (1_000_000_000, 0),
                (BASE, 100),
                (BASE + 8 * 86_400 * S, 200),
            ],
            "7 days apart",
        ),
        (
            vec![(BASE, 5), (BASE + S, u64::MAX), (BASE + 2 * S, u64::MAX)],
            "100 kW",
        ),
    ] {
        let mut m = Meter::new(MeterConfig::default());
        let dev = m.register_device(device(Some(10)));
        for (t, e) in samples {
            m.push_energy(dev, t, e);
        }
        let r = m.finish().expect("report");
        assert_eq!(r.device_total(KEY, MeterKind::EnergyMj), 0);
        assert_warns(&r, needle);
    }
}

#[test]
fn energy_is_interpolated_to_windows_and_apportioned_by_sm_ns_with_idle() {
    let win = WindowSize::parse("60s").expect("window");
    let mut meter = Meter::new(MeterConfig {
        window: win,
        ..MeterConfig::default()
    });
    meter.set_tenant_map(pids(&[(1, "alice"), (2, "bob")]));
    let dev = meter.register_device(device(Some(10)));
    // Counter 1000 mJ at 30 s, 4000 mJ at 120 s: 1000 mJ per 30 s, linear.
    // Window 0 [0, 60 s): 1000 mJ; window 1 [60, 120 s): 2000 mJ.
    meter.push_energy(dev, BASE + 120 * S, 4000);
    meter.push_energy(dev, BASE + 30 * S, 1000);
    // Window 0: alice 3 SMs and bob 1 SM over the same second → 3:1. Window 1: no work.
    meter.push(rec(dev, 40 * S, 41 * S, kernel(3), 1, 0));
    meter.push(rec(dev, 40 * S, 41 * S, kernel(1), 2, 0));
    let r = meter.finish().expect("report");
    let e = per_tenant(&r, MeterKind::EnergyMj);
    assert_eq!(e["alice"], 750);
    assert_eq!(e["bob"], 250);
    assert_eq!(e[IDLE], 2000);
    assert_eq!(r.device_total(KEY, MeterKind::EnergyMj), 3000);
}

#[test]
fn energy_without_sm_count_is_not_meterable_and_counter_resets_warn() {
    let mut meter = Meter::new(MeterConfig::default());
    let dev = meter.register_device(device(None));
    meter.push_energy(dev, BASE + 10 * S, 500);
    meter.push_energy(dev, BASE + 15 * S, 600);
    meter.push_energy(dev, BASE + 20 * S, 100);
    meter.push(rec(dev, 10, 20, kernel(1), 1, 0));
    let r = meter.finish().expect("report");
    assert_eq!(r.device_total(KEY, MeterKind::EnergyMj), 0);
    let nm: Vec<MeterKind> = r.devices[0].not_meterable.iter().map(|n| n.meter).collect();
    assert!(nm.contains(&MeterKind::EnergyMj), "{nm:?}");
    assert_warns(&r, "went down");
}

#[test]
fn warp_instructions_sum_per_tenant_and_partial_counts_are_not_meterable() {
    let with = |n: u64| {
        Work::Kernel(KernelLaunch {
            grid: Some([1, 1, 1]),
            warp_instructions: Some(n),
            ops: Default::default(),
            ..KernelLaunch::default()
        })
    };
    let mut meter = Meter::new(MeterConfig::default());
    meter.set_tenant_map(pids(&[(1, "alice"), (2, "bob")]));
    let dev = meter.register_device(device(Some(10)));
    meter.push(rec(dev, 0, 10, with(1000), 1, 0));
    meter.push(rec(dev, 20, 30, with(24), 1, 0));
    meter.push(rec(dev, 20, 30, with(7), 2, 0));
    let r = meter.finish().expect("report");
    let w = per_tenant(&r, MeterKind::WarpInstructions);
    assert_eq!((w["alice"], w["bob"]), (1024, 7));

    let mut meter = Meter::new(MeterConfig::default());
    let dev = meter.register_device(device(Some(10)));
    meter.push(rec(dev, 0, 10, with(1000), 1, 0));
    meter.push(rec(dev, 20, 30, kernel(1), 1, 0));
    let r = meter.finish().expect("report");
    assert_eq!(r.device_total(KEY, MeterKind::WarpInstructions), 0);
    let nm = &r.devices[0].not_meterable;
    let why = nm
        .iter()
        .find(|n| n.meter == MeterKind::WarpInstructions)
        .expect("entry");
    assert!(why.reason.contains("1 of 2 kernels"), "{}", why.reason);
}

// ---- properties ----------------------------------------------------------------------------

/// Independent reference for `sm_ns` with partitions: per elementary interval (between all
/// kernel starts, ends and window edges), each running kernel's exact share
/// `len × held × partition factor × device factor` as a rational, summed per (window, tenant).
fn reference_sm(
    ks: &[K],
    parts: (u32, u32),
    sms: u64,
    window_ns: u64,
) -> BTreeMap<(u64, String), num_rational::BigRational> {
    use num_rational::BigRational;
    use num_traits::Zero;
    let part_sms = |ctx: u32| -> Option<u64> {
        match ctx {
            1 => Some(u64::from(parts.0)),
            2 => Some(u64::from(parts.1)),
            _ => None,
        }
    };
    let span = |k: &K| (BASE + k.start * S / 10, BASE + (k.start + k.len) * S / 10);
    let held = |k: &K| {
        u64::from(k.grid)
            .min(part_sms(k.ctx).unwrap_or(sms))
            .min(sms)
    };
    let mut points: Vec<u64> = ks.iter().flat_map(|k| [span(k).0, span(k).1]).collect();
    let (lo, hi) = (
        points.iter().copied().min().unwrap_or(0),
        points.iter().copied().max().unwrap_or(0),
    );
    let mut w = lo - lo % window_ns;
    while w <= hi {
        points.push(w);
        w += window_ns;
    }
    points.sort_unstable();
    points.dedup();
    let tenant = |pid: u32| {
        TENANTS
            .iter()
            .find(|t| t.0 == pid)
            .map(|t| t.1)
            .unwrap_or("?")
    };
    let mut out: BTreeMap<(u64, String), BigRational> = BTreeMap::new();
    for pair in points.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let running: Vec<&K> = ks
            .iter()
            .filter(|k| span(k).0 <= a && span(k).1 >= b && span(k).1 > span(k).0)
            .collect();
        let mut h_part: BTreeMap<u32, u64> = BTreeMap::new();
        for k in &running {
            let p = if part_sms(k.ctx).is_some() { k.ctx } else { 0 };
            *h_part.entry(p).or_insert(0) += held(k);
        }
        let t: u64 = h_part
            .iter()
            .map(|(&p, &h)| {
                if p == 0 {
                    h
                } else {
                    h.min(part_sms(p).unwrap_or(h))
                }
            })
            .sum();
        let r = |n: u64, d: u64| BigRational::new(n.into(), d.into());
        for k in &running {
            let p = if part_sms(k.ctx).is_some() { k.ctx } else { 0 };
            let mut f = r(1, 1);
            if p != 0 {
                let (hp, sp) = (h_part[&p], part_sms(p).unwrap_or(1));
                if hp > sp {
                    f *= r(sp, hp);
                }
            }
            if t > sms {
                f *= r(sms, t);
            }
            let share = r((b - a) * held(k), 1) * f;
            *out.entry((a - a % window_ns, tenant(k.pid).to_string()))
                .or_insert_with(BigRational::zero) += share;
        }
    }
    out
}

#[derive(Debug, Clone)]
struct K {
    start: u64,
    len: u64,
    grid: u32,
    pid: u32,
    ctx: u32,
}

fn arb_kernel() -> impl Strategy<Value = K> {
    (0u64..400, 0u64..200, 1u32..150, 1u32..4, 0u32..3).prop_map(|(start, len, grid, pid, ctx)| K {
        start,
        len,
        grid,
        pid,
        ctx,
    })
}

#[derive(Debug, Clone)]
struct Alloc {
    at: u64,
    hold: Option<u64>,
    bytes: u64,
    pid: u32,
}

fn arb_alloc() -> impl Strategy<Value = Alloc> {
    (
        0u64..400,
        proptest::option::of(0u64..300),
        1u64..1 << 40,
        1u32..4,
    )
        .prop_map(|(at, hold, bytes, pid)| Alloc {
            at,
            hold,
            bytes,
            pid,
        })
}

const TENANTS: [(u32, &str); 3] = [(1, "alice"), (2, "bob"), (3, "carol")];

/// Meters kernels (contexts 1 and 2 are green contexts of `parts` SMs), allocations at
/// distinct addresses and energy samples, with window `w` ns (a divisor of a day) and the
/// given tenant map.
fn run(
    ks: &[K],
    allocs: &[Alloc],
    energy: &[(u64, u64)],
    parts: (u32, u32),
    window: &str,
    map: bool,
) -> UsageReport {
    let mut meter = Meter::new(MeterConfig {
        window: WindowSize::parse(window).expect("window"),
        // Events arrive in any order here: nothing may be late.
        reorder_horizon_ns: 86_400 * S,
        ..MeterConfig::default()
    });
    if map {
        meter.set_tenant_map(pids(&TENANTS));
    }
    let dev = meter.register_device(device(Some(100)));
    let p = [
        None,
        meter.register_partition(dev, parts.0),
        meter.register_partition(dev, parts.1),
    ];
    for (i, k) in ks.iter().enumerate() {
        let mut r = rec(
            dev,
            k.start * S / 10,
            (k.start + k.len) * S / 10,
            kernel(k.grid),
            k.pid,
            k.ctx,
        );
        r.partition = p[k.ctx as usize];
        r.correlation_id = i as u32;
        meter.push(r);
    }
    for (i, a) in allocs.iter().enumerate() {
        let addr = 0x1000 * (i as u64 + 1);
        let mut e = MemoryEvent::new(
            dev,
            BASE + a.at * S / 10,
            addr,
            a.bytes,
            MemoryOp::Allocation,
        );
        e.process_id = Some(a.pid);
        meter.push_memory(e);
        if let Some(h) = a.hold {
            let mut e =
                MemoryEvent::new(dev, BASE + (a.at + h) * S / 10, addr, 0, MemoryOp::Release);
            e.process_id = Some(a.pid);
            meter.push_memory(e);
        }
    }
    for &(t, e) in energy {
        meter.push_energy(dev, BASE + t * S / 10, e);
    }
    meter.finish().expect("report")
}

fn device_per_meter(r: &UsageReport) -> BTreeMap<MeterKind, u128> {
    let mut m = BTreeMap::new();
    for t in &r.totals {
        *m.entry(t.meter).or_insert(0) += t.quantity.0;
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Per (window, meter) cell the tenants' usage sums to the device's, attribution (a tenant
    /// map or none) changes no device total, and sm_ns never exceeds SMs × busy per window.
    #[test]
    fn attribution_and_partitions_conserve(
        ks in proptest::collection::vec(arb_kernel(), 1..12),
        p0 in 1u32..100, p1 in 1u32..100,
    ) {
        let mapped = run(&ks, &[], &[], (p0, p1), "15m", true);
        let plain = run(&ks, &[], &[], (p0, p1), "15m", false);
        prop_assert_eq!(device_per_meter(&mapped), device_per_meter(&plain));
        let mut busy: BTreeMap<String, u128> = BTreeMap::new();
        let mut sm: BTreeMap<String, u128> = BTreeMap::new();
        for u in &mapped.usage {
            match u.meter {
                MeterKind::GpuBusyNs => *busy.entry(u.window_start.clone()).or_insert(0) += u.quantity.0,
                MeterKind::SmNs => *sm.entry(u.window_start.clone()).or_insert(0) += u.quantity.0,
                _ => {}
            }
        }
        for (w, q) in &sm {
            prop_assert!(*q <= 100 * busy.get(w).copied().unwrap_or(0), "window {}", w);
        }
        // Each kernel's SM·ns is at most its duration × min(grid, partition SMs).
        let cap = |k: &K| -> u128 {
            let p = match k.ctx { 1 => p0, 2 => p1, _ => 100 };
            u128::from(k.len * S / 10) * u128::from(k.grid.min(p))
        };
        let bound: u128 = ks.iter().map(cap).sum();
        prop_assert!(mapped.device_total(KEY, MeterKind::SmNs) <= bound);
    }

    /// sm_ns with green contexts against the independent reference: per (window, tenant) the
    /// meter is within 1 SM·ns of the exact share, and per window the tenants sum to the floor
    /// of the exact total.
    #[test]
    fn partition_cap_matches_the_reference(
        ks in proptest::collection::vec(arb_kernel(), 1..12),
        p0 in 1u32..100, p1 in 1u32..100,
        window in prop_oneof![Just(("1s", S)), Just(("15m", 900 * S))],
    ) {
        use num_traits::{Signed, ToPrimitive};
        let r = run(&ks, &[], &[], (p0, p1), window.0, true);
        let exact = reference_sm(&ks, (p0, p1), 100, window.1);
        let mut got: BTreeMap<(u64, String), u128> = BTreeMap::new();
        for u in r.usage.iter().filter(|u| u.meter == MeterKind::SmNs) {
            let w = gpumeter_core::time::parse_rfc3339(&u.window_start).expect("time");
            got.insert((w, u.tenant.clone()), u.quantity.0);
        }
        let mut per_window: BTreeMap<u64, (num_rational::BigRational, u128)> = BTreeMap::new();
        for ((w, t), q) in &exact {
            let g = got.get(&(*w, t.clone())).copied().unwrap_or(0);
            let diff = (q - num_rational::BigRational::from_integer(g.into())).abs();
            prop_assert!(diff < num_rational::BigRational::from_integer(1.into()),
                "window {} tenant {}: meter {} vs exact {}", w, t, g, q);
            let e = per_window.entry(*w).or_insert((num_rational::BigRational::from_integer(0.into()), 0));
            e.0 += q;
            e.1 += g;
        }
        for (w, (q, g)) in per_window {
            prop_assert_eq!(q.floor().to_integer().to_u128(), Some(g), "window {}", w);
        }
        for k in got.keys() {
            prop_assert!(exact.contains_key(k), "usage without a reference share: {:?}", k);
        }
    }

    /// memory_byte_ns: every allocation contributes bytes × (release or report end − start),
    /// whatever the window, tenant map or order of events.
    #[test]
    fn memory_byte_ns_conserves(
        allocs in proptest::collection::vec(arb_alloc(), 1..10),
        ks in proptest::collection::vec(arb_kernel(), 0..4),
        window in prop_oneof![Just("60s"), Just("15m"), Just("1h")],
        map in any::<bool>(),
    ) {
        let r = run(&ks, &allocs, &[], (50, 50), window, map);
        // The report's end: the latest end of work when there is any, else the latest memory
        // time; an allocation made after it is billed nothing.
        let end = match ks.iter().map(|k| k.start + k.len).max() {
            Some(e) => e,
            None => allocs.iter().map(|a| a.at + a.hold.unwrap_or(0)).max().unwrap_or(0),
        } * S / 10;
        let expect: u128 = allocs.iter().map(|a| {
            let until = match a.hold { Some(h) => (a.at + h) * S / 10, None => end.max(a.at * S / 10) };
            u128::from(a.bytes) * u128::from(until - a.at * S / 10)
        }).sum();
        prop_assert_eq!(r.device_total(KEY, MeterKind::MemoryByteNs), expect);
        prop_assert_eq!(r.open_allocations.len(), allocs.iter().filter(|a| a.hold.is_none()).count());
        let cells: u128 = r.usage.iter().filter(|u| u.meter == MeterKind::MemoryByteNs).map(|u| u.quantity.0).sum();
        prop_assert_eq!(cells, expect);
    }

    /// energy_mj: the windows and tenants (idle included) sum to the counter's last minus first
    /// sample, for any window, samples order and work.
    #[test]
    fn energy_mj_conserves(
        steps in proptest::collection::vec((1u64..2000, 0u64..1_000_000), 2..10),
        ks in proptest::collection::vec(arb_kernel(), 0..8),
        window in prop_oneof![Just("60s"), Just("15m"), Just("1h")],
        reverse in any::<bool>(),
    ) {
        let mut t = 0;
        let mut e = 5_000u64;
        let mut samples = vec![];
        for (dt, de) in &steps {
            samples.push((t, e));
            t += dt;
            e += de;
        }
        let first = samples[0].1;
        let last = samples[samples.len() - 1].1;
        if reverse { samples.reverse(); }
        let r = run(&ks, &[], &samples, (100, 100), window, true);
        prop_assert_eq!(r.device_total(KEY, MeterKind::EnergyMj), u128::from(last - first));
        // Energy goes to tenants with sm_ns in the window, or to idle.
        let with_sm: std::collections::BTreeSet<(String, String)> = r.usage.iter()
            .filter(|u| u.meter == MeterKind::SmNs)
            .map(|u| (u.window_start.clone(), u.tenant.clone())).collect();
        for u in r.usage.iter().filter(|u| u.meter == MeterKind::EnergyMj) {
            prop_assert!(u.tenant == IDLE || with_sm.contains(&(u.window_start.clone(), u.tenant.clone())));
        }
    }
}

#[test]
fn identical_records_of_two_processes_are_both_metered() {
    // Same start, context, stream and correlation id in two processes: not duplicates.
    let mut m = Meter::new(MeterConfig::default());
    m.set_tenant_map(pids(&[(1, "alice"), (2, "bob")]));
    let dev = m.register_device(device(Some(10)));
    for pid in [1, 2] {
        let mut r = ActivityRecord::new(dev, BASE + 10, BASE + 20, kernel(1));
        r.process_id = Some(pid);
        r.correlation_id = 1;
        m.push(r);
    }
    let r = m.finish().expect("report");
    assert!(r.loss.is_empty(), "{:?}", r.loss);
    let k = per_tenant(&r, MeterKind::KernelLaunches);
    assert_eq!((k["alice"], k["bob"]), (1, 1));
}

#[test]
fn a_process_exit_ends_its_allocations_only_and_the_report_end_is_the_work_end() {
    let mut m = Meter::new(MeterConfig::default());
    m.set_tenant_map(pids(&[(1, "alice"), (2, "bob")]));
    let dev = m.register_device(device(Some(10)));
    let ev = |t: u64, pid: u32, addr: u64, op: MemoryOp| {
        let mut e = MemoryEvent::new(dev, BASE + t, addr, 100, op);
        e.process_id = Some(pid);
        e
    };
    m.push(rec(dev, 0, 1000, kernel(1), 1, 0));
    m.push_memory(ev(10, 1, 0xa, MemoryOp::Allocation));
    m.push_memory(ev(20, 1, 0xb, MemoryOp::Allocation));
    m.push_memory(ev(30, 2, 0xa, MemoryOp::Allocation));
    m.push_memory(ev(110, 1, 0, MemoryOp::ProcessExit));
    // A memory event far in the future does not stretch the report's end (the work's end).
    m.push_memory(ev(9 * 86_400 * S, 2, 0xf, MemoryOp::Allocation));
    let r = m.finish().expect("report");
    let mem = per_tenant(&r, MeterKind::MemoryByteNs);
    assert_eq!(mem["alice"], 100 * 100 + 100 * 90);
    assert_eq!(mem["bob"], 100 * (1000 - 30));
    let open: Vec<&str> = r
        .open_allocations
        .iter()
        .map(|o| o.address.as_str())
        .collect();
    assert_eq!(open, ["0xa", "0xf"]);
    assert_eq!(
        r.open_allocations[0].billed_to,
        gpumeter_core::time::rfc3339_ns(BASE + 1000)
    );
    assert_warns(&r, "2 allocations are still held");
}

#[test]
fn opening_entries_with_an_empty_device_key_or_a_reserved_tenant_are_refused() {
    let open = gpumeter_core::OpenAllocation {
        device: 0,
        device_key: KEY.into(),
        address: "0x100".into(),
        bytes: gpumeter_core::Quantity(10),
        tenant: "dora".into(),
        process_id: Some(9),
        external_id: None,
        allocated_at: gpumeter_core::time::rfc3339_ns(BASE),
        billed_to: gpumeter_core::time::rfc3339_ns(BASE + S),
    };
    let mut no_key = open.clone();
    no_key.device_key = String::new();
    let mut idle = open.clone();
    idle.tenant = IDLE.into();
    let mut forged = open;
    forged.tenant = "mallory\n  FAKE".into();
    for (bad, field) in [(no_key, "device_key"), (idle, "tenant"), (forged, "tenant")] {
        let err = Meter::new(MeterConfig::default())
            .set_opening(&[bad])
            .expect_err("refused");
        assert!(
            err.starts_with(&format!("open_allocations[0].{field}")),
            "{err}"
        );
    }
}

#[test]
fn conflicting_device_facts_do_not_depend_on_the_order_of_sources() {
    let run = |order: [(&str, u32); 2]| {
        let mut m = Meter::new(MeterConfig::default());
        for (sha, sms) in order {
            m.begin_source(gpumeter_core::SourceInfo {
                name: format!("{sha}.json"),
                format: "kineto".into(),
                sha256: sha.repeat(64),
            });
            let dev = m.register_device(device(Some(sms)));
            m.push(rec(dev, 0, 1000, kernel(200), 1, sms));
        }
        m.finish().expect("report")
    };
    let a = run([("a", 54), ("b", 132)]);
    let b = run([("b", 132), ("a", 54)]);
    // The source whose SHA-256 sorts first ("aaa…") gives the SM count.
    assert_eq!(a.devices[0].sm_count, Some(54));
    assert_eq!(a.devices, b.devices);
    assert_eq!(a.usage, b.usage);
}

/// A tenant name known to be valid (a test's fixed name).
fn tn(name: &str) -> gpumeter_core::TenantName {
    match gpumeter_core::TenantName::parse(name) {
        Ok(t) => t,
        Err(e) => panic!("{name:?}: {e}"),
    }
}
