//! Closing window sets as a recording grows gives, merged, the report of the whole recordings
//! metered at once (`gpumeter usage` of the finished files): row for row, record for record.

use gpumeter_agent::close::{close_set, SetInput};
use gpumeter_core::{
    merge_reports, LossReason, Meter, MeterConfig, TenantMap, UsageReport, WindowSize,
};
use gpumeter_recording::{announce_sources, CuptiFormat, CuptiInput, CuptiOptions};
use gpumeter_synth::SynthConfig;

#[path = "support/recording.rs"]
mod recording_support;
use proptest::prelude::*;
use recording_support::Synthetic;

const SECOND: u64 = 1_000_000_000;

/// A recording of `kernels` launches from `start_ns`, as (file bytes, end offset of each
/// frame after the header: the string table, each buffer, the end frame).
fn recording(
    seed: u64,
    pid: u32,
    start_ns: u64,
    kernels: u64,
    per_buffer: u64,
) -> (Vec<u8>, Vec<usize>) {
    let cfg = SynthConfig {
        kernels,
        devices: 1,
        streams: 2,
        tenants: 2,
        processes: 1,
        kernels_per_second: 2_000,
        seed,
        start_ns,
        kernels_per_buffer: per_buffer,
        external_correlation: true,
        api_records: true,
    };
    let r = Synthetic::new(&cfg, pid, Some(start_ns + u64::from(pid)));
    (r.bytes, r.ends)
}

fn whole(inputs: &[(&str, &[u8])], config: &MeterConfig) -> UsageReport {
    let mut meter = Meter::new(config.clone());
    let sources: Vec<CuptiInput<'_>> = inputs
        .iter()
        .map(|(name, bytes)| CuptiInput {
            name,
            bytes,
            format: CuptiFormat::Gmr,
        })
        .collect();
    let (_, batches) =
        announce_sources(&mut meter, &sources, &CuptiOptions::default()).expect("announce");
    gpumeter_core::push_batches(&mut meter, batches);
    meter.finish().expect("report")
}

fn rows(r: &UsageReport) -> Vec<String> {
    let mut v: Vec<String> = r
        .usage
        .iter()
        .map(|u| {
            format!(
                "{} {} {} {:?} {:?}",
                u.tenant, u.device_key, u.window_start, u.meter, u.quantity
            )
        })
        .collect();
    v.sort();
    v
}

fn identity(bytes: &[u8]) -> String {
    let h = gpumeter_recording::gmr::read_gmr(bytes)
        .expect("read")
        .header;
    gpumeter_agent::spool::identity(&h)
}

/// Closes sets as both recordings grow one frame at a time, each set up to the watermark
/// (`min progress − horizon`, window-aligned), then the rest at the end.
fn closed_in_steps(
    a: &(Vec<u8>, Vec<usize>),
    b: &(Vec<u8>, Vec<usize>),
    config: &MeterConfig,
    lag: usize,
) -> Vec<UsageReport> {
    let window = config.window.ns();
    let ids = [identity(&a.0), identity(&b.0)];
    let steps = a.1.len().max(b.1.len() + lag);
    let mut read = [0usize, 0usize];
    let mut from = 0u64;
    let mut out = Vec::new();
    let tenants = TenantMap::default();
    // What the last set found in each recording's bytes, as the agent keeps it; with `lag`
    // odd, every set decodes its old bytes again instead (the path after a restart).
    let mut known = std::collections::BTreeMap::new();
    for k in 0..=steps {
        let last = k == steps;
        let cut = |r: &(Vec<u8>, Vec<usize>), n: usize| {
            if last {
                r.0.len()
            } else {
                r.1[n.min(r.1.len() - 1)]
            }
        };
        let now = [cut(a, k), cut(b, k.saturating_sub(lag))];
        let progress = |bytes: &[u8]| {
            let f = gpumeter_recording::gmr::read_gmr(bytes).expect("prefix");
            let mut p = 0;
            for fr in &f.frames {
                if let gpumeter_recording::gmr::Frame::ActivityBuffer(buf) = &fr.frame {
                    let (d, _) =
                        gpumeter_cupti::decode_prefix(buf, gpumeter_cupti::ApiVersion::Cupti12_8);
                    for r in &d.records {
                        if let gpumeter_cupti::Record::Kernel(k) = &r.record {
                            p = p.max(k.start);
                        }
                    }
                }
            }
            p
        };
        let to = if last {
            u64::MAX
        } else {
            let w = progress(&a.0[..now[0]])
                .min(progress(&b.0[..now[1]]))
                .saturating_sub(config.reorder_horizon_ns);
            w / window * window
        };
        if to <= from {
            continue;
        }
        let inputs = [
            SetInput {
                name: "a.gmr",
                identity: &ids[0],
                old: &a.0[..read[0]],
                new: &a.0[..now[0]],
                tenant: None,
                known: known.get(&ids[0]).filter(|_| lag.is_multiple_of(2)),
            },
            SetInput {
                name: "b.gmr",
                identity: &ids[1],
                old: &b.0[..read[1]],
                new: &b.0[..now[1]],
                tenant: None,
                known: known.get(&ids[1]).filter(|_| lag.is_multiple_of(2)),
            },
        ];
        let closed = close_set(&inputs, from, to, config, &tenants).expect("close");
        assert_eq!(
            closed.late, 0,
            "no record is late when sets follow the watermark"
        );
        out.push(closed.report);
        known = closed.next;
        read = now;
        from = to;
    }
    out
}

