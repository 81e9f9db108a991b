//! PM sampling's meters `sm_active_ns` and `dram_bytes` (issue 16): hand-computed cases
//! (apportioning by modelled sm_ns per sample piece, idle, window edges, loss, meterability,
//! drains) and conservation properties.

use std::collections::BTreeMap;

use gpumeter_core::{
    Meter, MeterConfig, MeterKind, NotMeterableCode, PmSample, UsageReport, WarningCode, IDLE,
};
use proptest::prelude::*;

mod common;
use common::{device, per_tenant, BASE, KEY, S};
#[path = "common/pm.rs"]
mod pm_common;
use pm_common::{arb_kernel, k, meter, sample, K};

fn has_warning(r: &UsageReport, code: WarningCode, needle: &str) -> bool {
    r.warnings
        .iter()
        .any(|w| w.code() == &code && w.message().contains(needle))
}

/// Per (window start, tenant) quantities of `meter`.
fn cells(r: &UsageReport, meter: MeterKind) -> BTreeMap<(String, String), u128> {
    let mut m = BTreeMap::new();
    for u in r.usage.iter().filter(|u| u.meter == meter) {
        *m.entry((u.window_start.clone(), u.tenant.clone()))
            .or_insert(0) += u.quantity.0;
    }
    m
}

#[test]
fn a_kernel_in_half_the_sample_takes_all_of_it() {
    let mut m = meter(3600);
    let dev = m.register_device(device(Some(100)));
    m.push(k(dev, 0, 500, 50, 1));
    // 1000 ns at 25 active SMs on average: 25 000 SM·ns; 4000 bytes.
    m.push_pm_sample(dev, &sample(0, 1000, 25_000, 1000, 3000, 1000));
    let r = m.finish().expect("report");
    let sm = per_tenant(&r, MeterKind::SmActiveNs);
    assert_eq!(sm, BTreeMap::from([("alice".to_string(), 25_000)]));
    let dram = per_tenant(&r, MeterKind::DramBytes);
    assert_eq!(dram, BTreeMap::from([("alice".to_string(), 4000)]));
    // The model next to it: 500 ns × 50 SMs.
    assert_eq!(r.device_total(KEY, MeterKind::SmNs), 25_000);
    assert!(r.loss.is_empty());
}

#[test]
fn concurrent_tenants_share_by_capped_sm_ns() {
    // 100 SMs. alice grid 80 on [0, 1000); bob grid 40 on [500, 1000).
    // sm_ns: alice 500·80 + 500·80·100/120 = 73 333.3, bob 500·40·100/120 = 16 666.7 (Σ 90 000).
    // The sample measures 9000 SM·ns: alice 7333.3 → 7333, bob 1666.7 → 1667.
    let mut m = meter(3600);
    let dev = m.register_device(device(Some(100)));
    m.push(k(dev, 0, 1000, 80, 1));
    m.push(k(dev, 500, 1000, 40, 2));
    m.push_pm_sample(dev, &sample(0, 1000, 9_000_000, 1_000_000, 10, 20));
    let r = m.finish().expect("report");
    let sm = per_tenant(&r, MeterKind::SmActiveNs);
    assert_eq!(sm["alice"], 7333);
    assert_eq!(sm["bob"], 1667);
    // 30 bytes: 24.44 and 5.56 → floors 24 and 5, the unit left to bob (0.56 > 0.44).
    let dram = per_tenant(&r, MeterKind::DramBytes);
    assert_eq!((dram["alice"], dram["bob"]), (24, 6));
}

#[test]
fn equal_shares_break_ties_by_attribution_key_not_arrival() {
    for order in [false, true] {
        let mut m = meter(3600);
        let dev = m.register_device(device(Some(100)));
        let (a, b) = (k(dev, 0, 1000, 10, 1), k(dev, 0, 1000, 10, 2));
        if order {
            m.push(b);
            m.push(a);
        } else {
            m.push(a);
            m.push(b);
        }
        // 1 byte between two equal shares: to process 1 (its key sorts first).
        m.push_pm_sample(dev, &sample(0, 1000, 0, 1000, 1, 0));
        let r = m.finish().expect("report");
        let dram = per_tenant(&r, MeterKind::DramBytes);
        assert_eq!(dram, BTreeMap::from([("alice".to_string(), 1)]), "{order}");
    }
}

