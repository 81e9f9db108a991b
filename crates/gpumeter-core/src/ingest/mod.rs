//! One way to hand several sources to a [`Meter`]: each source's records, memory events and
//! energy samples as a [`Batch`], all batches pushed merged in time order by [`push_batches`].
//!
//! Importers and decoders (Kineto, Nsight, CUPTI buffers, `.gmr`) validate their sources whole
//! and announce them (source, devices, warnings) first, then hand their batches here, so the
//! records of one GPU from several files — of one format or of several — are never `late` for
//! the order in which the files were given.
//!
//! **The same work in new bytes is metered once.** A source is identified by the SHA-256 of
//! its bytes, and a device without a UUID by its source, so a trace
//! re-serialized (other whitespace, other key order) would be a new source with new devices
//! and bill everything again. Before pushing, [`push_batches`] compares the sources' work per
//! device: when a device of one source has the same name and exactly the same records, memory
//! events, energy samples and losses as a device of another source (every field of every
//! record, [`ActivityRecord::identity`]), it is the same GPU's work given twice and only the
//! source whose SHA-256 sorts first is metered, with a warning naming both files. A device that
//! shares only some records with another source's device of the same name is metered, with a
//! warning that says how many records the two have in common.

mod repeat;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::hash::Hash;
use std::iter::Peekable;
use std::vec::IntoIter;

use crate::record::{ActivityRecord, DeviceSlot, LossReason, MemoryEvent, MemoryOp};
use crate::Meter;

use repeat::{digest, drop_repeated_work};

/// What one announced source still has to push, on the meter's device slots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// The source's SHA-256 (lowercase hex): breaks time ties between sources, so that the
    /// order of the inputs never matters.
    pub sha256: String,
    /// The source's name in the report (a file name), for warnings.
    pub name: String,
    /// Work records, sorted by start (the importers also by end; equal keys keep the source's
    /// own order).
    pub records: Vec<ActivityRecord>,
    /// Memory events, sorted by timestamp (stably).
    pub memory: Vec<MemoryEvent>,
    /// Energy-counter samples: (device, ns since the epoch, cumulative mJ).
    pub energy: Vec<(DeviceSlot, u64, u64)>,
    /// Spans over which the source observed each device's energy counter (its first to last
    /// sample), for [`Meter::observe_energy_span`].
    pub energy_spans: Vec<(DeviceSlot, u64, u64)>,
    /// Records the source already knows are lost, per device: (device, reason, count, whether
    /// the count is only a lower bound) — a record-level fault, CUPTI dropped counts, a damaged
    /// `.gmr` frame. Booked by [`push_batches`] ([`Meter::record_loss`]).
    pub losses: Vec<(DeviceSlot, LossReason, u64, bool)>,
    /// Records lost whose device the source does not tell: (reason, count, lower bound),
    /// booked under the source's label ([`Meter::record_source_loss`]).
    pub source_losses: Vec<(LossReason, u64, bool)>,
    /// Events that are not work, by category, booked by [`push_batches`]
    /// ([`Meter::record_skipped`]).
    pub skipped: BTreeMap<String, u64>,
    /// The identity of the `.gmr` recording the batch comes from (`<host>/<pid>/<CUPTI clock>/
    /// <wall clock>` of its header), which stays the same while the recording grows: what an
    /// earlier report of a chain read of it is not metered again
    /// ([`Meter::recording_read_to`]). `None` for other sources.
    pub recording: Option<String>,
}

impl Batch {
    /// The label that names the source where no device can, the prefix of the keys of its
    /// devices without a UUID: [`crate::device::recording_label`] of a recording's identity,
    /// else [`crate::device::source_label`] of the source's SHA-256.
    pub fn label(&self) -> String {
        match &self.recording {
            Some(r) => crate::device::recording_label(r),
            None => crate::device::source_label(&self.sha256),
        }
    }
}

/// How this report continues a `.gmr` recording an earlier report of the chain read
/// (`--opening`): per device, the time up to which that report read it.
/// The one implementation of a recording's continuation, used by [`push_batches`] for a
/// recording's [`Batch`] and by the CUPTI crate's streaming file paths, which apply it item by
/// item as they replay a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Continuation {
    /// Per device slot: the earlier report read the recording up to this time (ns).
    cut: BTreeMap<DeviceSlot, u64>,
}