fn check(seed: u64, window_s: u64, horizon_ms: u64, per_buffer: u64, lag: usize) {
    let config = MeterConfig {
        window: WindowSize::from_seconds(window_s).expect("window"),
        reorder_horizon_ns: horizon_ms * 1_000_000,
        ..MeterConfig::default()
    };
    let t0 = 1_796_083_200 * SECOND;
    let a = recording(seed, 100, t0 + 300_000_000, 3_000, per_buffer);
    let b = recording(seed + 1, 200, t0 + 700_000_000, 2_000, per_buffer);
    let oracle = whole(&[("a.gmr", &a.0), ("b.gmr", &b.0)], &config);
    let sets = closed_in_steps(&a, &b, &config, lag);
    assert!(
        sets.len() >= 2,
        "the run closes several sets ({})",
        sets.len()
    );
    let named: Vec<(String, UsageReport)> = sets
        .into_iter()
        .enumerate()
        .map(|(i, r)| (format!("set-{i:03}.json"), r))
        .collect();
    let merged = merge_reports(&named).expect("the sets merge");
    assert_eq!(rows(&merged), rows(&oracle));
    assert_eq!(merged.records.kernel, oracle.records.kernel);
    assert_eq!(merged.records.skipped, oracle.records.skipped);
    assert!(!merged
        .loss
        .iter()
        .any(|l| l.reason == LossReason::Late.as_str()));
}

#[test]
fn sets_closed_on_the_watermark_merge_to_the_whole_report() {
    check(7, 1, 200, 250, 0);
}

#[test]
fn a_recording_that_lags_the_other_holds_its_windows_open() {
    check(11, 1, 100, 200, 3);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, .. ProptestConfig::default() })]
    #[test]
    fn any_cutting_merges_to_the_whole_report(seed in 0u64..1000, window in prop::sample::select(vec![1u64, 2, 3]), horizon in 0u64..400, per_buffer in 100u64..700, lag in 0usize..4) {
        check(seed, window, horizon, per_buffer, lag);
    }
}