#[test]
fn samples_with_no_kernel_go_to_idle() {
    let mut m = meter(3600);
    let dev = m.register_device(device(Some(100)));
    m.push(k(dev, 0, 100, 10, 2));
    m.push_pm_sample(dev, &sample(0, 1000, 1000, 1000, 7, 0));
    // Nothing runs in [2000, 3000): the memory traffic and activity there are idle.
    m.push_pm_sample(dev, &sample(2000, 3000, 500, 1000, 5, 6));
    let r = m.finish().expect("report");
    let sm = per_tenant(&r, MeterKind::SmActiveNs);
    assert_eq!(
        sm,
        BTreeMap::from([("bob".to_string(), 1000), (IDLE.to_string(), 500)])
    );
    let dram = per_tenant(&r, MeterKind::DramBytes);
    assert_eq!(
        dram,
        BTreeMap::from([("bob".to_string(), 7), (IDLE.to_string(), 11)])
    );
}

#[test]
fn a_sample_across_a_window_edge_is_split_by_time() {
    // 1 s windows; the sample spans [S − 300, S + 700): 10 bytes → ⌊10·300/1000⌋ = 3 before
    // the edge (alice runs there), 7 after (bob runs there).
    let mut m = meter(1);
    let dev = m.register_device(device(Some(100)));
    m.push(k(dev, S - 300, S - 200, 10, 1));
    m.push(k(dev, S + 100, S + 200, 10, 2));
    m.push_pm_sample(dev, &sample(S - 300, S + 700, 0, 1, 4, 6));
    let r = m.finish().expect("report");
    let c = cells(&r, MeterKind::DramBytes);
    let w0 = gpumeter_core::time::rfc3339(BASE);
    let w1 = gpumeter_core::time::rfc3339(BASE + S);
    assert_eq!(
        c,
        BTreeMap::from([((w0, "alice".to_string()), 3), ((w1, "bob".to_string()), 7)])
    );
}

#[test]
fn a_sample_the_sweep_passed_is_late() {
    let mut m = Meter::new(MeterConfig {
        reorder_horizon_ns: 1000,
        ..MeterConfig::default()
    });
    let dev = m.register_device(device(Some(100)));
    m.push(k(dev, 0, 100, 10, 1));
    m.push(k(dev, 5000, 5100, 10, 1));
    // The sweep is at 4000: a sample starting before it is late, one after is metered.
    m.push_pm_sample(dev, &sample(3000, 4500, 10, 10, 1, 1));
    m.push_pm_sample(dev, &sample(4000, 4500, 10, 10, 1, 1));
    let r = m.finish().expect("report");
    assert_eq!(r.lost(KEY, "late"), 1);
    assert_eq!(r.device_total(KEY, MeterKind::DramBytes), 2);
    assert_eq!(per_tenant(&r, MeterKind::SmActiveNs)[IDLE], 500);
}

