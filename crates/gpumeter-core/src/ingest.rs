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

/// One source's work on one device, for comparing sources: each record and memory event with
/// a 64-bit digest of its identity, sorted by digest.
struct Part<'a> {
    batch: usize,
    slot: DeviceSlot,
    records: Vec<(u64, &'a ActivityRecord)>,
    memory: Vec<(u64, &'a MemoryEvent)>,
    energy: Vec<(u64, u64)>,
    /// Time span of its records and memory events.
    span: Option<(u64, u64)>,
}

impl Part<'_> {
    fn items(&self) -> usize {
        self.records.len() + self.memory.len()
    }
}

/// A 64-bit digest of a value's identity, to find candidates cheaply; every match is confirmed
/// by comparing the values themselves, so a collision costs time, never a wrong answer.
fn digest<T: Hash>(v: &T) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

/// How many items of `a` have an equal item in `b` (a multiset intersection), both sorted by
/// digest; `same` confirms a digest match. `budget` is charged one unit per item visited.
fn shared<T>(
    a: &[(u64, T)],
    b: &[(u64, T)],
    same: impl Fn(&T, &T) -> bool,
    budget: &mut u64,
) -> usize {
    let (mut i, mut j, mut n) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        *budget = budget.saturating_sub(1);
        match a[i].0.cmp(&b[j].0) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                // Runs of one digest: match each item of `a` with an unused equal one of `b`.
                let d = a[i].0;
                let ea = a[i..].iter().take_while(|x| x.0 == d).count();
                let eb = b[j..].iter().take_while(|x| x.0 == d).count();
                let mut used = vec![false; eb];
                for x in &a[i..i + ea] {
                    *budget = budget.saturating_sub(eb as u64);
                    if let Some(k) = (0..eb).find(|&k| !used[k] && same(&x.1, &b[j + k].1)) {
                        used[k] = true;
                        n += 1;
                    }
                }
                i += ea;
                j += eb;
            }
        }
    }
    n
}