#[test]
fn a_recording_that_shows_up_after_its_windows_closed_is_late_not_billed() {
    let config = MeterConfig {
        window: WindowSize::from_seconds(1).expect("window"),
        reorder_horizon_ns: 100_000_000,
        ..MeterConfig::default()
    };
    let t0 = 1_796_083_200 * SECOND;
    let a = recording(3, 100, t0, 3_000, 500);
    let b = recording(4, 200, t0, 3_000, 500);
    let (ida, idb) = (identity(&a.0), identity(&b.0));
    let edge = t0 + SECOND;
    let tenants = TenantMap::default();
    // The first set closes [0, t0 + 1 s) from A alone: B is not in the spool yet.
    let first = close_set(
        &[SetInput {
            name: "a.gmr",
            identity: &ida,
            old: &[],
            new: &a.0,
            tenant: None,
            known: None,
        }],
        0,
        edge,
        &config,
        &tenants,
    )
    .expect("first set");
    assert_eq!(first.late, 0);
    // B appears: its records before the closed edge are late; the rest is billed.
    let second = close_set(
        &[
            SetInput {
                name: "a.gmr",
                identity: &ida,
                old: &a.0,
                new: &a.0,
                tenant: None,
                known: None,
            },
            SetInput {
                name: "b.gmr",
                identity: &idb,
                old: &[],
                new: &b.0,
                tenant: None,
                known: None,
            },
        ],
        edge,
        u64::MAX,
        &config,
        &tenants,
    )
    .expect("second set");
    let b_before: u64 = {
        let f = gpumeter_recording::gmr::read_gmr(&b.0).expect("b");
        f.frames
            .iter()
            .filter_map(|fr| match &fr.frame {
                gpumeter_recording::gmr::Frame::ActivityBuffer(buf) => Some(buf),
                _ => None,
            })
            .map(|buf| {
                let (d, _) = gpumeter_cupti::decode_prefix(buf, gpumeter_cupti::ApiVersion::Cupti12_8);
                d.records
                    .iter()
                    .filter(|r| matches!(&r.record, gpumeter_cupti::Record::Kernel(k) if k.start < edge))
                    .count() as u64
            })
            .sum()
    };
    assert!(b_before > 0, "the test puts some of B before the edge");
    assert_eq!(second.late, b_before);
    let late: u64 = second
        .report
        .loss
        .iter()
        .filter(|l| l.reason == LossReason::Late.as_str())
        .map(|l| l.records)
        .sum();
    assert_eq!(late, b_before, "the report counts them as loss `late`");
    // No window before the edge is in the second set: nothing is sent twice.
    let edge_text = "2026-12-01T00:00:01Z";
    assert!(second
        .report
        .usage
        .iter()
        .all(|u| u.window_start.as_str() >= edge_text));
}

/// Two pods' processes often share a process id (each pod has its own namespace): the rule's
/// tenant of each recording still bills its own work.
#[test]
fn two_recordings_with_one_process_id_keep_their_own_tenants() {
    let config = MeterConfig {
        window: WindowSize::from_seconds(1).expect("window"),
        reorder_horizon_ns: 100_000_000,
        ..MeterConfig::default()
    };
    let t0 = 1_796_083_200 * SECOND;
    // Process id 1 in both, other clocks: two recordings.
    let a = recording(5, 1, t0, 2_000, 500);
    let b = recording(6, 1, t0 + 1_000_000, 2_000, 500);
    let (ida, idb) = (identity(&a.0), identity(&b.0));
    assert_ne!(ida, idb);
    let alice = gpumeter_core::TenantName::parse("alice").expect("name");
    let bob = gpumeter_core::TenantName::parse("bob").expect("name");
    let closed = close_set(
        &[
            SetInput {
                name: "a.gmr",
                identity: &ida,
                old: &[],
                new: &a.0,
                tenant: Some(&alice),
                known: None,
            },
            SetInput {
                name: "b.gmr",
                identity: &idb,
                old: &[],
                new: &b.0,
                tenant: Some(&bob),
                known: None,
            },
        ],
        0,
        u64::MAX,
        &config,
        &TenantMap::default(),
    )
    .expect("set");
    let kernel_ns = |tenant: &str| -> u128 {
        closed
            .report
            .usage
            .iter()
            .filter(|u| u.tenant == tenant && u.meter == gpumeter_core::MeterKind::KernelNs)
            .map(|u| u.quantity.0)
            .sum()
    };
    let alone = |bytes: &[u8]| -> u128 {
        let r = whole(&[("x.gmr", bytes)], &config);
        r.usage
            .iter()
            .filter(|u| u.meter == gpumeter_core::MeterKind::KernelNs)
            .map(|u| u.quantity.0)
            .sum()
    };
    assert!(kernel_ns("alice") > 0 && kernel_ns("bob") > 0);
    assert_eq!(kernel_ns("alice"), alone(&a.0));
    assert_eq!(kernel_ns("bob"), alone(&b.0));
}