impl Continuation {
    /// Notes how far this report reads `recording` on each device (`ends`: device slot and
    /// the latest time, ns, of anything the source holds there: a record's end, or its start
    /// when later, a memory event, an energy sample; a slot may come several times) with
    /// [`Meter::note_recording`], and takes from the meter how far an earlier report read it
    /// ([`Meter::recording_read_to`]).
    pub fn begin(
        meter: &mut Meter,
        recording: &str,
        ends: impl IntoIterator<Item = (DeviceSlot, u64)>,
    ) -> Self {
        let mut latest: BTreeMap<DeviceSlot, u64> = BTreeMap::new();
        for (slot, t) in ends {
            let e = latest.entry(slot).or_insert(t);
            *e = (*e).max(t);
        }
        let mut cut = BTreeMap::new();
        for (&slot, &end) in &latest {
            meter.note_recording(recording, slot, end);
            if let Some(t) = meter.recording_read_to(recording, slot) {
                cut.insert(slot, t);
            }
        }
        Continuation { cut }
    }

    /// Whether an earlier report read nothing of the recording: nothing is left out.
    pub fn is_empty(&self) -> bool {
        self.cut.is_empty()
    }

    /// Whether the earlier report read what happened at `t_ns` on `slot` (a time of 0 is
    /// never read: the meter refuses it itself).
    fn read(&self, slot: DeviceSlot, t_ns: u64) -> bool {
        self.cut.get(&slot).is_some_and(|&c| t_ns != 0 && t_ns <= c)
    }

    /// Whether the earlier report metered `r` (it ended at or before the time read to on its
    /// device): counted as billed by the opening report, not pushed.
    pub fn read_record(&self, r: &ActivityRecord) -> bool {
        r.start_ns != 0 && self.read(r.device, r.end_ns.max(r.start_ns))
    }

    /// Whether the earlier report metered `m` (at or before the time read to on its device).
    pub fn read_memory(&self, m: &MemoryEvent) -> bool {
        self.read(m.device, m.timestamp_ns)
    }

    /// Leaves out the energy samples (device, ns, cumulative mJ) the earlier report read,
    /// except the last one of each device, which stays as the start of what this report
    /// interpolates; the observed spans (device, first, last ns) start there.
    pub fn cut_energy(
        &self,
        energy: &mut Vec<(DeviceSlot, u64, u64)>,
        spans: &mut [(DeviceSlot, u64, u64)],
    ) {
        if self.is_empty() {
            return;
        }
        let mut anchor: BTreeMap<DeviceSlot, u64> = BTreeMap::new();
        for &(slot, t, _) in energy.iter() {
            if self.read(slot, t) {
                let a = anchor.entry(slot).or_insert(t);
                *a = (*a).max(t);
            }
        }
        energy.retain(|&(slot, t, _)| anchor.get(&slot).is_none_or(|&a| t >= a));
        for span in spans {
            if let Some(&a) = anchor.get(&span.0) {
                span.1 = span.1.max(a);
            }
        }
    }
}

/// For a batch of a `.gmr` recording: notes how far this report reads it on each device, and
/// leaves out what an earlier report of the chain read of it ([`Continuation`]), counting the
/// records and events as skipped `billed_by_opening_report` ([`Meter::continue_from`]).
fn continue_recording(meter: &mut Meter, b: &mut Batch) {
    let Some(rec) = b.recording.clone() else {
        return;
    };
    let ends = b
        .records
        .iter()
        .map(|r| (r.device, r.end_ns.max(r.start_ns)))
        .chain(b.memory.iter().map(|m| (m.device, m.timestamp_ns)))
        .chain(b.energy.iter().map(|&(slot, t, _)| (slot, t)));
    let cont = Continuation::begin(meter, &rec, ends.collect::<Vec<_>>());
    if cont.is_empty() {
        return;
    }
    let (n_rec, n_mem) = (b.records.len(), b.memory.len());
    b.records.retain(|r| !cont.read_record(r));
    b.memory.retain(|m| !cont.read_memory(m));
    cont.cut_energy(&mut b.energy, &mut b.energy_spans);
    meter.record_billed_earlier(
        (n_rec - b.records.len()) as u64,
        (n_mem - b.memory.len()) as u64,
    );
}

