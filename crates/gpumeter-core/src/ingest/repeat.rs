//! Work given twice in new bytes (module docs of [`super`]): per source and device a *part*
//! of records, memory events and energy samples, sorted by digest; candidates found by the
//! parts' smallest digests, compared within a bound; copies dropped (the kept copy takes what
//! they knew), partial overlaps warned of.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use super::{Batch, REPEAT_PROBES};
use crate::record::{ActivityRecord, DeviceSlot, Joined, LossReason, MemoryEvent, Work};
use crate::warning::{Warning, WarningCode};
use crate::Meter;

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
pub(super) fn digest<T: Hash>(v: &T) -> u64 {
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
pub(super) fn drop_repeated_work(meter: &mut Meter, batches: &mut [Batch]) {
    if batches.len() < 2 {
        return;
    }
    let (parts, total_items) = collect_parts(batches);
    let names: Vec<Option<String>> = parts
        .iter()
        .map(|p| meter.device(p.slot).and_then(|d| d.name.clone()))
        .collect();
    let survey = Survey {
        rank: rank_parts(&parts, &names, batches),
        parts,
        names,
    };
    let mut budget = total_items.saturating_mul(16).saturating_add(1_000_000);
    let found = survey.find_copies(&mut budget);
    let warnings = survey.warnings(meter, batches, &found);
    let mut taken = survey.taken_from_copies(batches, &found.dropped);
    drop(survey);
    for w in warnings {
        meter.warn(w);
    }
    taken.give(meter, batches);
    remove_copies(batches, &taken.drop_set, &taken.container_batch);
}

/// Every (batch, device) part of the batches, with its items sorted by digest and its facts
/// counted, and the number of items of all parts.
fn collect_parts(batches: &[Batch]) -> (Vec<Part>, u64) {
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
    (parts, total_items)
}

/// A fixed order of parts: the one a copy keeps first (largest, then most facts, then named,
/// then the source whose SHA-256 sorts first).
fn rank_parts(parts: &[Part], names: &[Option<String>], batches: &[Batch]) -> Vec<usize> {
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
    rank
}

/// The few smallest distinct digests of a part ([`REPEAT_PROBES`]).
fn smallest(p: &Part) -> Vec<u64> {
    let mut d: Vec<u64> = p
        .records
        .iter()
        .map(|x| x.digest)
        .chain(p.memory.iter().map(|x| x.digest))
        .collect();
    d.sort_unstable();
    d.dedup();
    d.truncate(REPEAT_PROBES);
    d
}

/// Candidates by digest: each part's probes ([`smallest`]), and for each probe the parts that
/// hold it.
fn probe_holders(parts: &[Part]) -> (Vec<Vec<u64>>, HashMap<u64, Vec<usize>>) {
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
    (probes, holders)
}

/// The parts, their device names and their order ([`rank_parts`]).
struct Survey {
    parts: Vec<Part>,
    names: Vec<Option<String>>,
    rank: Vec<usize>,
}

/// What the comparison found.
struct Found {
    /// (dropped part, part that holds it, what they share)
    dropped: Vec<(usize, usize, Shared)>,
    /// (part, part, records in common) of partial overlaps.
    overlaps: Vec<(usize, usize, usize)>,
    /// Whether the comparison's budget ran out (the parts left were kept uncompared).
    exhausted: bool,
}

impl Survey {
    /// Compares each pair of candidates once, when the one ranked later is placed: is all of
    /// its work in the one ranked earlier (which is larger, or knows more)?
    fn find_copies(&self, budget: &mut u64) -> Found {
        let parts = &self.parts;
        let mut position = vec![0usize; parts.len()];
        for (n, &i) in self.rank.iter().enumerate() {
            position[i] = n;
        }
        let (probes, holders) = probe_holders(parts);
        let mut found = Found {
            dropped: Vec::new(),
            overlaps: Vec::new(),
            exhausted: false,
        };
        let mut kept = vec![false; parts.len()];
        for &i in &self.rank {
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
                container = self.container_of(i, candidates, &kept, budget, &mut found);
            }
            match container {
                Some((q, shared)) => found.dropped.push((i, q, shared)),
                None => kept[i] = true,
            }
            if found.exhausted {
                // Every part not yet placed is kept: nothing is dropped on a guess.
                for &j in &self.rank {
                    if !kept[j] && !found.dropped.iter().any(|d| d.0 == j) {
                        kept[j] = true;
                    }
                }
                break;
            }
        }
        found
    }

    /// The first of `candidates` (ranked earlier) that stays and holds all of part `i`'s work,
    /// with what they share; partial overlaps go to `found.overlaps`, and an exhausted budget
    /// stops the comparison (`found.exhausted`).
    fn container_of(
        &self,
        i: usize,
        candidates: Vec<usize>,
        kept: &[bool],
        budget: &mut u64,
        found: &mut Found,
    ) -> Option<(usize, Shared)> {
        let (parts, names) = (&self.parts, &self.names);
        let p = &parts[i];
        let mut container = None;
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
                matches(&p.records, &qp.records, budget),
                matches(&p.memory, &qp.memory, budget),
            ) {
                (Some(records), Some(memory)) => Shared { records, memory },
                _ => {
                    found.exhausted = true;
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
                found.overlaps.push((i, q, shared.records.len()));
            }
        }
        container
    }

    /// The warnings of what was found: each copy dropped, each partial overlap of parts that
    /// both stay, and a comparison cut short.
    fn warnings(&self, meter: &Meter, batches: &[Batch], found: &Found) -> Vec<Warning> {
        let mut warnings = Vec::new();
        for (i, k, _) in &found.dropped {
            warnings.push(self.copy_warning(meter, batches, *i, *k));
        }
        for &(i, j, n) in &found.overlaps {
            if found.dropped.iter().any(|d| d.0 == i || d.0 == j) || n == 0 {
                continue;
            }
            warnings.push(self.overlap_warning(meter, batches, i, j, n));
        }
        if found.exhausted {
            warnings.push(Warning::new(
                WarningCode::RepeatCheckIncomplete,
                format!(
                "the {} devices of these {} sources are too many to compare for repeated work within \
                 the comparison's bound: some devices were not compared, so work given twice in new \
                 bytes may be billed twice",
                self.parts.len(),
                batches.len()
            ),
            ));
        }
        warnings
    }

    /// The warning of part `i` dropped as a copy of part `k`.
    fn copy_warning(&self, meter: &Meter, batches: &[Batch], i: usize, k: usize) -> Warning {
        let (p, q) = (&self.parts[i], &self.parts[k]);
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
                self.names[i].as_deref().unwrap_or("no name"),
                p.records.len(),
            )
        } else {
            format!(
                "all {} records{memory} of device {} ({}) of source {} are also in device {} of \
                 source {}, which has {} more: the same GPU's work",
                p.records.len(),
                key_of(meter, p.slot),
                self.names[i].as_deref().unwrap_or("no name"),
                batches[p.batch].name,
                key_of(meter, q.slot),
                batches[q.batch].name,
                q.items() - p.items(),
            )
        };
        Warning::new(
            WarningCode::RepeatedWork,
            format!(
                "{what} (every field the GPU gives equal), so it is metered once, from {} (device \
             {}), which also takes what the copy knew and it did not (process ids, names, the \
             device's description)",
                batches[q.batch].name,
                key_of(meter, q.slot),
            ),
        )
    }

    /// The warning of parts `i` and `j`, both metered, with `n` records in common.
    fn overlap_warning(
        &self,
        meter: &Meter,
        batches: &[Batch],
        i: usize,
        j: usize,
        n: usize,
    ) -> Warning {
        let (p, q) = (&self.parts[i], &self.parts[j]);
        let names = &self.names;
        Warning::new(
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
        )
    }

    /// What the kept copy takes from each dropped one: joined facts it lacks, per item, and
    /// the device's description; and which parts are dropped.
    fn taken_from_copies(&self, batches: &[Batch], dropped: &[(usize, usize, Shared)]) -> Taken {
        let parts = &self.parts;
        let mut taken = Taken::default();
        for (i, k, shared) in dropped {
            let (p, q) = (&parts[*i], &parts[*k]);
            for &(a, b) in &shared.records {
                taken
                    .enrich
                    .push((q.batch, b, batches[p.batch].records[a].joined()));
            }
            for &(a, b) in &shared.memory {
                taken
                    .enrich_memory
                    .push((q.batch, b, batches[p.batch].memory[a].joined()));
            }
            if p.slot != q.slot {
                taken.devices.push((q.slot, p.slot));
            }
            taken.drop_set.push((p.batch, p.slot));
        }
        // A source left with nothing but what another source holds: which one.
        taken.container_batch = dropped.iter().fold(
            HashMap::new(),
            |mut m: HashMap<usize, Vec<usize>>, (i, k, _)| {
                m.entry(parts[*i].batch).or_default().push(parts[*k].batch);
                m
            },
        );
        taken
    }
}

