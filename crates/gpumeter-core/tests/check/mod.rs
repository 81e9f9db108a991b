//! Issue 30, item 11: the checks every reader makes ([`check_report`]). Every report the meter
//! writes (a finished report, a snapshot, drained pieces, a merge of reports) passes them, and
//! each kind of corruption is caught, naming the row: two rows with one key (before, a merge
//! summed them: the same hour billed twice), totals that disagree with the rows, a row off the
//! window edges, a zero row, more busy time than the window, more SM time than the window ×
//! SMs, SM time on a device of 0 SMs, more kernel time than the window × 128 grids, confusable
//! tenants (Latin `tenant-0` and Cyrillic `tеnant-0`), a bad digest, a report that says it is
//! complete but is not. (Each of these readers accepted every one of these reports before.)

use gpumeter_core::report::Quantity;
use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::{
    check_report, merge_reports, ActivityRecord, CopyDirection, DeviceInfo, KernelLaunch, Meter,
    MeterConfig, MeterKind, ReportCheckError, TenantMap, TenantName, UsageReport, Warning,
    WarningCode, WindowSize, Work,
};
use proptest::prelude::*;

use crate::common::{BASE, S};

/// A work record: (start offset ns, length ns, grid, tenant 0..3, device 0..2, a copy?).
type Rec = (u64, u64, u32, u32, u32, bool);

fn arb_rec() -> impl Strategy<Value = Rec> {
    (
        0u64..6 * S,
        0u64..2 * S,
        1u32..300,
        0u32..3,
        0u32..2,
        prop::bool::weighted(0.2),
    )
}

/// A meter over two devices (GPU-a with 16 SMs, GPU-b with 132) and tenants `tenant-0..2`,
/// with `recs` pushed, and a kernel of tenants 0 and 1 each so both always have usage.
fn meter_of(recs: &[Rec], window: WindowSize, sources: &str) -> Meter {
    let mut meter = Meter::new(MeterConfig {
        window,
        ..MeterConfig::default()
    });
    let mut tm = TenantMap::default();
    for t in 0..3u32 {
        tm.pid
            .insert(t, TenantName::parse(&format!("tenant-{t}")).expect("name"));
    }
    meter.set_tenant_map(tm);
    meter.begin_source(gpumeter_core::SourceInfo {
        name: format!("{sources}.json"),
        format: "kineto".into(),
        sha256: format!("{:0>64}", sources),
    });
    let devs = [("GPU-a", 16), ("GPU-b", 132)].map(|(key, sms)| {
        let mut d = DeviceInfo::bare(key, if key == "GPU-a" { 0 } else { 1 });
        d.sm_count = Some(sms);
        meter.register_device(d)
    });
    let fixed: [Rec; 2] = [(0, S / 2, 8, 0, 0, false), (S / 4, S, 200, 1, 1, false)];
    for (i, &(start, len, grid, tenant, dev, copy)) in fixed.iter().chain(recs).enumerate() {
        let work = if copy {
            Work::Memcpy {
                bytes: u64::from(grid) * 1024,
                direction: CopyDirection::HostToDevice,
            }
        } else {
            Work::Kernel(KernelLaunch {
                grid: Some([grid, 1, 1]),
                block: Some([128, 1, 1]),
                ..KernelLaunch::default()
            })
        };
        let mut a = ActivityRecord::new(devs[dev as usize], BASE + start, BASE + start + len, work);
        a.process_id = Some(tenant);
        a.correlation_id = i as u32;
        meter.push(a);
    }
    meter
}

