//! One way to hand several sources to a [`Meter`]: each source's records, memory events and
//! energy samples as a [`Batch`], all batches pushed merged in time order by [`push_batches`].
//!
//! Importers and decoders (Kineto, Nsight, CUPTI buffers, `.gmr`) validate their sources whole
//! and announce them (source, devices, warnings) first, then hand their batches here, so the
//! records of one GPU from several files — of one format or of several — are never `late` for
//! the order in which the files were given (DESIGN §3 "Order").
//!
//! **The same work in new bytes is metered once.** A source is identified by the SHA-256 of
//! its bytes (DESIGN §4), and a device without a UUID by its source (§3), so a trace
//! re-serialized (other whitespace, other key order) would be a new source with new devices
//! and bill everything again. Before pushing, [`push_batches`] compares the sources' work per
//! device: when a device of one source has the same name and exactly the same records, memory
//! events, energy samples and losses as a device of another source (every field of every
//! record, [`ActivityRecord::identity`]), it is the same GPU's work given twice and only the
//! source whose SHA-256 sorts first is metered, with a warning naming both files. A device that
//! shares only some records with another source's device of the same name is metered, with a
//! warning that says how many records the two have in common.

use std::cmp::Reverse;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::hash::{Hash, Hasher};
use std::iter::Peekable;
use std::vec::IntoIter;

use crate::record::{ActivityRecord, DeviceSlot, LossReason, MemoryEvent, MemoryOp};
use crate::Meter;

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
    /// Events that are not work, by category (DESIGN §3), booked by [`push_batches`]
    /// ([`Meter::record_skipped`]).
    pub skipped: BTreeMap<String, u64>,
}

impl Batch {
    /// The label that names the source where no device can: `<name>@<first 8 hex digits of
    /// the SHA-256>` (the prefix of the keys of its devices without a UUID).
    pub fn label(&self) -> String {
        format!(
            "{}@{}",
            self.name,
            self.sha256.get(..8).unwrap_or(&self.sha256)
        )
    }
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

/// Pushes the batches into `meter`: first drops the work of any device that repeats another
/// source's (module docs), books the batches' losses and skipped counts, then pushes their
/// records and memory events as one stream in time order (equal times: work records, then
/// releases and process exits, then allocations, then the batch whose SHA-256 sorts first),
/// then every energy sample (which may come in any order). Memory held: the batches
/// themselves.
pub fn push_batches(meter: &mut Meter, mut batches: Vec<Batch>) {
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

/// A part's records and memory events, each sorted by identity.
type Canonical = (Vec<ActivityRecord>, Vec<MemoryEvent>);

/// One source's work on one device, for comparing sources.
struct Part<'a> {
    batch: usize,
    slot: DeviceSlot,
    records: Vec<&'a ActivityRecord>,
    memory: Vec<&'a MemoryEvent>,
    energy: Vec<(u64, u64)>,
    losses: Vec<(LossReason, u64, bool)>,
}

impl Part<'_> {
    /// Records and memory events sorted by their identity, energy and losses sorted: equal
    /// parts are equal element by element.
    fn canonical(&self) -> Canonical {
        let mut r: Vec<ActivityRecord> = self.records.iter().map(|r| r.identity()).collect();
        r.sort_unstable();
        let mut m: Vec<MemoryEvent> = self.memory.iter().map(|m| m.identity()).collect();
        m.sort_unstable();
        (r, m)
    }

    /// The time span of the records, for a cheap overlap test.
    fn span(&self) -> Option<(u64, u64)> {
        let lo = self.records.iter().map(|r| r.start_ns).min()?;
        let hi = self
            .records
            .iter()
            .map(|r| r.end_ns.max(r.start_ns))
            .max()?;
        Some((lo, hi))
    }
}

/// A 64-bit digest of a record's identity, to find candidates; matches are confirmed by
/// comparing the records themselves.
fn digest(r: &ActivityRecord) -> u64 {
    let mut h = DefaultHasher::new();
    r.identity().hash(&mut h);
    h.finish()
}

