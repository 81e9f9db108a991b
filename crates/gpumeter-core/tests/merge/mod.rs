//! `merge_reports`: order independence, conservation, and the refusals that name a report.

use std::collections::BTreeMap;

use gpumeter_core::{
    merge_reports, DeviceEntry, Extensions, MergeError, MeterKind, Quantity, RecordCounts,
    SourceEntry, UsageReport, UsageRow, METERING_POLICY, USAGE_SCHEMA,
};
use proptest::prelude::*;

const KEYS: [&str; 2] = ["GPU-aaaa", "GPU-bbbb"];
const TENANTS: [&str; 3] = ["alice", "bob", "unattributed"];
const METERS: [MeterKind; 3] = [MeterKind::SmNs, MeterKind::KernelNs, MeterKind::MemsetBytes];

/// (tenant, device, window hour, meter) → quantity, one report's rows.
type Rows = BTreeMap<(usize, usize, u64, usize), u128>;

/// A sealed report with one source (`src-<n>`) and `rows`.
fn report(n: usize, rows: &Rows) -> UsageReport {
    let usage: Vec<UsageRow> = rows
        .iter()
        .map(|(&(t, d, w, m), &q)| UsageRow {
            tenant: TENANTS[t].to_string(),
            device: d as u32,
            device_key: KEYS[d].to_string(),
            window_start: gpumeter_core::time::rfc3339(
                1_700_000_000_000_000_000 / 3_600_000_000_000 * 3_600_000_000_000
                    + w * 3_600_000_000_000,
            ),
            meter: METERS[m],
            // sm_ns and kernel_ns within what a device can do in an hour, even summed over
            // the merged reports (the checks every reader makes, issue 30); bytes any size.
            quantity: Quantity(
                if METERS[m] == MeterKind::MemsetBytes || q < 1_000_000_000 {
                    q
                } else {
                    q % 1_000_000_000 + 1
                },
            ),
        })
        .collect();
    let mut r = UsageReport {
        schema: USAGE_SCHEMA.to_string(),
        metering_policy: METERING_POLICY.to_string(),
        window_seconds: 3600,
        complete: Some(true),
        sources: vec![SourceEntry {
            name: format!("src-{n}.json"),
            format: "kineto".to_string(),
            sha256: format!("{n:064x}"),
        }],
        devices: KEYS
            .iter()
            .enumerate()
            .map(|(i, k)| DeviceEntry {
                device: i as u32,
                device_key: k.to_string(),
                name: Some("NVIDIA H100 80GB HBM3".to_string()),
                sm_count: Some(132),
                compute_capability: Some("9.0".to_string()),
                not_meterable: vec![],
            })
            .collect(),
        records: RecordCounts {
            kernel: rows.len() as u64,
            ..RecordCounts::default()
        },
        loss: vec![],
        usage,
        totals: vec![],
        open_allocations: vec![],
        warnings: vec![gpumeter_core::Warning::new(
            gpumeter_core::WarningCode::RecordsLost,
            format!("warning of report {n}"),
        )],
        extensions: Extensions::default(),
        sha256: String::new(),
    };
    r.seal_with_totals().expect("seal");
    r
}

fn rows() -> impl Strategy<Value = Rows> {
    prop::collection::btree_map(
        (0..TENANTS.len(), 0..KEYS.len(), 0u64..4, 0..METERS.len()),
        // Large quantities too: sums stay far below u128::MAX.
        prop_oneof![1u128..1_000, 1u128..(1u128 << 100)],
        0..12,
    )
}

/// Σ quantity per (tenant, device_key, meter).
fn sums<'a>(
    rows: impl Iterator<Item = &'a UsageRow>,
) -> BTreeMap<(String, String, MeterKind), u128> {
    let mut m = BTreeMap::new();
    for r in rows {
        *m.entry((r.tenant.clone(), r.device_key.clone(), r.meter))
            .or_insert(0u128) += r.quantity.0;
    }
    m
}

proptest! {
    #[test]
    fn merging_is_order_independent_and_conserves_every_quantity(
        reports in prop::collection::vec(rows(), 1..5),
        rotate in 0usize..5,
    ) {
        let inputs: Vec<(String, UsageReport)> = reports
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("node-{i}.json"), report(i, r)))
            .collect();
        let merged = merge_reports(&inputs).expect("merge");
        prop_assert!(merged.verify_digest());
        let mut other = inputs.clone();
        other.reverse();
        let k = rotate % other.len();
        other.rotate_left(k);
        let again = merge_reports(&other).expect("merge");
        prop_assert_eq!(
            serde_json::to_vec(&merged).expect("json"),
            serde_json::to_vec(&again).expect("json")
        );
        // Conservation: per (tenant, device_key, meter), Σ merged rows = Σ input rows, and
        // the totals say the same.
        let input = sums(inputs.iter().flat_map(|(_, r)| r.usage.iter()));
        prop_assert_eq!(&sums(merged.usage.iter()), &input);
        let totals: BTreeMap<(String, String, MeterKind), u128> = merged
            .totals
            .iter()
            .map(|t| ((t.tenant.clone(), t.device_key.clone(), t.meter), t.quantity.0))
            .collect();
        prop_assert_eq!(&totals, &input);
        let kernels: u64 = inputs.iter().map(|(_, r)| r.records.kernel).sum();
        prop_assert_eq!(merged.records.kernel, kernels);
        prop_assert_eq!(merged.sources.len(), inputs.len());
        // One row per key.
        let mut keys: Vec<_> = merged
            .usage
            .iter()
            .map(|r| (&r.tenant, &r.device_key, &r.window_start, r.meter))
            .collect();
        let n = keys.len();
        keys.sort();
        keys.dedup();
        prop_assert_eq!(keys.len(), n);
    }
}

