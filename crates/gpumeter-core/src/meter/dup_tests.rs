//! The duplicate table ([`Dups`]: lanes and their fallback table) against a model, a list of
//! every (start, [`ActivityRecord::identity`], joined facts) seen and not yet pruned, on
//! duplicate-heavy inputs: repeats with the same and other joined facts, records out of order
//! in their lane, the same fields on another lane, runs of one start longer than a lane keeps,
//! records exactly at the sweep's cut. And the meter on such inputs against the reference
//! meter, and inputs with many lanes.

use proptest::prelude::*;

use super::dup::Dups;
use super::lanes::{repacked, WorkIdentity, ENTRY_BYTES, MAX_RUN};
use super::{Meter, MeterConfig, MAX_RESIDENT_GRIDS};
use crate::device::DeviceInfo;
use crate::ops::OpCounts;
use crate::record::{
    ActivityRecord, CopyDirection, DeviceSlot, Joined, KernelLaunch, LossReason, Work,
};
use crate::time::WindowSize;

/// Joined facts: process id, external id, kernel name (index), instruction count.
type J = (Option<u32>, Option<u64>, Option<u8>, Option<u64>);

fn arb_j() -> impl Strategy<Value = J> {
    (
        proptest::option::of(1u32..3),
        proptest::option::of(1u64..3),
        proptest::option::of(0u8..2),
        proptest::option::of(0u64..2),
    )
}

#[derive(Debug, Clone)]
enum Op {
    /// A new record on `lane`, starting `dt` after the lane's latest start (negative: out of
    /// order; 0: the same start).
    Fresh {
        lane: u8,
        dt: i64,
        len: u64,
        corr: u32,
        kind: u8,
        j: J,
    },
    /// The `i`-th earlier record again, with other joined facts when given.
    Again(usize, Option<J>),
    /// The `i`-th earlier record with one identity field changed (0: another lane, 1: end,
    /// 2: correlation id, 3: grid), joined facts kept.
    Variant(usize, u8),
    /// `n` records at the lane's latest start, distinct correlation ids.
    Burst { lane: u8, n: u32 },
    /// The sweep moves to the `i`-th earlier record's start, or by `dt` past the cut.
    Prune { i: usize, exact: bool, dt: u64 },
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..6, -4i64..6, 0u64..3, 0u32..3, 0u8..4, arb_j()).prop_map(
            |(lane, dt, len, corr, kind, j)| Op::Fresh { lane, dt, len, corr, kind, j }
        ),
        4 => (0usize..1000, proptest::option::of(arb_j())).prop_map(|(i, j)| Op::Again(i, j)),
        2 => (0usize..1000, 0u8..4).prop_map(|(i, w)| Op::Variant(i, w)),
        1 => (0u8..6, 1u32..2 * MAX_RUN + 4).prop_map(|(lane, n)| Op::Burst { lane, n }),
        2 => (0usize..1000, any::<bool>(), 0u64..4)
            .prop_map(|(i, exact, dt)| Op::Prune { i, exact, dt }),
    ]
}

fn joined_of(rec: &mut ActivityRecord, j: J) {
    rec.process_id = j.0;
    rec.external_id = j.1;
    if let Work::Kernel(k) = &mut rec.work {
        k.name = j.2.map(|n| if n == 0 { "a".into() } else { "b".into() });
        k.warp_instructions = j.3;
    }
}

fn record(lane: u8, start: u64, len: u64, corr: u32, kind: u8) -> ActivityRecord {
    let work = match kind {
        0 => Work::Kernel(KernelLaunch {
            grid: (corr != 1).then_some([2, 1, 1]),
            block: Some([32, 1, 1]),
            ..KernelLaunch::default()
        }),
        1 => Work::Memcpy {
            bytes: 64,
            direction: CopyDirection::HostToDevice,
        },
        2 => Work::Memset { bytes: 64 },
        _ => Work::GraphLaunch,
    };
    let mut r = ActivityRecord::new(DeviceSlot(0), start, start + len, work);
    r.context_id = u32::from(lane / 3);
    r.stream_id = u32::from(lane % 3);
    r.correlation_id = corr;
    r
}