/// Removes from `batches` the work of every device whose records (and memory events and energy
/// samples) are all also another source's, on a device of the same name where both names are
/// known: the same GPU's work given twice, in new bytes or as part of a larger recording
/// (module docs). Of two that hold each other (an exact repeat) the source whose SHA-256 sorts
/// first is kept. Records are compared by [`ActivityRecord::identity`] with agreeing joined
/// facts. Devices that share only some records are metered and warned of. The comparison is
/// bounded (about 16 item visits per item, plus a million): past that, the devices left are
/// not compared and the report says so.
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
                    span: None,
                });
                parts.len() - 1
            })
        };
        for (i, b) in batches.iter().enumerate() {
            for r in &b.records {
                let p = part(i, r.device, &mut parts);
                parts[p].records.push((digest(&r.identity()), r));
            }
            for m in &b.memory {
                let p = part(i, m.device, &mut parts);
                parts[p].memory.push((digest(&m.identity()), m));
            }
            for &(slot, t, e) in &b.energy {
                let p = part(i, slot, &mut parts);
                parts[p].energy.push((t, e));
            }
        }
    }
    let mut total_items = 0u64;
    for p in &mut parts {
        p.records.sort_unstable_by_key(|x| x.0);
        p.memory.sort_unstable_by_key(|x| x.0);
        p.energy.sort_unstable();
        let times = p
            .records
            .iter()
            .flat_map(|(_, r)| [r.start_ns, r.end_ns.max(r.start_ns)])
            .chain(p.memory.iter().map(|(_, m)| m.timestamp_ns));
        p.span = times.fold(None, |s, t| match s {
            None => Some((t, t)),
            Some((a, b)) => Some((a.min(t), b.max(t))),
        });
        total_items += p.items() as u64;
    }
    let names: Vec<Option<String>> = parts
        .iter()
        .map(|p| meter.device(p.slot).and_then(|d| d.name.clone()))
        .collect();
    let key_of = |meter: &Meter, slot: DeviceSlot| {
        meter
            .device(slot)
            .map_or_else(|| format!("slot {}", slot.0), |d| d.key.clone())
    };
    let same_record = |a: &&ActivityRecord, b: &&ActivityRecord| {
        a.identity() == b.identity() && a.joined().agrees(&b.joined())
    };
    let same_memory = |a: &&MemoryEvent, b: &&MemoryEvent| {
        a.identity() == b.identity() && a.joined().agrees(&b.joined())
    };

    // Candidate pairs: other sources, names that agree, spans that overlap.
    let mut budget = total_items.saturating_mul(16).saturating_add(1_000_000);
    let mut exhausted = false;
    // (contained part, container part, shared records)
    let mut within: Vec<(usize, usize)> = Vec::new();
    let mut overlaps: Vec<(usize, usize, usize)> = Vec::new();
    let mut order: Vec<usize> = (0..parts.len())
        .filter(|&i| parts[i].span.is_some())
        .collect();
    order.sort_by_key(|&i| parts[i].span);
    'outer: for (n, &i) in order.iter().enumerate() {
        let Some((_, hi)) = parts[i].span else {
            continue;
        };
        for &j in &order[n + 1..] {
            let (p, q) = (&parts[i], &parts[j]);
            let Some((qlo, _)) = q.span else { continue };
            if qlo > hi {
                break;
            }
            if budget == 0 {
                exhausted = true;
                break 'outer;
            }
            budget -= 1;
            let names_agree = match (&names[i], &names[j]) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
            if p.batch == q.batch || !names_agree {
                continue;
            }
            let r = shared(&p.records, &q.records, same_record, &mut budget);
            let m = shared(&p.memory, &q.memory, same_memory, &mut budget);
            let energy_in = |a: &Part<'_>, b: &Part<'_>| {
                a.energy.iter().all(|e| b.energy.binary_search(e).is_ok())
            };
            if r + m == p.items() && energy_in(p, q) {
                within.push((i, j));
            }
            if r + m == q.items() && energy_in(q, p) {
                within.push((j, i));
            }
            if r > 0 && r + m < p.items() && r + m < q.items() && p.slot != q.slot {
                overlaps.push((i, j, r));
            }
        }
    }

    // Keep the largest parts first (then one with a device name, then SHA-256 order); a part
    // is dropped when a kept part holds all of its work.
    let mut rank: Vec<usize> = (0..parts.len()).collect();
    rank.sort_by(|&a, &b| {
        let (pa, pb) = (&parts[a], &parts[b]);
        pb.items()
            .cmp(&pa.items())
            // Of equals, the one whose device has a name (a name prices it).
            .then_with(|| names[b].is_some().cmp(&names[a].is_some()))
            .then_with(|| batches[pa.batch].sha256.cmp(&batches[pb.batch].sha256))
            .then_with(|| (pa.batch, pa.slot).cmp(&(pb.batch, pb.slot)))
    });
    let mut kept = vec![false; parts.len()];
    let mut dropped: Vec<(usize, usize)> = Vec::new();
    for &i in &rank {
        match within
            .iter()
            .find(|&&(a, b)| a == i && kept[b])
            .map(|&(_, b)| b)
        {
            Some(container) => dropped.push((i, container)),
            None => kept[i] = true,
        }
    }

    let mut warnings = Vec::new();
    for &(i, k) in &dropped {
        let (p, q) = (&parts[i], &parts[k]);
        let what = if p.items() == q.items() {
            format!(
                "source {} repeats the GPU work of source {} on device {} ({}): the same {} \
                 records{}",
                batches[p.batch].name,
                batches[q.batch].name,
                key_of(meter, p.slot),
                names[i].as_deref().unwrap_or("no name"),
                p.records.len(),
                if p.memory.is_empty() {
                    String::new()
                } else {
                    format!(" and {} memory events", p.memory.len())
                },
            )
        } else {
            format!(
                "all {} records{} of device {} ({}) of source {} are also in device {} of source \
                 {}, which has {} more: the same GPU's work",
                p.records.len(),
                if p.memory.is_empty() {
                    String::new()
                } else {
                    format!(" and {} memory events", p.memory.len())
                },
                key_of(meter, p.slot),
                names[i].as_deref().unwrap_or("no name"),
                batches[p.batch].name,
                key_of(meter, q.slot),
                batches[q.batch].name,
                q.items() - p.items(),
            )
        };
        warnings.push(format!(
            "{what} (every field of every record equal), so it is metered once, from {} (device {})",
            batches[q.batch].name,
            key_of(meter, q.slot),
        ));
    }
    for &(i, j, n) in &overlaps {
        if dropped.iter().any(|&(d, _)| d == i || d == j) {
            continue;
        }
        let (p, q) = (&parts[i], &parts[j]);
        warnings.push(format!(
            "device {} of source {} and device {} of source {} ({}) have {n} records in common \
             (every field equal) but are different devices (no UUID joins them): if both files \
             recorded the same GPU, those records are billed twice",
            key_of(meter, p.slot),
            batches[p.batch].name,
            key_of(meter, q.slot),
            batches[q.batch].name,
            names[i]
                .as_deref()
                .or(names[j].as_deref())
                .unwrap_or("no name"),
        ));
    }
    if exhausted {
        warnings.push(format!(
            "the {} devices of these {} sources are too many to compare for repeated work within \
             the comparison's bound: some devices were not compared, so work given twice in new \
             bytes may be billed twice",
            parts.len(),
            batches.len()
        ));
    }
    let drop_set: Vec<(usize, DeviceSlot)> = dropped
        .iter()
        .map(|&(i, _)| (parts[i].batch, parts[i].slot))
        .collect();
    drop(parts);
    for w in warnings {
        meter.warn(w);
    }
    if drop_set.is_empty() {
        return;
    }
    for (i, b) in batches.iter_mut().enumerate() {
        if !drop_set.iter().any(|&(bi, _)| bi == i) {
            continue;
        }
        let gone = |slot: DeviceSlot| drop_set.contains(&(i, slot));
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