/// What the meter writes for `recs`: the finished report, a snapshot, the drained pieces
/// (cut at `cut`) and the merge of two reports of other sources.
fn written(recs: &[Rec], window: WindowSize, cut: u64) -> Vec<(&'static str, UsageReport)> {
    let mut out = Vec::new();
    let meter = meter_of(recs, window, "a");
    out.push(("snapshot", meter.snapshot().expect("snapshot")));
    out.push(("finish", meter.finish().expect("finish")));
    let mut drained = meter_of(recs, window, "a");
    out.push(("drain", drained.drain(BASE + cut).expect("drain")));
    out.push(("rest", drained.drain(u64::MAX).expect("drain")));
    // Two halves as two sources, merged.
    let (left, right) = recs.split_at(recs.len() / 2);
    let a = meter_of(left, window, "b").finish().expect("b");
    let b = meter_of(right, window, "c").finish().expect("c");
    match merge_reports(&[("b.json".into(), a), ("c.json".into(), b)]) {
        Ok(m) => out.push(("merge", m)),
        // Two halves' busy time can sum past a window on a device (each applied the busy-time
        // union on its own): the merge refuses that, naming the merged report.
        Err(gpumeter_core::MergeError::Check { name, error }) => {
            assert_eq!(name, "the merged report");
            assert!(matches!(*error, ReportCheckError::Impossible(_)), "{error}");
        }
        Err(e) => panic!("merge: {e}"),
    }
    out
}

/// A copy of `r` whose rows were changed by `edit`, with its totals recomputed and sealed: only
/// the rule `edit` breaks is broken.
fn edited(r: &UsageReport, edit: impl FnOnce(&mut UsageReport)) -> UsageReport {
    let mut r = r.clone();
    edit(&mut r);
    r.seal_with_totals().expect("seal");
    r
}

fn row_of(r: &UsageReport, meter: MeterKind) -> Option<usize> {
    r.usage.iter().position(|u| u.meter == meter)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn what_the_meter_writes_passes_and_each_corruption_is_caught(
        recs in prop::collection::vec(arb_rec(), 0..30),
        win in prop::sample::select(vec![2u64, 3, 60]),
        cut in 0u64..8 * S,
    ) {
        let window = WindowSize::from_seconds(win).expect("window");
        let w = u128::from(window.ns());
        for (what, r) in written(&recs, window, cut) {
            prop_assert_eq!(check_report(&r), Ok(()), "{}", what);
            prop_assert_eq!(r.complete, Some(what != "snapshot"), "{}", what);
            if r.usage.is_empty() {
                continue;
            }
            // A row given twice: refused, not summed.
            let twice = edited(&r, |r| {
                let again = r.usage[0].clone();
                r.usage.push(again);
            });
            prop_assert!(
                matches!(check_report(&twice), Err(ReportCheckError::DuplicateRow { first: 0, .. })),
                "{}: {:?}", what, check_report(&twice)
            );
            // Totals that disagree with the rows.
            let mut totals = r.clone();
            totals.totals[0].quantity.0 += 1;
            totals.seal().expect("seal");
            prop_assert!(
                matches!(check_report(&totals), Err(ReportCheckError::Totals { .. })),
                "{}: {:?}", what, check_report(&totals)
            );
            // A row one second off its window's edge.
            let off = edited(&r, |r| {
                let t = parse_rfc3339(&r.usage[0].window_start).expect("time");
                r.usage[0].window_start = rfc3339(t + S);
            });
            let e = check_report(&off);
            prop_assert!(
                matches!(&e, Err(ReportCheckError::Row { place, .. }) if place == "usage[0].window_start"),
                "{}: {:?}", what, e
            );
            // A zero row.
            let zero = edited(&r, |r| r.usage[0].quantity = Quantity(0));
            let e = check_report(&zero);
            prop_assert!(
                matches!(&e, Err(ReportCheckError::Row { place, .. }) if place == "usage[0].quantity"),
                "{}: {:?}", what, e
            );
            // Busy time past the window, kernel time past the window × 128, SM time past the
            // window × SMs, and SM time on a device of 0 SMs.
            for (meter, limit) in [
                (MeterKind::GpuBusyNs, w),
                (MeterKind::KernelNs, w * 128),
            ] {
                if let Some(i) = row_of(&r, meter) {
                    let over = edited(&r, |r| r.usage[i].quantity = Quantity(limit + 1));
                    prop_assert!(
                        matches!(check_report(&over), Err(ReportCheckError::Impossible(ref i)) if i.meter == meter),
                        "{}: {:?}", what, check_report(&over)
                    );
                }
            }
            if let Some(i) = row_of(&r, MeterKind::SmNs) {
                let key = r.usage[i].device_key.clone();
                let sms = u128::from(r.device(&key).and_then(|d| d.sm_count).expect("SMs"));
                let over = edited(&r, |r| r.usage[i].quantity = Quantity(w * sms + 1));
                prop_assert!(
                    matches!(check_report(&over), Err(ReportCheckError::Impossible(ref i)) if i.meter == MeterKind::SmNs),
                    "{}: {:?}", what, check_report(&over)
                );
                let none = edited(&r, |r| {
                    for d in r.devices.iter_mut().filter(|d| d.device_key == key) {
                        d.sm_count = Some(0);
                    }
                });
                prop_assert!(
                    matches!(check_report(&none), Err(ReportCheckError::Row { .. })),
                    "{}: {:?}", what, check_report(&none)
                );
            }
            // Latin `tenant-0` and Cyrillic `tеnant-0` (U+0435) in one report.
            if r.usage.iter().any(|u| u.tenant == "tenant-0")
                && r.usage.iter().any(|u| u.tenant == "tenant-1")
            {
                let alike = edited(&r, |r| {
                    for u in r.usage.iter_mut().filter(|u| u.tenant == "tenant-1") {
                        u.tenant = "t\u{435}nant-0".into();
                    }
                });
                prop_assert!(
                    matches!(check_report(&alike), Err(ReportCheckError::Confusable { .. })),
                    "{}: {:?}", what, check_report(&alike)
                );
            }
            // A tenant that is no tenant name.
            let bad = edited(&r, |r| r.usage[0].tenant = "evil\u{1b}[2J".into());
            prop_assert!(
                matches!(check_report(&bad), Err(ReportCheckError::Tenant { .. })),
                "{}: {:?}", what, check_report(&bad)
            );
            // An edit without a new digest.
            let mut unsealed = r.clone();
            unsealed.usage[0].quantity.0 += 1;
            prop_assert_eq!(check_report(&unsealed), Err(ReportCheckError::Digest));
            // Complete, but with an unfinished recording.
            let mut claim = r.clone();
            claim.warnings.push(Warning::new(WarningCode::UnfinishedRecording, "x.gmr: no end"));
            claim.complete = Some(true);
            claim.seal().expect("seal");
            prop_assert!(
                matches!(check_report(&claim), Err(ReportCheckError::FalselyComplete { .. })),
                "{}: {:?}", what, check_report(&claim)
            );
        }
    }
}