/// The records of a run of ops in order, and the sweep's cuts among them (`Err`).
fn inputs(ops: &[Op]) -> Vec<Result<ActivityRecord, u64>> {
    let mut latest = [100u64; 6];
    let mut cut = 0u64;
    let mut pushed: Vec<ActivityRecord> = Vec::new();
    let mut out = Vec::new();
    let push = |r: ActivityRecord,
                pushed: &mut Vec<ActivityRecord>,
                latest: &mut [u64; 6],
                out: &mut Vec<Result<ActivityRecord, u64>>| {
        let lane = (r.context_id * 3 + r.stream_id) as usize;
        latest[lane] = latest[lane].max(r.start_ns);
        pushed.push(r.clone());
        out.push(Ok(r));
    };
    for op in ops {
        match op {
            Op::Fresh {
                lane,
                dt,
                len,
                corr,
                kind,
                j,
            } => {
                let start = latest[*lane as usize].saturating_add_signed(*dt).max(1);
                let mut r = record(*lane, start, *len, *corr, *kind);
                joined_of(&mut r, *j);
                push(r, &mut pushed, &mut latest, &mut out);
            }
            Op::Again(i, j) if !pushed.is_empty() => {
                let mut r = pushed[i % pushed.len()].clone();
                if let Some(j) = j {
                    joined_of(&mut r, *j);
                }
                push(r, &mut pushed, &mut latest, &mut out);
            }
            Op::Variant(i, what) if !pushed.is_empty() => {
                let mut r = pushed[i % pushed.len()].clone();
                match what {
                    0 => r.stream_id = (r.stream_id + 1) % 3,
                    1 => r.end_ns += 1,
                    2 => r.correlation_id += 7,
                    _ => {
                        if let Work::Kernel(k) = &mut r.work {
                            k.grid = k.grid.map_or(Some([0, 0, 0]), |_| None);
                        }
                    }
                }
                push(r, &mut pushed, &mut latest, &mut out);
            }
            Op::Burst { lane, n } => {
                let start = latest[*lane as usize];
                for c in 0..*n {
                    push(
                        record(*lane, start, 1, 100 + c, 0),
                        &mut pushed,
                        &mut latest,
                        &mut out,
                    );
                }
            }
            Op::Prune { i, exact, dt } => {
                let at = match pushed.get(*i % pushed.len().max(1)) {
                    Some(r) if *exact => r.start_ns,
                    _ => cut + dt,
                };
                cut = cut.max(at);
                out.push(Err(cut));
            }
            _ => {}
        }
    }
    out
}

/// The model: every (start, identity) seen with the joined facts of its records.
#[derive(Default)]
struct Model {
    seen: Vec<(ActivityRecord, Vec<Joined>)>,
}

impl Model {
    fn note(&mut self, rec: &ActivityRecord) -> bool {
        let (id, joined) = (rec.identity(), rec.joined());
        match self.seen.iter_mut().find(|(k, _)| *k == id) {
            Some((_, js)) if js.iter().any(|j| j.agrees(&joined)) => false,
            Some((_, js)) => {
                js.push(joined);
                true
            }
            None => {
                self.seen.push((id, vec![joined]));
                true
            }
        }
    }

    fn prune(&mut self, cut: u64) {
        self.seen.retain(|(k, _)| k.start_ns >= cut);
    }
}

/// Runs `inputs` through the table and the model, skipping late records as the meter does;
/// the first difference, or the duplicates found.
fn compare(inputs: &[Result<ActivityRecord, u64>]) -> Result<u64, String> {
    let (mut dups, mut model, mut cut) = (Dups::default(), Model::default(), 0u64);
    let mut found = 0;
    for (n, input) in inputs.iter().enumerate() {
        match input {
            Ok(r) if r.start_ns < cut => {}
            Ok(r) => {
                let got = dups.note_work(r.start_ns, WorkIdentity::of(r), r.joined());
                let want = model.note(r);
                if got != want {
                    return Err(format!("input {n} {r:?}: table {got}, model {want}"));
                }
                found += u64::from(!got);
            }
            Err(c) => {
                cut = *c;
                dups.prune(cut);
                model.prune(cut);
            }
        }
        if dups.len() != model.seen.len() {
            let (g, w) = (dups.len(), model.seen.len());
            return Err(format!("input {n}: table holds {g} keys, model {w}"));
        }
    }
    Ok(found)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(500)
    ))]

    /// The table finds exactly the model's duplicates and holds exactly its keys.
    #[test]
    fn table_matches_model(ops in proptest::collection::vec(arb_op(), 0..120)) {
        if let Err(e) = compare(&inputs(&ops)) {
            prop_assert!(false, "{}", e);
        }
    }

    /// Two records have equal [`WorkIdentity`] exactly when their identities are equal.
    #[test]
    fn work_identity_is_the_identity(
        a in (0u8..6, 0u64..2, 0u32..3, 0u8..4, arb_j()),
        b in (0u8..6, 0u64..2, 0u32..3, 0u8..4, arb_j()),
        grids in (proptest::option::of(0u32..2), proptest::option::of(0u64..2)),
    ) {
        let make = |(lane, len, corr, kind, j): (u8, u64, u32, u8, J), g: Option<u32>| {
            let mut r = record(lane, 10, len, corr, kind);
            joined_of(&mut r, j);
            if let Work::Kernel(k) = &mut r.work {
                k.grid = g.map(|g| [g, 0, 0]);
            }
            r
        };
        let (ra, rb) = (make(a, grids.0), make(b, grids.0.map(|g| g ^ grids.1.unwrap_or(0) as u32)));
        prop_assert_eq!(
            WorkIdentity::of(&ra) == WorkIdentity::of(&rb),
            ra.identity() == rb.identity()
        );
    }

    /// A lane entry's packed joined facts are the facts.
    #[test]
    fn packed_joined_facts_are_the_facts(
        j in arb_j(),
        ops in proptest::collection::vec(proptest::option::of(0u64..3), 4),
    ) {
        let joined = Joined {
            process_id: j.0,
            external_id: j.1,
            name: j.2.map(|n| if n == 0 { "a".into() } else { "b".into() }),
            warp_instructions: j.3,
            ops: OpCounts {
                flops_fp64: ops[0],
                flops_fp32: ops[1],
                flops_fp16: ops[2],
                tensor_ops: ops[3],
            },
        };
        prop_assert_eq!(repacked(joined.clone()), joined);
    }

    /// The meter equals the reference meter on duplicate-heavy inputs on several lanes, with
    /// a short horizon (records late and pruned): every watermark, record count held, and the
    /// report.
    #[test]
    fn meter_matches_reference_on_lanes(
        ops in proptest::collection::vec(arb_op(), 0..120),
        horizon in 0u64..8,
    ) {
        // Fewer records than the meter runs at once on a device (`MAX_RESIDENT_GRIDS`,
        // which the reference meter does not know).
        let records: Vec<ActivityRecord> =
            inputs(&ops).into_iter().filter_map(Result::ok).take(MAX_RESIDENT_GRIDS as usize).collect();
        let got = run_meter!(Meter, &records, horizon);
        let want = run_meter!(crate::reference::Meter, &records, horizon);
        prop_assert_eq!(got, want);
    }
}