#[test]
fn refusals_name_the_report() {
    let rows: Rows = BTreeMap::from([((0, 0, 0, 0), 5)]);
    let a = report(1, &rows);
    let b = report(2, &rows);
    // An edited quantity with the old digest.
    let mut edited = b.clone();
    edited.usage[0].quantity = Quantity(6);
    let e = merge_reports(&[("a.json".into(), a.clone()), ("b.json".into(), edited)])
        .expect_err("edited");
    assert_eq!(
        e,
        MergeError::Digest {
            name: "b.json".into()
        }
    );
    // Another window size.
    let mut w = b.clone();
    w.window_seconds = 900;
    w.seal().expect("seal");
    let e =
        merge_reports(&[("a.json".into(), a.clone()), ("w.json".into(), w)]).expect_err("window");
    assert!(
        matches!(e, MergeError::Mismatch { ref name, field: "window_seconds", .. } if name == "w.json"),
        "{e}"
    );
    // The same source in two different reports.
    let mut s = b.clone();
    s.sources = a.sources.clone();
    s.seal().expect("seal");
    let e =
        merge_reports(&[("a.json".into(), a.clone()), ("s.json".into(), s)]).expect_err("source");
    assert!(
        e.to_string().contains("src-1.json") && e.to_string().contains("twice"),
        "{e}"
    );
    // One device described two ways.
    let mut d = b.clone();
    d.devices[0].sm_count = Some(114);
    d.seal().expect("seal");
    let e =
        merge_reports(&[("a.json".into(), a.clone()), ("d.json".into(), d)]).expect_err("device");
    assert!(
        matches!(
            e,
            MergeError::DeviceConflict(ref c) if c.field == "sm_count"
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("a.json") && e.to_string().contains("d.json"),
        "{e}"
    );
    // The same report twice: once, with a warning; quantities not doubled.
    let m = merge_reports(&[("a.json".into(), a.clone()), ("a2.json".into(), a.clone())])
        .expect("merge");
    assert_eq!(m.usage, a.usage);
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("a2.json") && w.contains("counted once")),
        "{:?}",
        m.warnings
    );
    // Usage of one device and window in two reports: summed, with a warning.
    let m = merge_reports(&[("a.json".into(), a.clone()), ("b.json".into(), b)]).expect("merge");
    assert_eq!(m.usage.len(), 1);
    assert_eq!(m.usage[0].quantity, Quantity(10));
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("more than one report")),
        "{:?}",
        m.warnings
    );
    // Coded, and readable without the design file (which a report's reader does not have).
    let shared = m
        .warnings
        .iter()
        .find(|w| *w.code() == gpumeter_core::WarningCode::SharedWindows)
        .expect("a shared_windows warning");
    assert!(shared.contains("more than one report"), "{shared}");
    assert!(!shared.contains("DESIGN"), "{shared}");
    assert!(
        m.warnings
            .iter()
            .any(|w| w == "a.json: warning of report 1"),
        "{:?}",
        m.warnings
    );
    assert_eq!(merge_reports(&[]), Err(MergeError::Empty));
}

/// A device that two reports could not meter `sm_ns` on, one written before codes (no code)
/// and one with a code: the merged entry keeps the code, whichever report's name sorts first,
/// and both reasons.
#[test]
fn a_not_meterable_code_survives_a_merge_with_a_report_written_before_codes() {
    use gpumeter_core::{NotMeterable, NotMeterableCode};
    let with = |n: usize, code: NotMeterableCode| {
        let mut r = report(n, &Rows::new());
        r.devices[0].not_meterable = vec![NotMeterable {
            meter: MeterKind::SmNs,
            code,
            reason: format!("reason {n}"),
        }];
        r.seal().expect("seal");
        r
    };
    let old = with(1, NotMeterableCode::Uncoded);
    let new = with(2, NotMeterableCode::SmCountUnknown);
    for names in [["a.json", "b.json"], ["b.json", "a.json"]] {
        let m = merge_reports(&[
            (names[0].to_string(), old.clone()),
            (names[1].to_string(), new.clone()),
        ])
        .expect("merge");
        let entries = &m.devices[0].not_meterable;
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(
            entries[0].code,
            NotMeterableCode::SmCountUnknown,
            "{names:?}"
        );
        assert!(
            entries[0].reason.contains("reason 1") && entries[0].reason.contains("reason 2"),
            "{entries:?}"
        );
    }
}
