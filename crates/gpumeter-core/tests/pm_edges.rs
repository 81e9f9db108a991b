//! PM-sampled meters at their edges (issue 16 review): kernels over the concurrent-kernel
//! limit, times at the end of `u64`, counters near `u64::MAX`, devices with samples only,
//! drains at any edge, green contexts and caps.

use std::collections::BTreeMap;

use gpumeter_core::{MeterKind, UsageReport, IDLE};
use proptest::prelude::*;

mod common;
use common::{device, per_tenant, BASE, KEY, S};
#[path = "common/pm.rs"]
mod pm_common;
use pm_common::{arb_kernel, k, meter, sample};

fn sums(rs: &[UsageReport]) -> BTreeMap<(String, String, MeterKind), u128> {
    let mut sum = BTreeMap::new();
    for r in rs {
        for u in &r.usage {
            *sum.entry((u.window_start.clone(), u.tenant.clone(), u.meter))
                .or_insert(0) += u.quantity.0;
        }
    }
    sum
}

/// Over 128 concurrent kernels at one instant: those over the limit are lost and their SMs
/// must not take PM quantity.
#[test]
fn over_limit_kernels_take_no_pm_share() {
    let mut m = meter(3600);
    let dev = m.register_device(device(Some(132)));
    for i in 0..140u32 {
        m.push(k(dev, 0, 1000 + u64::from(i), 1, 1 + i % 4));
    }
    m.push_pm_sample(dev, &sample(0, 2000, 100_000, 1000, 7, 7));
    let r = m.finish().expect("report");
    assert_eq!(r.lost(KEY, "concurrent_kernel_limit"), 12);
    let tot: u128 = per_tenant(&r, MeterKind::SmActiveNs).values().sum();
    assert_eq!(tot, 200_000);
}

#[test]
fn samples_near_the_end_of_time() {
    let mut m = meter(1);
    let dev = m.register_device(device(Some(100)));
    let mut s = sample(0, 1, 1, 1, 1, 1);
    s.start_ns = u64::MAX - 3 * S / 2;
    s.end_ns = u64::MAX;
    s.sm_active_cycles = Some(100);
    s.sm_elapsed_cycles = Some(1);
    m.push_pm_sample(dev, &s);
    let r = m.finish().expect("report");
    assert_eq!(
        r.device_total(KEY, MeterKind::SmActiveNs),
        u128::from(3 * S / 2) * 100
    );
}

#[test]
fn huge_counters_without_sm_count() {
    let mut m = meter(1);
    let dev = m.register_device(device(None));
    for i in 0..4 {
        let mut s = sample(i * S, (i + 1) * S + S / 3, u64::MAX, 1, u64::MAX, u64::MAX);
        s.start_ns = BASE + i * 3 * S;
        s.end_ns = BASE + i * 3 * S + 7 * S / 3;
        m.push_pm_sample(dev, &s);
    }
    let r = m.finish().expect("report");
    let want: u128 = 4 * u128::from(7 * S / 3) * u128::from(u64::MAX);
    assert_eq!(r.device_total(KEY, MeterKind::SmActiveNs), want);
    assert_eq!(
        r.device_total(KEY, MeterKind::DramBytes),
        4 * 2 * u128::from(u64::MAX)
    );
}

/// A device with samples and no records, drained mid-sample, then finished.
#[test]
fn drain_of_a_device_with_only_samples() {
    let build = |drain: bool| {
        let mut m = meter(1);
        let dev = m.register_device(device(Some(100)));
        m.push_pm_sample(dev, &sample(S / 2, 5 * S / 2, 1000, 10, 3, 4));
        let mut out = Vec::new();
        if drain {
            out.push(m.drain(BASE + 2 * S).expect("drain"));
        }
        m.push(k(dev, 3 * S, 3 * S + 10, 5, 1));
        m.push_pm_sample(dev, &sample(5 * S / 2, 3 * S + 5, 1000, 10, 3, 4));
        out.push(m.finish().expect("report"));
        out
    };
    let a = build(false);
    let b = build(true);
    assert_eq!(sums(&a), sums(&b));
}

