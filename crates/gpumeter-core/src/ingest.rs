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

use std::cmp::Reverse;
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::hash::{Hash, Hasher};
use std::iter::Peekable;
use std::vec::IntoIter;

use crate::record::{ActivityRecord, DeviceSlot, Joined, LossReason, MemoryEvent, MemoryOp, Work};
use crate::warning::{Warning, WarningCode};
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

/// An item of a part: a record's or memory event's digest and identity, its joined facts, and
/// its index in its batch.
struct Item<T> {
    digest: u64,
    identity: T,
    joined: Joined,
    index: usize,
}

/// One source's work on one device, for comparing sources: its records and memory events
/// sorted by digest.
struct Part {
    batch: usize,
    slot: DeviceSlot,
    records: Vec<Item<ActivityRecord>>,
    memory: Vec<Item<MemoryEvent>>,
    energy: Vec<(u64, u64)>,
    /// How many joined facts (process ids, external ids, names, instruction counts) its items
    /// know: of two copies of the same work, the one that knows more is kept.
    facts: usize,
}

impl Part {
    fn items(&self) -> usize {
        self.records.len() + self.memory.len()
    }
}

/// A 64-bit digest of a value's identity, to find candidates cheaply; every match is confirmed
/// by comparing the identities themselves, so a collision costs time, never a wrong answer.
fn digest<T: Hash>(v: &T) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

fn facts(j: &Joined) -> usize {
    usize::from(j.process_id.is_some())
        + usize::from(j.external_id.is_some())
        + usize::from(j.name.is_some())
        + usize::from(j.warp_instructions.is_some())
        + j.ops.as_array().iter().filter(|c| c.is_some()).count()
}

/// Matches the items of `a` with equal items of `b` (the same identity, joined facts that
/// agree), both sorted by digest, each item of `b` used once: the pairs `(index in a, index in
/// b)`. Within a run of one digest, `b`'s items are grouped by (identity, facts), so many equal
/// items cost one comparison per group. `None` when `budget` (charged per item and per group
/// compared) runs out: the parts are then not known to share anything.
fn matches<T: PartialEq + Clone>(
    a: &[Item<T>],
    b: &[Item<T>],
    budget: &mut u64,
) -> Option<Vec<(usize, usize)>> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        *budget = budget.checked_sub(1)?;
        match a[i].digest.cmp(&b[j].digest) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                let d = a[i].digest;
                let ea = a[i..].iter().take_while(|x| x.digest == d).count();
                let eb = b[j..].iter().take_while(|x| x.digest == d).count();
                // Groups of b's run: (representative, unused members).
                let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
                for k in j..j + eb {
                    *budget = budget.checked_sub(1)?;
                    match groups.iter_mut().find(|(r, _)| {
                        b[*r].identity == b[k].identity && b[*r].joined == b[k].joined
                    }) {
                        Some((_, members)) => members.push(k),
                        None => groups.push((k, vec![k])),
                    }
                }
                for x in &a[i..i + ea] {
                    *budget = budget.checked_sub(groups.len() as u64 + 1)?;
                    let g = groups.iter_mut().find(|(r, members)| {
                        !members.is_empty()
                            && b[*r].identity == x.identity
                            && b[*r].joined.agrees(&x.joined)
                    });
                    if let Some((_, members)) = g {
                        if let Some(k) = members.pop() {
                            out.push((x.index, b[k].index));
                        }
                    }
                }
                i += ea;
                j += eb;
            }
        }
    }
    Some(out)
}

/// How two parts share their work.
struct Shared {
    /// Matched records: (index in the first part's batch, index in the second's).
    records: Vec<(usize, usize)>,
    /// Matched memory events, the same way.
    memory: Vec<(usize, usize)>,
}