/// The 64-bit digest [`push_batches`] finds candidate repeated work by: of a record's
/// [`ActivityRecord::identity`] or a memory event's [`MemoryEvent::identity`]. Two parts (one
/// source's work on one device) are compared only when one holds one of the
/// [`REPEAT_PROBES`] smallest distinct digests of the other: a source that can show no part of
/// another source holds any of its parts' probes (the CUPTI crate's streaming merge does, from
/// sketches of its files) is not affected by the comparison.
pub fn identity_digest<T: Hash>(identity: &T) -> u64 {
    digest(identity)
}

/// How many of a part's smallest distinct digests [`push_batches`] probes other parts with
/// ([`identity_digest`]).
pub const REPEAT_PROBES: usize = 4;

type Heads = (
    Peekable<IntoIter<ActivityRecord>>,
    Peekable<IntoIter<MemoryEvent>>,
);

/// The time and class of a batch's next item: work records 0, releases and process exits 1,
/// allocations 2 (at equal times, work is booked before memory changes, and memory is freed
/// before it is taken again).
fn head(it: &mut Heads) -> Option<(u64, u8)> {
    let r = it.0.peek().map(|r| (r.start_ns, 0u8));
    let m = it.1.peek().map(|m| {
        let class = if m.op == MemoryOp::Allocation { 2 } else { 1 };
        (m.timestamp_ns, class)
    });
    match (r, m) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Pushes the batches into `meter`: first drops the work of any device that repeats another
/// source's (module docs), books the batches' losses and skipped counts, then pushes their
/// records and memory events as one stream in time order (equal times: work records, then
/// releases and process exits, then allocations, then the batch whose SHA-256 sorts first),
/// then every energy sample (which may come in any order). Memory held: the batches
/// themselves.
pub fn push_batches(meter: &mut Meter, mut batches: Vec<Batch>) {
    for b in &mut batches {
        continue_recording(meter, b);
    }
    drop_repeated_work(meter, &mut batches);
    for b in &mut batches {
        for (slot, reason, n, lower) in b.losses.drain(..) {
            if lower {
                meter.record_loss_at_least(slot, reason, n);
            } else {
                meter.record_loss(slot, reason, n);
            }
        }
        let label = b.label();
        for (reason, n, lower) in b.source_losses.drain(..) {
            meter.record_source_loss(&label, reason, n, lower);
        }
        for (category, n) in std::mem::take(&mut b.skipped) {
            meter.record_skipped(&category, n);
        }
    }
    let mut order: Vec<(String, usize)> = batches
        .iter()
        .enumerate()
        .map(|(i, b)| (b.sha256.clone(), i))
        .collect();
    order.sort();
    let mut rank = vec![0usize; batches.len()];
    for (r, (_, i)) in order.into_iter().enumerate() {
        rank[i] = r;
    }
    let mut energy = Vec::new();
    let mut iters: Vec<Heads> = Vec::with_capacity(batches.len());
    for b in batches {
        for (slot, from, to) in b.energy_spans {
            meter.observe_energy_span(slot, from, to);
        }
        energy.extend(b.energy);
        iters.push((
            b.records.into_iter().peekable(),
            b.memory.into_iter().peekable(),
        ));
    }
    let mut heap = BinaryHeap::with_capacity(iters.len());
    for (i, it) in iters.iter_mut().enumerate() {
        if let Some((t, class)) = head(it) {
            heap.push(Reverse((t, class, rank[i], i)));
        }
    }
    while let Some(Reverse((_, class, _, i))) = heap.pop() {
        let Some(it) = iters.get_mut(i) else { continue };
        if class == 0 {
            if let Some(rec) = it.0.next() {
                meter.push(rec);
            }
        } else if let Some(m) = it.1.next() {
            meter.push_memory(m);
        }
        if let Some((t, class)) = head(it) {
            heap.push(Reverse((t, class, rank[i], i)));
        }
    }
    for (slot, t, e) in energy {
        meter.push_energy(slot, t, e);
    }
}