#[test]
fn an_overflow_is_loss_and_a_warning_and_its_sample_still_counts() {
    let mut m = meter(3600);
    let dev = m.register_device(device(Some(100)));
    m.push(k(dev, 0, 1000, 10, 1));
    let mut s = sample(0, 1000, 10_000, 1000, 8, 0);
    s.overflow = true;
    m.push_pm_sample(dev, &s);
    // A counters-free sample carrying only the flag.
    m.push_pm_sample(
        dev,
        &PmSample {
            overflow: true,
            ..PmSample::default()
        },
    );
    let r = m.finish().expect("report");
    assert_eq!(r.lost(KEY, "pm_sample_overflow"), 2);
    // A count of overflows: the samples each overwrote are unknown, a lower bound.
    assert!(r
        .loss
        .iter()
        .filter(|l| l.reason == "pm_sample_overflow")
        .all(|l| l.lower_bound));
    assert!(has_warning(
        &r,
        WarningCode::PmSampleOverflow,
        "overflowed 2 times on device 0 (GPU-test): the samples it overwrote are not \
         metered (sm_active_ns and dram_bytes miss what they measured); at least 2 lost"
    ));
    // Not summed as lost records: the overflow warning is the only one that counts them.
    assert!(!r
        .warnings
        .iter()
        .any(|w| w.message().contains("records lost")));
    assert_eq!(per_tenant(&r, MeterKind::SmActiveNs)["alice"], 10_000);
    assert_eq!(per_tenant(&r, MeterKind::DramBytes)["alice"], 8);
    // One overflow: "time", not "times".
    let mut m = meter(3600);
    let dev = m.register_device(device(Some(100)));
    m.push_pm_sample(dev, &s);
    let r = m.finish().expect("report");
    assert!(has_warning(
        &r,
        WarningCode::PmSampleOverflow,
        "overflowed 1 time on device 0"
    ));
}

#[test]
fn invalid_samples_are_loss_with_their_reason() {
    let mut m = meter(3600);
    let dev = m.register_device(device(Some(100)));
    m.push(k(dev, 0, 10_000, 10, 1));
    let good = sample(1000, 2000, 10, 10, 1, 1);
    m.push_pm_sample(dev, &good);
    let cases: Vec<(PmSample, &str)> = vec![
        (
            PmSample {
                start_ns: 0,
                ..sample(0, 10, 1, 1, 1, 1)
            },
            "zero_timestamp",
        ),
        (sample(500, 400, 1, 1, 1, 1), "end_before_start"),
        (sample(500, 500, 1, 1, 1, 1), "invalid_field"),
        (sample(500, 500 + 8 * 86_400 * S, 1, 1, 1, 1), "too_long"),
        (sample(3000, 4000, 5, 0, 1, 1), "invalid_field"),
        // More active cycles than 100 SMs × elapsed.
        (sample(3000, 4000, 1001, 10, 1, 1), "invalid_field"),
        // Overlaps `good` with other counters; an exact copy of it.
        (sample(1500, 2500, 10, 10, 1, 1), "invalid_field"),
        (good, "duplicate"),
    ];
    let mut want: BTreeMap<&str, u64> = BTreeMap::new();
    for (s, reason) in &cases {
        m.push_pm_sample(dev, s);
        *want.entry(reason).or_insert(0) += 1;
    }
    let r = m.finish().expect("report");
    for (reason, n) in want {
        assert_eq!(r.lost(KEY, reason), n, "{reason}");
    }
    // Only `good` is metered: 1000 ns × 10/10 SMs, 2 bytes.
    assert_eq!(r.device_total(KEY, MeterKind::SmActiveNs), 1000);
    assert_eq!(r.device_total(KEY, MeterKind::DramBytes), 2);
    assert!(has_warning(
        &r,
        WarningCode::InvalidField,
        "4 PM samples of device 0 (GPU-test)"
    ));
    // Loss reasons are shared by records and PM samples: the count says both may be in it.
    assert!(has_warning(
        &r,
        WarningCode::RecordsLost,
        "8 records or PM samples lost on device 0 (GPU-test)"
    ));
}

#[test]
fn without_an_sm_count_the_sampled_meters_are_not_meterable() {
    let mut m = meter(3600);
    let dev = m.register_device(device(None));
    m.push(k(dev, 0, 1000, 10, 1));
    m.push_pm_sample(dev, &sample(0, 1000, 10, 10, 1, 1));
    let r = m.finish().expect("report");
    let d = r.device(KEY).expect("device");
    for meter in [MeterKind::SmActiveNs, MeterKind::DramBytes] {
        assert!(
            d.not_meterable
                .iter()
                .any(|n| n.meter == meter && n.code == NotMeterableCode::SmNsNotMeterable),
            "{meter:?}: {:?}",
            d.not_meterable
        );
        assert_eq!(r.device_total(KEY, meter), 0);
        assert!(has_warning(
            &r,
            WarningCode::NotMeterable,
            &format!("{} is not meterable on device 0", meter.as_str())
        ));
    }
    // Without kernels it is all idle, and meterable.
    let mut m = meter(3600);
    let dev = m.register_device(device(None));
    m.push_pm_sample(dev, &sample(0, 1000, 10, 10, 1, 1));
    let r = m.finish().expect("report");
    assert_eq!(per_tenant(&r, MeterKind::SmActiveNs)[IDLE], 1000);
    assert!(r.device(KEY).expect("device").not_meterable.is_empty());
}