/// Removes from `batches` the work of every device that repeats another source's device of
/// the same name exactly (module docs), keeping the source whose SHA-256 sorts first, and
/// warns; warns of devices that share some records with another source's device of the same
/// name.
fn drop_repeated_work(meter: &mut Meter, batches: &mut [Batch]) {
    if batches.len() < 2 {
        return;
    }
    let mut parts: Vec<Part<'_>> = Vec::new();
    {
        let mut index: HashMap<(usize, DeviceSlot), usize> = HashMap::new();
        let mut part = |batch: usize, slot: DeviceSlot, parts: &mut Vec<Part<'_>>| -> usize {
            *index.entry((batch, slot)).or_insert_with(|| {
                parts.push(Part {
                    batch,
                    slot,
                    records: Vec::new(),
                    memory: Vec::new(),
                    energy: Vec::new(),
                    losses: Vec::new(),
                });
                parts.len() - 1
            })
        };
        for (i, b) in batches.iter().enumerate() {
            for r in &b.records {
                let p = part(i, r.device, &mut parts);
                parts[p].records.push(r);
            }
            for m in &b.memory {
                let p = part(i, m.device, &mut parts);
                parts[p].memory.push(m);
            }
            for &(slot, t, e) in &b.energy {
                let p = part(i, slot, &mut parts);
                parts[p].energy.push((t, e));
            }
            for &(slot, reason, n, lower) in &b.losses {
                let p = part(i, slot, &mut parts);
                parts[p].losses.push((reason, n, lower));
            }
        }
    }
    for p in &mut parts {
        p.energy.sort_unstable();
        p.losses.sort_unstable();
    }
    let name_of = |meter: &Meter, slot: DeviceSlot| meter.device(slot).and_then(|d| d.name.clone());
    let key_of = |meter: &Meter, slot: DeviceSlot| {
        meter
            .device(slot)
            .map_or_else(|| format!("slot {}", slot.0), |d| d.key.clone())
    };

    // Exact repeats: candidates share the name, every count and the time span.
    type Shape = (
        Option<String>,
        usize,
        usize,
        Vec<(u64, u64)>,
        Vec<(LossReason, u64, bool)>,
        Option<(u64, u64)>,
    );
    let mut groups: BTreeMap<Shape, Vec<usize>> = BTreeMap::new();
    for (i, p) in parts.iter().enumerate() {
        let shape = (
            name_of(meter, p.slot),
            p.records.len(),
            p.memory.len(),
            p.energy.clone(),
            p.losses.clone(),
            p.span(),
        );
        groups.entry(shape).or_default().push(i);
    }
    // (batch, slot) whose work is dropped, with the part it repeats.
    let mut dropped: Vec<(usize, usize)> = Vec::new();
    for members in groups.values().filter(|m| m.len() > 1) {
        // The source whose SHA-256 sorts first is kept; every member equal to a kept one is
        // dropped.
        let mut ordered = members.clone();
        ordered.sort_by(|&a, &b| {
            let (pa, pb) = (&parts[a], &parts[b]);
            (&batches[pa.batch].sha256, pa.batch, pa.slot).cmp(&(
                &batches[pb.batch].sha256,
                pb.batch,
                pb.slot,
            ))
        });
        let mut kept: Vec<(usize, Canonical)> = Vec::new();
        for i in ordered {
            let c = parts[i].canonical();
            match kept
                .iter()
                .find(|(k, kc)| parts[*k].batch != parts[i].batch && *kc == c)
            {
                Some((k, _)) => dropped.push((i, *k)),
                None => kept.push((i, c)),
            }
        }
    }
    let drop_set: Vec<(usize, DeviceSlot)> = dropped
        .iter()
        .map(|&(i, _)| (parts[i].batch, parts[i].slot))
        .collect();
    let mut warnings = Vec::new();
    for &(i, k) in &dropped {
        let (p, q) = (&parts[i], &parts[k]);
        warnings.push(format!(
            "source {} repeats the GPU work of source {} on device {} ({}): the same {} records{} \
             (every field equal), so it is metered once, from {} (device {})",
            batches[p.batch].name,
            batches[q.batch].name,
            key_of(meter, p.slot),
            name_of(meter, p.slot).as_deref().unwrap_or("no name"),
            p.records.len(),
            if p.memory.is_empty() {
                String::new()
            } else {
                format!(" and {} memory events", p.memory.len())
            },
            batches[q.batch].name,
            key_of(meter, q.slot),
        ));
    }

    // Partial overlap: devices of the same name in different sources that share records.
    for (i, p) in parts.iter().enumerate() {
        if drop_set.contains(&(p.batch, p.slot)) || p.records.is_empty() {
            continue;
        }
        let Some((lo, hi)) = p.span() else { continue };
        let name = name_of(meter, p.slot);
        let mut index: Option<HashMap<u64, Vec<&ActivityRecord>>> = None;
        for q in parts.iter().skip(i + 1) {
            if q.batch == p.batch
                || q.slot == p.slot
                || q.records.is_empty()
                || drop_set.contains(&(q.batch, q.slot))
                || name_of(meter, q.slot) != name
            {
                continue;
            }
            let Some((qlo, qhi)) = q.span() else { continue };
            if qhi < lo || hi < qlo {
                continue;
            }
            let idx = index.get_or_insert_with(|| {
                let mut m: HashMap<u64, Vec<&ActivityRecord>> = HashMap::new();
                for r in &p.records {
                    m.entry(digest(r)).or_default().push(r);
                }
                m
            });
            let shared = q
                .records
                .iter()
                .filter(|r| {
                    idx.get(&digest(r))
                        .is_some_and(|c| c.iter().any(|x| x.identity() == r.identity()))
                })
                .count();
            if shared > 0 {
                warnings.push(format!(
                    "device {} of source {} and device {} of source {} ({}) have {shared} records \
                     in common (every field equal) but are different devices (no UUID joins \
                     them): if both files recorded the same GPU, those records are billed twice",
                    key_of(meter, p.slot),
                    batches[p.batch].name,
                    key_of(meter, q.slot),
                    batches[q.batch].name,
                    name.as_deref().unwrap_or("no name"),
                ));
            }
        }
    }
    drop(parts);
    for w in warnings {
        meter.warn(w);
    }
    if drop_set.is_empty() {
        return;
    }
    for (i, b) in batches.iter_mut().enumerate() {
        let gone = |slot: DeviceSlot| drop_set.contains(&(i, slot));
        if !drop_set.iter().any(|&(bi, _)| bi == i) {
            continue;
        }
        b.records.retain(|r| !gone(r.device));
        b.memory.retain(|m| !gone(m.device));
        b.energy.retain(|e| !gone(e.0));
        b.energy_spans.retain(|e| !gone(e.0));
        b.losses.retain(|l| !gone(l.0));
        // A source whose every device repeats another's is that source again: its counts of
        // events that are not work, and its losses on no device, are not counted twice.
        if b.records.is_empty() && b.memory.is_empty() && b.energy.is_empty() && b.losses.is_empty()
        {
            b.skipped.clear();
            b.source_losses.clear();
        }
    }
}