const U: u64 = 1_000_000; // 1 unit = 1 ms, windows 1 s

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Drains at any window edge after everything was pushed hand over the same usage as one
    /// finish.
    #[test]
    fn drains_keep_the_sampled_meters(
        ks in proptest::collection::vec(arb_kernel(), 0..10),
        cuts in proptest::collection::vec((1u64..300, any::<bool>(), 0u64..64_000, 1u64..1000, 0u64..1000), 1..14),
        edges in proptest::collection::vec(0u64..4, 0..3),
    ) {
        let build = |edges: &[u64]| {
            let mut m = meter(1);
            let dev = m.register_device(device(Some(64)));
            for kk in &ks {
                m.push(k(dev, kk.start * U, (kk.start + kk.len) * U, kk.grid, kk.pid));
            }
            let mut t = 0;
            for &(len, keep, act, el, rd) in &cuts {
                if keep {
                    let mut x = sample(t * U + 1, (t + len) * U + 1, act.min(el * 64), el, rd, 3);
                    x.overflow = rd % 3 == 0;
                    m.push_pm_sample(dev, &x);
                }
                t += len;
            }
            let mut out = Vec::new();
            let mut es = edges.to_vec();
            es.sort_unstable();
            for e in es {
                out.push(m.drain(BASE + e * S).expect("drain"));
            }
            out.push(m.finish().expect("report"));
            out
        };
        let a = build(&[]);
        let b = build(&edges);
        prop_assert_eq!(sums(&a), sums(&b));
        // The drained reports merged: the same usage and totals.
        let named: Vec<(String, UsageReport)> =
            b.iter().enumerate().map(|(i, r)| (format!("part{i}"), r.clone())).collect();
        let merged = gpumeter_core::merge_reports(&named).expect("merge");
        prop_assert_eq!(sums(std::slice::from_ref(&merged)), sums(&a));
        for meter in [MeterKind::SmActiveNs, MeterKind::DramBytes] {
            prop_assert_eq!(per_tenant(&merged, meter), per_tenant(&a[0], meter));
        }
        // Overflow loss and its warning survive drains and the merge.
        let n = b.iter().map(|r| r.lost(KEY, "pm_sample_overflow")).sum::<u64>();
        prop_assert_eq!(n, a[0].lost(KEY, "pm_sample_overflow"));
        prop_assert_eq!(merged.lost(KEY, "pm_sample_overflow"), n);
        prop_assert_eq!(
            merged.warnings.iter().any(|w| w.code() == &gpumeter_core::WarningCode::PmSampleOverflow),
            n > 0
        );
    }

    /// Samples that are exactly one window: each tenant gets its sm_ns share of the window
    /// (within rounding), green contexts and caps included.
    #[test]
    fn window_samples_follow_sm_ns(
        ks in proptest::collection::vec((arb_kernel(), 0u32..3), 1..14),
        qs in proptest::collection::vec((0u64..64_000_000, 1u64..1_000_000), 4),
    ) {
        let mut m = meter(1);
        let dev = m.register_device(device(Some(64)));
        let parts = [None, m.register_partition(dev, 20), m.register_partition(dev, 40)];
        for (kk, p) in &ks {
            let mut r = k(dev, kk.start * U, (kk.start + kk.len) * U, kk.grid, kk.pid);
            r.partition = parts[*p as usize];
            m.push(r);
        }
        for (i, &(act, el)) in qs.iter().enumerate() {
            let i = i as u64;
            m.push_pm_sample(dev, &sample(i * S, (i + 1) * S, act.min(el * 64), el, 0, 0));
        }
        let r = m.finish().expect("report");
        let cells = sums(std::slice::from_ref(&r));
        let mut per_w: BTreeMap<String, (u128, u128)> = BTreeMap::new();
        for ((w, t, mk), q) in &cells {
            let e = per_w.entry(w.clone()).or_default();
            match mk {
                MeterKind::SmNs => e.0 += q,
                MeterKind::SmActiveNs => e.1 += q,
                _ => {}
            }
            let _ = t;
        }
        // Each window's tenants, idle included, sum to its sample's quantity.
        let mut by_i: Vec<u128> = vec![0; qs.len()];
        for u in r.usage.iter().filter(|u| u.meter == MeterKind::SmActiveNs) {
            let w = gpumeter_core::time::parse_rfc3339(&u.window_start).expect("time");
            by_i[((w - BASE) / S) as usize] += u.quantity.0;
        }
        for (i, &(act, el)) in qs.iter().enumerate() {
            prop_assert_eq!(by_i[i], u128::from(S) * u128::from(act.min(el * 64)) / u128::from(el));
        }
        for ((w, t, mk), q) in &cells {
            if *mk != MeterKind::SmNs || t == IDLE { continue; }
            let (sm_tot, pm_tot) = per_w[w];
            let got = cells.get(&(w.clone(), t.clone(), MeterKind::SmActiveNs)).copied().unwrap_or(0);
            let want = pm_tot * q / sm_tot.max(1);
            let tol = 2 + 4 * pm_tot / sm_tot.max(1);
            prop_assert!(got + tol >= want && got <= want + tol, "{} {}: {} vs {}", w, t, got, want);
        }
    }
}