/// A device's key in the meter, for warnings (`slot n` when the meter does not know it).
fn key_of(meter: &Meter, slot: DeviceSlot) -> String {
    meter
        .device(slot)
        .map_or_else(|| format!("slot {}", slot.0), |d| d.key.clone())
}

/// What kept copies take from dropped ones, and what is dropped.
#[derive(Default)]
struct Taken {
    /// (batch, record index, joined facts of the copy).
    enrich: Vec<(usize, usize, Joined)>,
    /// (batch, memory event index, joined facts of the copy).
    enrich_memory: Vec<(usize, usize, Joined)>,
    /// (kept device, dropped device): the kept one takes the dropped one's description.
    devices: Vec<(DeviceSlot, DeviceSlot)>,
    /// (batch, device) of every dropped part.
    drop_set: Vec<(usize, DeviceSlot)>,
    /// Per batch with a dropped part, the batches of the parts that hold its parts.
    container_batch: HashMap<usize, Vec<usize>>,
}

impl Taken {
    /// Gives the kept copies what the dropped ones knew: device descriptions, joined facts.
    fn give(&mut self, meter: &mut Meter, batches: &mut [Batch]) {
        for (kept_slot, dropped_slot) in self.devices.drain(..) {
            if let Some(info) = meter.device(dropped_slot).cloned() {
                meter.fill_device(kept_slot, &info);
            }
        }
        for (bi, k, j) in self.enrich.drain(..) {
            if let Some(r) = batches[bi].records.get_mut(k) {
                fill_joined(r, &j);
            }
        }
        for (bi, k, j) in self.enrich_memory.drain(..) {
            if let Some(m) = batches[bi].memory.get_mut(k) {
                m.process_id = m.process_id.or(j.process_id);
                m.external_id = m.external_id.or(j.external_id);
            }
        }
    }
}

/// Removes the dropped parts (`drop_set`) from their batches; a batch left with nothing whose
/// counts are those of the one source holding its work loses those counts too.
fn remove_copies(
    batches: &mut [Batch],
    drop_set: &[(usize, DeviceSlot)],
    container_batch: &HashMap<usize, Vec<usize>>,
) {
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