/// Removes from `batches` the work of every device whose records (and memory events and energy
/// samples) are all also another source's, on a device whose name agrees where both are known:
/// the same GPU's work given again, in new bytes, without CPU events or a device table, as the
/// raw buffer of a recording, or with a record less (module docs). Of copies, the largest is
/// kept, then the one whose items know more joined facts (process ids give tenants), then the
/// one with a device name (a name prices it), then the source whose SHA-256 sorts first; what
/// a dropped copy knew that the kept one does not (a process id, a name, the device's
/// description) is given to the kept one. Devices that share only some records are metered
/// and warned of.
///
/// Candidates are found by digest, not by comparing every pair: a part is contained in
/// another only if that one holds its smallest digest, and shares records with another only if
/// that one holds one of its few smallest digests. The comparisons are bounded (about 16 item
/// visits per item, plus a million); past that, the parts left are not compared, the report
/// says so, and the outcome depends on the inputs only (parts are taken in a fixed order).
fn drop_repeated_work(meter: &mut Meter, batches: &mut [Batch]) {
    if batches.len() < 2 {
        return;
    }
    let mut parts: Vec<Part> = Vec::new();
    {
        let mut index: HashMap<(usize, DeviceSlot), usize> = HashMap::new();
        let mut part = |batch: usize, slot: DeviceSlot, parts: &mut Vec<Part>| -> usize {
            *index.entry((batch, slot)).or_insert_with(|| {
                parts.push(Part {
                    batch,
                    slot,
                    records: Vec::new(),
                    memory: Vec::new(),
                    energy: Vec::new(),
                    facts: 0,
                });
                parts.len() - 1
            })
        };
        for (i, b) in batches.iter().enumerate() {
            for (k, r) in b.records.iter().enumerate() {
                let p = part(i, r.device, &mut parts);
                let identity = r.identity();
                parts[p].records.push(Item {
                    digest: digest(&identity),
                    identity,
                    joined: r.joined(),
                    index: k,
                });
            }
            for (k, m) in b.memory.iter().enumerate() {
                let p = part(i, m.device, &mut parts);
                let identity = m.identity();
                parts[p].memory.push(Item {
                    digest: digest(&identity),
                    identity,
                    joined: m.joined(),
                    index: k,
                });
            }
            for &(slot, t, e) in &b.energy {
                let p = part(i, slot, &mut parts);
                parts[p].energy.push((t, e));
            }
        }
    }
    let mut total_items = 0u64;
    for p in &mut parts {
        p.records.sort_unstable_by_key(|x| x.digest);
        p.memory.sort_unstable_by_key(|x| x.digest);
        p.energy.sort_unstable();
        p.facts = p.records.iter().map(|x| facts(&x.joined)).sum::<usize>()
            + p.memory.iter().map(|x| facts(&x.joined)).sum::<usize>();
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

    // A fixed order of parts: the one a copy keeps first.
    let mut rank: Vec<usize> = (0..parts.len()).collect();
    rank.sort_by(|&a, &b| {
        let (pa, pb) = (&parts[a], &parts[b]);
        pb.items()
            .cmp(&pa.items())
            .then_with(|| pb.facts.cmp(&pa.facts))
            .then_with(|| names[b].is_some().cmp(&names[a].is_some()))
            .then_with(|| batches[pa.batch].sha256.cmp(&batches[pb.batch].sha256))
            .then_with(|| (pa.batch, pa.slot).cmp(&(pb.batch, pb.slot)))
    });
    let mut position = vec![0usize; parts.len()];
    for (n, &i) in rank.iter().enumerate() {
        position[i] = n;
    }

    // Candidates by digest: which parts hold each of the few smallest digests of each part.
    const PROBES: usize = REPEAT_PROBES;
    let smallest = |p: &Part| -> Vec<u64> {
        let mut d: Vec<u64> = p
            .records
            .iter()
            .map(|x| x.digest)
            .chain(p.memory.iter().map(|x| x.digest))
            .collect();
        d.sort_unstable();
        d.dedup();
        d.truncate(PROBES);
        d
    };
    let probes: Vec<Vec<u64>> = parts.iter().map(smallest).collect();
    let mut holders: HashMap<u64, Vec<usize>> = HashMap::new();
    for d in probes.iter().flatten() {
        holders.entry(*d).or_default();
    }
    for (q, p) in parts.iter().enumerate() {
        for d in p
            .records
            .iter()
            .map(|x| x.digest)
            .chain(p.memory.iter().map(|x| x.digest))
        {
            if let Some(h) = holders.get_mut(&d) {
                if h.last() != Some(&q) {
                    h.push(q);
                }
            }
        }
    }

    let mut budget = total_items.saturating_mul(16).saturating_add(1_000_000);
    let mut exhausted = false;
    let mut kept = vec![false; parts.len()];
    // (dropped part, part that holds it, what they share)
    let mut dropped: Vec<(usize, usize, Shared)> = Vec::new();
    // (part, part, records in common) of partial overlaps.
    let mut overlaps: Vec<(usize, usize, usize)> = Vec::new();
    // Each pair is compared once, when the one ranked later is placed: is all of its work in
    // the one ranked earlier (which is larger, or knows more)?
    for &i in &rank {
        let p = &parts[i];
        let mut container = None;
        if p.items() > 0 {
            let mut candidates: Vec<usize> = probes[i]
                .iter()
                .flat_map(|d| holders.get(d).into_iter().flatten().copied())
                .filter(|&q| position[q] < position[i] && parts[q].batch != p.batch)
                .collect();
            candidates.sort_by_key(|&q| position[q]);
            candidates.dedup();
            for q in candidates {
                let qp = &parts[q];
                let names_agree = match (&names[i], &names[q]) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                if !names_agree {
                    continue;
                }
                let shared = match (
                    matches(&p.records, &qp.records, &mut budget),
                    matches(&p.memory, &qp.memory, &mut budget),
                ) {
                    (Some(records), Some(memory)) => Shared { records, memory },
                    _ => {
                        exhausted = true;
                        break;
                    }
                };
                let n = shared.records.len() + shared.memory.len();
                let energy_in = p.energy.iter().all(|e| qp.energy.binary_search(e).is_ok());
                let holds_all = n == p.items() && energy_in;
                // Only a part that stays can hold another (one dropped is held by one that
                // stays, which then holds this one too and is a candidate as well).
                if holds_all && kept[q] {
                    if container.is_none() {
                        container = Some((q, shared));
                    }
                } else if n > 0 && n < p.items() && p.slot != qp.slot {
                    overlaps.push((i, q, shared.records.len()));
                }
            }
        }
        match container {
            Some((q, shared)) => dropped.push((i, q, shared)),
            None => kept[i] = true,
        }
        if exhausted {
            // Every part not yet placed is kept: nothing is dropped on a guess.
            for &j in &rank {
                if !kept[j] && !dropped.iter().any(|d| d.0 == j) {
                    kept[j] = true;
                }
            }
            break;
        }
    }

    let mut warnings = Vec::new();
    for (i, k, _) in &dropped {
        let (p, q) = (&parts[*i], &parts[*k]);
        let memory = if p.memory.is_empty() {
            String::new()
        } else {
            format!(" and {} memory events", p.memory.len())
        };
        let what = if p.items() == q.items() {
            format!(
                "source {} repeats the GPU work of source {} on device {} ({}): the same {} \
                 records{memory}",
                batches[p.batch].name,
                batches[q.batch].name,
                key_of(meter, p.slot),
                names[*i].as_deref().unwrap_or("no name"),
                p.records.len(),
            )
        } else {
            format!(
                "all {} records{memory} of device {} ({}) of source {} are also in device {} of \
                 source {}, which has {} more: the same GPU's work",
                p.records.len(),
                key_of(meter, p.slot),
                names[*i].as_deref().unwrap_or("no name"),
                batches[p.batch].name,
                key_of(meter, q.slot),
                batches[q.batch].name,
                q.items() - p.items(),
            )
        };
        warnings.push(Warning::new(
            WarningCode::RepeatedWork,
            format!(
                "{what} (every field the GPU gives equal), so it is metered once, from {} (device \
             {}), which also takes what the copy knew and it did not (process ids, names, the \
             device's description)",
                batches[q.batch].name,
                key_of(meter, q.slot),
            ),
        ));
    }
    for &(i, j, n) in &overlaps {
        if dropped.iter().any(|d| d.0 == i || d.0 == j) || n == 0 {
            continue;
        }
        let (p, q) = (&parts[i], &parts[j]);
        warnings.push(Warning::new(
            WarningCode::SharedRecords,
            format!(
            "device {} of source {} and device {} of source {} ({}) have {n} records in common \
             (every field the GPU gives equal) but are different devices (no UUID joins them): \
             if both files recorded the same GPU, those records are billed twice",
            key_of(meter, p.slot),
            batches[p.batch].name,
            key_of(meter, q.slot),
            batches[q.batch].name,
            names[i]
                .as_deref()
                .or(names[j].as_deref())
                .unwrap_or("no name"),
        ),
        ));
    }
    if exhausted {
        warnings.push(Warning::new(
            WarningCode::RepeatCheckIncomplete,
            format!(
            "the {} devices of these {} sources are too many to compare for repeated work within \
             the comparison's bound: some devices were not compared, so work given twice in new \
             bytes may be billed twice",
            parts.len(),
            batches.len()
        ),
        ));
    }

    // What the kept copy takes from each dropped one: joined facts it lacks, per item, and
    // the device's description.
    let mut enrich: Vec<(usize, usize, Joined)> = Vec::new();
    let mut enrich_memory: Vec<(usize, usize, Joined)> = Vec::new();
    let mut devices: Vec<(DeviceSlot, DeviceSlot)> = Vec::new();
    let mut drop_set: Vec<(usize, DeviceSlot)> = Vec::new();
    for (i, k, shared) in &dropped {
        let (p, q) = (&parts[*i], &parts[*k]);
        for &(a, b) in &shared.records {
            enrich.push((q.batch, b, batches[p.batch].records[a].joined()));
        }
        for &(a, b) in &shared.memory {
            enrich_memory.push((q.batch, b, batches[p.batch].memory[a].joined()));
        }
        if p.slot != q.slot {
            devices.push((q.slot, p.slot));
        }
        drop_set.push((p.batch, p.slot));
    }
    // A source left with nothing but what another source holds: which one.
    let container_batch: HashMap<usize, Vec<usize>> = dropped.iter().fold(
        HashMap::new(),
        |mut m: HashMap<usize, Vec<usize>>, (i, k, _)| {
            m.entry(parts[*i].batch).or_default().push(parts[*k].batch);
            m
        },
    );
    drop(parts);
    for w in warnings {
        meter.warn(w);
    }
    for (kept_slot, dropped_slot) in devices {
        if let Some(info) = meter.device(dropped_slot).cloned() {
            meter.fill_device(kept_slot, &info);
        }
    }
    for (bi, k, j) in enrich {
        if let Some(r) = batches[bi].records.get_mut(k) {
            fill_joined(r, &j);
        }
    }
    for (bi, k, j) in enrich_memory {
        if let Some(m) = batches[bi].memory.get_mut(k) {
            m.process_id = m.process_id.or(j.process_id);
            m.external_id = m.external_id.or(j.external_id);
        }
    }
    if drop_set.is_empty() {
        return;
    }
    let snapshot: Vec<Counts> = batches
        .iter()
        .map(|b| (b.skipped.clone(), b.source_losses.clone()))
        .collect();
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
        // A source left with nothing, whose counts of events that are not work and losses on no
        // device are those of the one source that holds its work, is that source again: they
        // are not counted twice. Counts of its own are kept.
        let emptied = b.records.is_empty()
            && b.memory.is_empty()
            && b.energy.is_empty()
            && b.losses.is_empty();
        let same_counts = container_batch.get(&i).is_some_and(|c| {
            c.iter().all(|&k| k == c[0])
                && snapshot[c[0]].0 == b.skipped
                && snapshot[c[0]].1 == b.source_losses
        });
        if emptied && same_counts {
            b.skipped.clear();
            b.source_losses.clear();
        }
    }
}

/// A batch's counts that are not per device: skipped events by category, losses on no device.
type Counts = (BTreeMap<String, u64>, Vec<(LossReason, u64, bool)>);

/// Gives `r` the joined facts of `j` that it does not know.
fn fill_joined(r: &mut ActivityRecord, j: &Joined) {
    r.process_id = r.process_id.or(j.process_id);
    r.external_id = r.external_id.or(j.external_id);
    if let Work::Kernel(k) = &mut r.work {
        if k.name.is_none() {
            k.name.clone_from(&j.name);
        }
        k.warp_instructions = k.warp_instructions.or(j.warp_instructions);
        let ops = k.op_counts().or(j.ops);
        k.set_op_counts(ops);
    }
}
