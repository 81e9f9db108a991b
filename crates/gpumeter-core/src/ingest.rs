//! One way to hand several sources to a [`Meter`]: each source's records, memory events and
//! energy samples as a [`Batch`], all batches pushed merged in time order by [`push_batches`].
//!
//! Importers and decoders (Kineto, Nsight, CUPTI buffers, `.gmr`) validate their sources whole
//! and announce them (source, devices, warnings, losses) first, then hand their batches here,
//! so the records of one GPU from several files — of one format or of several — are never
//! `late` for the order in which the files were given (DESIGN §3 "Order").

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::iter::Peekable;
use std::vec::IntoIter;

use crate::record::{ActivityRecord, DeviceSlot, MemoryEvent, MemoryOp};
use crate::Meter;

/// What one announced source still has to push, on the meter's device slots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// The source's SHA-256 (lowercase hex): breaks time ties between sources, so that the
    /// order of the inputs never matters.
    pub sha256: String,
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
}

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

/// Pushes the batches' records and memory events into `meter` as one stream in time order
/// (equal times: work records, then releases and process exits, then allocations, then the
/// batch whose SHA-256 sorts first), then every energy sample (which may come in any order).
/// Memory held: the batches themselves.
pub fn push_batches(meter: &mut Meter, batches: Vec<Batch>) {
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