#[test]
fn a_meter_no_sample_carries_is_not_sampled() {
    let mut m = meter(3600);
    let dev = m.register_device(device(Some(100)));
    m.push(k(dev, 0, 1000, 10, 1));
    let s = PmSample {
        sm_active_cycles: None,
        ..sample(0, 1000, 0, 10, 3, 4)
    };
    m.push_pm_sample(dev, &s);
    let r = m.finish().expect("report");
    let d = r.device(KEY).expect("device");
    let pm: Vec<_> = d
        .not_meterable
        .iter()
        .filter(|n| matches!(n.meter, MeterKind::SmActiveNs | MeterKind::DramBytes))
        .collect();
    assert_eq!(pm.len(), 1, "{:?}", d.not_meterable);
    assert_eq!(pm[0].meter, MeterKind::SmActiveNs);
    assert_eq!(pm[0].code, NotMeterableCode::NotSampled);
    assert!(has_warning(
        &r,
        WarningCode::NotMeterable,
        "carries sm_active_cycles"
    ));
    assert_eq!(r.device_total(KEY, MeterKind::DramBytes), 7);
}

#[test]
fn drains_hand_over_exactly_the_pieces_before_their_edge() {
    let build = |drain: bool| {
        let mut m = meter(1);
        let dev = m.register_device(device(Some(100)));
        m.push(k(dev, S - 500, S + 500, 30, 1));
        m.push(k(dev, S + 100, S + 900, 60, 2));
        m.push_pm_sample(dev, &sample(S - 700, S + 301, 12_345, 1000, 999, 1));
        m.push_pm_sample(dev, &sample(S + 301, S + 1000, 777, 10, 5, 5));
        let mut out = Vec::new();
        if drain {
            out.push(m.drain(BASE + S + 400).expect("drain"));
        }
        out.push(m.finish().expect("report"));
        let mut sum: BTreeMap<(String, String, MeterKind), u128> = BTreeMap::new();
        for r in &out {
            for u in &r.usage {
                *sum.entry((u.window_start.clone(), u.tenant.clone(), u.meter))
                    .or_insert(0) += u.quantity.0;
            }
        }
        (out, sum)
    };
    let (whole, once) = build(false);
    let (parts, drained) = build(true);
    assert_eq!(parts.len(), 2);
    assert!(parts[0]
        .usage
        .iter()
        .any(|u| u.meter == MeterKind::SmActiveNs));
    assert_eq!(once, drained);
    assert_eq!(
        whole[0].device_total(KEY, MeterKind::SmActiveNs),
        1001 * 12_345 / 1000 + 699 * 777 / 10
    );
}

// ---- properties -------------------------------------------------------------------------

/// Samples tiling parts of `[0, 3500)` µs: cut points, each gap kept or not, counters.
fn arb_samples() -> impl Strategy<Value = Vec<PmSample>> {
    proptest::collection::vec(
        (
            1u64..400,
            any::<bool>(),
            0u64..64_000,
            1u64..1000,
            0u64..1_000_000,
            0u64..1_000_000,
        ),
        1..12,
    )
    .prop_map(|parts| {
        let mut t = 0;
        let mut out = Vec::new();
        for (len, keep, active, elapsed, read, write) in parts {
            let (a, b) = (t, t + len);
            t = b;
            if keep {
                out.push(PmSample {
                    start_ns: BASE + a * 1000 + 1,
                    end_ns: BASE + b * 1000 + 1,
                    sm_active_cycles: Some(active.min(elapsed * 64)),
                    sm_elapsed_cycles: Some(elapsed),
                    dram_read_bytes: Some(read),
                    dram_write_bytes: Some(write),
                    overflow: false,
                });
            }
        }
        out
    })
}