/// Pushes `records` (times in µs) into a meter type; every watermark and held count, and the
/// report.
macro_rules! run_meter {
    ($meter:ty, $records:expr, $horizon:expr) => {{
        let mut m = <$meter>::new(MeterConfig {
            window: WindowSize::from_seconds(1).expect("a window size"),
            tenant: None,
            reorder_horizon_ns: $horizon * 1000,
            max_cells: 200_000,
        });
        let slot = m.register_device(DeviceInfo::bare("GPU-0".to_string(), 0));
        let mut out = Vec::new();
        for r in $records {
            let mut r = r.clone();
            r.device = slot;
            r.start_ns *= 1000;
            r.end_ns *= 1000;
            m.push(r);
            out.push(format!("{} {}", m.watermark_ns(), m.buffered_records()));
        }
        out.push(format!("{:?}", m.finish()));
        out
    }};
}
use run_meter;

/// 100 000 records on 100 000 distinct streams, each pushed twice (the second time in
/// reverse order): every second push is a duplicate, every lane is dropped once the sweep
/// passed it.
#[test]
fn distinct_streams_stay_linear() {
    const N: u32 = 100_000;
    let rec = |i: u32| {
        let mut r = record(0, 1000 + u64::from(i), 5, i, 0);
        r.context_id = i / 7;
        r.stream_id = i;
        r
    };
    let mut dups = Dups::default();
    for i in 0..N {
        let r = rec(i);
        assert!(dups.note_work(r.start_ns, WorkIdentity::of(&r), r.joined()));
    }
    for i in (0..N).rev() {
        let r = rec(i);
        assert!(!dups.note_work(r.start_ns, WorkIdentity::of(&r), r.joined()));
    }
    assert_eq!((dups.len(), dups.lanes()), (N as usize, N as usize));
    dups.prune(1000 + u64::from(N / 2));
    assert_eq!(
        (dups.len(), dups.lanes()),
        ((N / 2) as usize, (N / 2) as usize)
    );
    dups.prune(u64::MAX);
    assert_eq!((dups.len(), dups.lanes()), (0, 0));

    // The same through the meter: each record's repeat is `duplicate` loss.
    let mut m = Meter::new(MeterConfig::default());
    let slot = m.register_device(DeviceInfo::bare("GPU-0".to_string(), 0));
    for i in (0..N).chain((0..N).rev()) {
        let mut r = rec(i);
        r.device = slot;
        m.push(r);
    }
    let report = m.finish().expect("a report");
    assert_eq!(report.records.kernel, u64::from(N));
    let lost = report
        .loss
        .iter()
        .find(|l| l.reason == LossReason::Duplicate.as_str());
    assert_eq!(lost.map(|l| l.records), Some(u64::from(N)));
}

/// 100 000 records with one start on one stream (a run far longer than a lane keeps): the
/// table holds them all, and each one's repeat is a duplicate.
#[test]
fn one_start_on_one_stream() {
    const N: u32 = 100_000;
    let mut dups = Dups::default();
    for pass in [true, false] {
        for i in 0..N {
            let r = record(0, 1000, 5, i, 0);
            assert_eq!(dups.note_work(1000, WorkIdentity::of(&r), r.joined()), pass);
        }
    }
    assert_eq!(dups.len(), N as usize);
    dups.prune(1001);
    assert_eq!((dups.len(), dups.lanes()), (0, 0));
}

/// A lane entry stays at 152 bytes on 64-bit targets (start, identity, packed joined facts,
/// the pointer to the others'): what a record costs its lane.
#[test]
#[cfg(target_pointer_width = "64")]
fn lane_entry_size() {
    assert_eq!(ENTRY_BYTES, 152);
}