/// Before issue 30 a merge summed two rows of one key in one report: the same hour billed
/// twice. Now the report with the twice-listed row is refused, naming it.
#[test]
fn a_merge_refuses_a_report_that_lists_one_row_twice() {
    let r = meter_of(&[], WindowSize::HOUR, "a")
        .finish()
        .expect("report");
    let twice = edited(&r, |r| {
        let again = r.usage[0].clone();
        r.usage.push(again);
    });
    let n = twice.usage.len() - 1;
    let e = merge_reports(&[("twice.json".into(), twice)]).expect_err("refused");
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "twice.json: usage[{n}] has the tenant, device, window and meter of usage[0]"
        )),
        "{msg}"
    );
}

/// A report of the old shape (no `complete`) is judged by its sources and warnings, and its
/// digest still verifies.
#[test]
fn a_report_without_complete_is_judged_by_its_sources_and_warnings() {
    let mut r = meter_of(&[], WindowSize::HOUR, "a")
        .finish()
        .expect("report");
    r.complete = None;
    r.seal().expect("seal");
    let json = serde_json::to_string(&r).expect("json");
    assert!(!json.contains("\"complete\""), "omitted when None");
    let back: UsageReport = serde_json::from_str(&json).expect("read");
    assert_eq!(back.complete, None);
    assert!(back.verify_digest() && back.is_complete());
    assert_eq!(check_report(&back), Ok(()));
    let mut unfinished = back.clone();
    unfinished.warnings.push(Warning::new(
        WarningCode::UnfinishedRecording,
        "r.gmr: no end frame",
    ));
    unfinished.seal().expect("seal");
    assert!(!unfinished.is_complete());
    assert!(unfinished
        .incomplete_because()
        .is_some_and(|w| w.contains("end frame")));
    let mut snapshot = back;
    snapshot.sources[0].format = gpumeter_core::STREAM_SNAPSHOT_FORMAT.into();
    snapshot.seal().expect("seal");
    assert!(!snapshot.is_complete());
}