/// ns per unit of the strategies' times in a run: 1 ms, so that with 1 s windows the samples
/// and kernels of the strategies (up to 3.5 s) cross window edges.
const WINDOW_NS: u64 = 1_000_000;

/// An item to push: a kernel or a sample.
#[derive(Debug, Clone)]
enum Item {
    Kernel(K),
    Sample(PmSample),
}

/// Meters `items` in the given order on a 64-SM device (1 s windows, µs times scaled so that
/// samples cross window edges: 1 µs of the strategies is 1 ms here).
fn run_items(items: &[Item]) -> UsageReport {
    let mut m = meter(1);
    let dev = m.register_device(device(Some(64)));
    for it in items {
        match it {
            Item::Kernel(kk) => m.push(k(
                dev,
                kk.start * WINDOW_NS,
                (kk.start + kk.len) * WINDOW_NS,
                kk.grid,
                kk.pid,
            )),
            Item::Sample(s) => m.push_pm_sample(dev, &scale(s)),
        }
    }
    m.finish().expect("report")
}

/// A strategy sample (µs after BASE) in the run's scale (ms after BASE).
fn scale(s: &PmSample) -> PmSample {
    PmSample {
        start_ns: BASE + (s.start_ns - BASE) * WINDOW_NS / 1000,
        end_ns: BASE + (s.end_ns - BASE) * WINDOW_NS / 1000,
        ..*s
    }
}

fn items(ks: &[K], ss: &[PmSample]) -> Vec<Item> {
    ks.iter()
        .cloned()
        .map(Item::Kernel)
        .chain(ss.iter().copied().map(Item::Sample))
        .collect()
}

/// Expected per window start (ns): Σ pieces of `meter`, and Σ pieces no kernel overlaps (idle).
fn expected(ks: &[K], ss: &[PmSample], meter: MeterKind) -> BTreeMap<u64, (u128, u128)> {
    let window = S;
    let mut out: BTreeMap<u64, (u128, u128)> = BTreeMap::new();
    for s in ss.iter().map(scale) {
        let (a, b) = (s.start_ns, s.end_ns);
        let len = u128::from(b - a);
        let q = match meter {
            MeterKind::SmActiveNs => {
                len * u128::from(s.sm_active_cycles.unwrap_or(0))
                    / u128::from(s.sm_elapsed_cycles.unwrap_or(1))
            }
            _ => {
                u128::from(s.dram_read_bytes.unwrap_or(0))
                    + u128::from(s.dram_write_bytes.unwrap_or(0))
            }
        };
        let upto = |t: u64| q * u128::from(t - a) / len;
        let mut t = a;
        while t < b {
            let w = t - (t - BASE) % window;
            let edge = (w + window).min(b);
            let piece = upto(edge) - upto(t);
            let busy = ks.iter().any(|kk| {
                let (ka, kb) = (
                    BASE + kk.start * WINDOW_NS,
                    BASE + (kk.start + kk.len) * WINDOW_NS,
                );
                ka < edge && t < kb
            });
            let e = out.entry(w).or_insert((0, 0));
            e.0 += piece;
            if !busy {
                e.1 += piece;
            }
            t = edge;
        }
    }
    out
}

/// Per window start (ns): Σ over tenants, and the idle tenant's quantity.
fn got(r: &UsageReport, meter: MeterKind) -> BTreeMap<u64, (u128, u128)> {
    let mut out: BTreeMap<u64, (u128, u128)> = BTreeMap::new();
    for u in r.usage.iter().filter(|u| u.meter == meter) {
        let w = gpumeter_core::time::parse_rfc3339(&u.window_start).expect("time");
        let e = out.entry(w).or_insert((0, 0));
        e.0 += u.quantity.0;
        if u.tenant == IDLE {
            e.1 += u.quantity.0;
        }
    }
    out
}

/// The report without the PM-sampled meters' rows.
fn without_pm(r: &UsageReport) -> (String, String, String, String) {
    let pm = |m: MeterKind| matches!(m, MeterKind::SmActiveNs | MeterKind::DramBytes);
    let usage: Vec<_> = r.usage.iter().filter(|u| !pm(u.meter)).collect();
    let totals: Vec<_> = r.totals.iter().filter(|t| !pm(t.meter)).collect();
    (
        format!("{usage:?}"),
        format!("{totals:?}"),
        format!("{:?} {:?}", r.devices, r.loss),
        format!("{:?} {:?}", r.warnings, r.records),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Per (device, window) the tenants, idle included, sum to the sample pieces there; idle
    /// holds exactly the pieces no kernel ran in; over windows the sum is the samples'.
    #[test]
    fn sampled_meters_conserve(
        ks in proptest::collection::vec(arb_kernel(), 0..10),
        ss in arb_samples(),
    ) {
        let r = run_items(&items(&ks, &ss));
        for meter in [MeterKind::SmActiveNs, MeterKind::DramBytes] {
            let mut want = expected(&ks, &ss, meter);
            want.retain(|_, (q, _)| *q > 0);
            let have = got(&r, meter);
            prop_assert_eq!(&have, &want, "{:?}", meter);
            let total: u128 = want.values().map(|v| v.0).sum();
            prop_assert_eq!(r.device_total(KEY, meter), total);
        }
        prop_assert_eq!(r.lost(KEY, "late") + r.lost(KEY, "invalid_field"), 0);
    }

    /// Kernels and samples pushed in any order within the reordering horizon give the same
    /// report.
    #[test]
    fn arrival_order_does_not_matter(
        ks in proptest::collection::vec(arb_kernel(), 0..8),
        ss in arb_samples(),
        seed in any::<u64>(),
    ) {
        let mut its = items(&ks, &ss);
        let a = run_items(&its);
        // A deterministic shuffle from the seed.
        let mut x = seed | 1;
        for i in (1..its.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            its.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let b = run_items(&its);
        prop_assert_eq!(&a.usage, &b.usage);
        prop_assert_eq!(&a.totals, &b.totals);
        prop_assert_eq!(a.sha256, b.sha256);
    }

    /// Samples change no other meter, loss, warning or device entry.
    #[test]
    fn samples_change_nothing_else(
        ks in proptest::collection::vec(arb_kernel(), 1..10),
        ss in arb_samples(),
    ) {
        let with = run_items(&items(&ks, &ss));
        let without = run_items(&items(&ks, &[]));
        prop_assert_eq!(without_pm(&with), without_pm(&without));
    }

    /// Overflow-flagged samples: loss `pm_sample_overflow` per flag and a warning, and the
    /// flagged samples' counters still conserve.
    #[test]
    fn overflows_are_reported(
        ks in proptest::collection::vec(arb_kernel(), 0..6),
        ss in arb_samples(),
        flags in proptest::collection::vec(any::<bool>(), 12),
    ) {
        let flagged: Vec<PmSample> = ss
            .iter()
            .zip(&flags)
            .map(|(s, &f)| PmSample { overflow: f, ..*s })
            .collect();
        let n = flagged.iter().filter(|s| s.overflow).count() as u64;
        let r = run_items(&items(&ks, &flagged));
        prop_assert_eq!(r.lost(KEY, "pm_sample_overflow"), n);
        prop_assert_eq!(
            r.warnings.iter().any(|w| w.code() == &WarningCode::PmSampleOverflow),
            n > 0
        );
        let total: u128 = expected(&ks, &ss, MeterKind::DramBytes).values().map(|v| v.0).sum();
        prop_assert_eq!(r.device_total(KEY, MeterKind::DramBytes), total);
    }
}
