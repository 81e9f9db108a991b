//! The correlation joins of a streamed file, bounded by its *join distance* (issue 13: memory
//! flat in the input's size; docs/decisions/cupti-streaming-a-buffer-or-recording.md).
//!
//! The whole-file path learns every API and EXTERNAL_CORRELATION record of a file before it
//! converts the first work record ([`Joins::learn`], [`gpumeter_cupti::join::convert`]): about 45 bytes
//! a launch held to the end. A streamed file instead:
//!
//! 1. **measures** in its first pass ([`JoinDistance`]) the widest span, in records, between
//!    the first and the last record naming one correlation id that has an API or
//!    EXTERNAL_CORRELATION record (the records [`correlation_named`] names), keeping an id only
//!    while it can still be named within [`JOIN_DISTANCE_CAP`] records, and the ids it let go
//!    as a set of ranges; an id named again after it was let go means the distance is past the
//!    cap, and the file's joins are then learned whole, as before;
//! 2. **reads that many records ahead** in its second pass ([`Lookahead`]): a record is
//!    converted without joins as it is read, held until every record within the distance
//!    after it has been read (all that can name its correlation id), then given the joins'
//!    process and external ids ([`join_item`], exactly what [`gpumeter_cupti::join::convert`] would
//!    give it with the whole file's joins) and handed on, in file order. A join is learned as
//!    its record is read and forgotten once no record held or still to come can name it.
//!
//! Memory: pass 1 holds at most about one entry per record of the last [`JOIN_DISTANCE_CAP`]
//! (16 bytes in a queue, or about 32 in a hash table) and at most [`MAX_RANGES`] ranges of
//! each kind; pass 2 holds the records of one distance and the joins of two. A file whose
//! every launch has its API and EXTERNAL_CORRELATION records next to its kernel has a
//! distance of a few records; a file without API and EXTERNAL_CORRELATION records, 0 (then
//! the replay needs no window).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::scanned::SourceItem;
use gpumeter_cupti::decode::{LocatedRecord, Record};
use gpumeter_cupti::join::{correlation_named, Joins, JoinsRef};

/// The widest join distance, in records, a streamed file is metered with bounded joins; a
/// file whose distance is wider has its joins learned whole (the whole-file path's tables,
/// about 45 bytes a launch). At the cap pass 1 holds about 3 MiB, and pass 2 the records of
/// one distance (a few hundred bytes each) and the joins of two.
pub(crate) const JOIN_DISTANCE_CAP: u64 = 1 << 16;

/// The most ranges [`IdRanges`] keeps: past it, the closest ranges are merged (the ids between
/// them are then taken as let go: an over-estimate, which can only send a file to the whole
/// tables, never give it a wrong join).
pub(crate) const MAX_RANGES: usize = 4096;

/// A set of correlation ids as sorted, disjoint, non-adjacent inclusive ranges, at most
/// [`MAX_RANGES`] of them. It may hold ids never inserted (once ranges were merged), never
/// lacks one that was.
#[derive(Debug, Default)]
pub(crate) struct IdRanges {
    ranges: Vec<(u32, u32)>,
}

impl IdRanges {
    /// Whether `id` is in the set (inserted, or between ranges that were merged).
    pub(crate) fn contains(&self, id: u32) -> bool {
        let i = self.ranges.partition_point(|&(lo, _)| lo <= id);
        i > 0 && self.ranges.get(i - 1).is_some_and(|&(_, hi)| id <= hi)
    }

    /// Adds `id`; merges the closest ranges when there are more than [`MAX_RANGES`].
    pub(crate) fn insert(&mut self, id: u32) {
        // Ids mostly increase: the common case extends the last range.
        if let Some(last) = self.ranges.last_mut() {
            if last.1.checked_add(1) == Some(id) {
                last.1 = id;
                return;
            }
        }
        let i = self.ranges.partition_point(|&(lo, _)| lo <= id);
        if i > 0 {
            if let Some(prev) = self.ranges.get_mut(i - 1) {
                if id <= prev.1 {
                    return;
                }
                if prev.1 + 1 == id {
                    prev.1 = id;
                    self.join_next(i - 1);
                    return;
                }
            }
        }
        if let Some(next) = self.ranges.get_mut(i) {
            if id.checked_add(1) == Some(next.0) {
                next.0 = id;
                return;
            }
        }
        self.ranges.insert(i, (id, id));
        if self.ranges.len() > MAX_RANGES {
            self.compact();
        }
    }

    /// Merges range `i` with the next one when they touch.
    fn join_next(&mut self, i: usize) {
        let (Some(&(lo, hi)), Some(&(next_lo, next_hi))) =
            (self.ranges.get(i), self.ranges.get(i + 1))
        else {
            return;
        };
        if hi.checked_add(1) == Some(next_lo) {
            self.ranges[i] = (lo, next_hi);
            self.ranges.remove(i + 1);
        }
    }

    /// Halves the number of ranges by filling the narrowest gaps between them.
    fn compact(&mut self) {
        let mut gaps: Vec<u32> = self
            .ranges
            .windows(2)
            .map(|w| w[1].0 - w[0].1 - 1)
            .collect();
        let keep = MAX_RANGES / 2;
        let k = gaps.len().saturating_sub(keep);
        if k == 0 {
            return;
        }
        let (_, &mut widest_filled, _) = gaps.select_nth_unstable(k - 1);
        let mut out: Vec<(u32, u32)> = Vec::with_capacity(MAX_RANGES + 1);
        for &(lo, hi) in &self.ranges {
            match out.last_mut() {
                Some(last) if lo - last.1 - 1 <= widest_filled => last.1 = hi,
                _ => out.push((lo, hi)),
            }
        }
        self.ranges = out;
    }

    /// How many ranges are held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }
}

/// Pass 1's measure of a file's join distance (module docs): fed every record of the file in
/// order ([`JoinDistance::record`]), it gives the distance, or `None` when it is past the cap.
///
/// Ids a join record named are kept in a hash table; ids only work records and memory events
/// named so far (all of them, in a file without API records) in a queue in the order they
/// came, which is also increasing id order while ids increase (binary-searched when a join
/// record names one), and in a small hash table for those that came below the queue's last.
#[derive(Debug)]
pub(crate) struct JoinDistance {
    cap: u64,
    /// The position of the next record.
    pos: u64,
    /// Id a join record named → the position of the first record naming it.
    learned: FxHashMap<u32, u64>,
    /// (first position, id) of `learned`, in the order they were added.
    learned_fifo: VecDeque<(u64, u32)>,
    /// (position, id) of records naming an id no join record had named, ids not decreasing.
    read: VecDeque<(u64, u32)>,
    /// Such ids that came below the last of `read`: id → its first position.
    read_odd: FxHashMap<u32, u64>,
    /// (position, id) of `read_odd`, in the order they were added.
    read_odd_fifo: VecDeque<(u64, u32)>,
    /// Ids let go that a join record had named.
    gone_learned: IdRanges,
    /// Ids let go that only work records and memory events had named.
    gone_read: IdRanges,
    distance: u64,
    past_cap: bool,
}

impl Default for JoinDistance {
    fn default() -> Self {
        JoinDistance::new(JOIN_DISTANCE_CAP)
    }
}

impl JoinDistance {
    /// A measure that gives up past `cap` records.
    pub(crate) fn new(cap: u64) -> Self {
        JoinDistance {
            cap,
            pos: 0,
            learned: FxHashMap::default(),
            learned_fifo: VecDeque::new(),
            read: VecDeque::new(),
            read_odd: FxHashMap::default(),
            read_odd_fifo: VecDeque::new(),
            gone_learned: IdRanges::default(),
            gone_read: IdRanges::default(),
            distance: 0,
            past_cap: false,
        }
    }

    /// Takes the file's next record; returns what it names ([`correlation_named`]).
    pub(crate) fn record(&mut self, record: &Record) -> Option<(u32, bool)> {
        let named = correlation_named(record);
        let p = self.pos;
        self.pos += 1;
        if !self.past_cap {
            self.let_go(p);
            if let Some((id, learner)) = named {
                self.note(p, id, learner);
            }
        }
        named
    }

    /// Lets go of the ids first named more than the cap before `p`.
    fn let_go(&mut self, p: u64) {
        let cap = self.cap;
        while let Some(&(first, id)) = self.read.front() {
            if p - first <= cap {
                break;
            }
            self.read.pop_front();
            self.gone_read.insert(id);
        }
        while let Some(&(first, id)) = self.read_odd_fifo.front() {
            if p - first <= cap {
                break;
            }
            self.read_odd_fifo.pop_front();
            self.read_odd.remove(&id);
            self.gone_read.insert(id);
        }
        // Entries are added in the order of their records, with the first position of the
        // earliest work record naming them: an entry behind an earlier-added one may wait a
        // little longer (a distance then found past the cap sends the file to the whole
        // tables all the same, `finish`).
        while let Some(&(first, id)) = self.learned_fifo.front() {
            if p - first <= cap {
                break;
            }
            self.learned_fifo.pop_front();
            if self.learned.remove(&id).is_some() {
                self.gone_learned.insert(id);
            }
        }
    }

    fn note(&mut self, p: u64, id: u32, learner: bool) {
        if let Some(&first) = self.learned.get(&id) {
            self.distance = self.distance.max(p - first);
            return;
        }
        // A join named again after it was let go: past the cap.
        if self.gone_learned.contains(id) {
            self.give_up();
            return;
        }
        if !learner {
            // No join names it yet (one may later: kept while it can be within the cap).
            match self.read.back() {
                Some(&(_, last)) if id < last => {
                    if let std::collections::hash_map::Entry::Vacant(e) = self.read_odd.entry(id) {
                        e.insert(p);
                        self.read_odd_fifo.push_back((p, id));
                    }
                }
                _ => self.read.push_back((p, id)),
            }
            return;
        }
        // A join record: past the cap if a work record named its id before the cap.
        if self.gone_read.contains(id) {
            self.give_up();
            return;
        }
        let i = self.read.partition_point(|&(_, r)| r < id);
        let in_read = self
            .read
            .get(i)
            .filter(|&&(_, r)| r == id)
            .map(|&(first, _)| first);
        let first = match (in_read, self.read_odd.get(&id).copied()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(p),
        };
        self.distance = self.distance.max(p - first);
        self.learned.insert(id, first);
        self.learned_fifo.push_back((first, id));
    }

    /// The distance is past the cap: nothing more to measure.
    fn give_up(&mut self) {
        *self = JoinDistance {
            pos: self.pos,
            past_cap: true,
            ..JoinDistance::new(self.cap)
        };
    }

    /// The file's join distance in records, or `None` when it is past the cap (learn the
    /// joins whole).
    pub(crate) fn finish(&self) -> Option<u64> {
        (!self.past_cap && self.distance <= self.cap).then_some(self.distance)
    }
}

/// Gives a work record or memory event converted without joins (an empty [`JoinsRef`], no
/// default process id) the joined process and external ids [`gpumeter_cupti::join::convert`] would
/// have given it with `joins`; whether its process id and its external id were joined (always
/// `false` for a memory event, as `convert` counts only work).
pub(crate) fn join_item(item: &mut SourceItem, joins: &JoinsRef<'_>) -> (bool, bool) {
    match item {
        SourceItem::Work(rec) => gpumeter_cupti::join::join_work(rec, joins),
        SourceItem::Memory(ev) => {
            // `convert` took the record's own process id first, unjoined here.
            if ev.process_id.is_none() {
                ev.process_id = joins
                    .pid_of
                    .get(&ev.correlation_id)
                    .copied()
                    .or(joins.default_pid);
            }
            if ev.correlation_id != 0 {
                ev.external_id = joins.ext_of.get(&ev.correlation_id).map(|&(_, e)| e);
            }
            (false, false)
        }
        SourceItem::Pm(..) => (false, false),
    }
}

/// An item held by [`Lookahead`]: its position in the file, its time, the item.
type Held = (u64, u64, SourceItem);

/// Pass 2's window over a file's records (module docs): items are held for `distance`
/// records, while the joins that can name them are learned; joins are forgotten once nothing
/// held or to come can name them.
#[derive(Debug)]
pub(crate) struct Lookahead {
    distance: u64,
    /// The position of the next record.
    pos: u64,
    /// The joins learned and not yet forgotten (only `pid_of` and `ext_of` are used).
    joins: Joins,
    /// (position of the record that first named it, id) of each join learned, in that order.
    learned: VecDeque<(u64, u32)>,
    held: VecDeque<Held>,
    default_pid: Option<u32>,
    /// [`Joins::learn`]'s names: API and EXTERNAL_CORRELATION records need none.
    no_names: FxHashMap<u64, std::sync::Arc<str>>,
}

impl Lookahead {
    /// A window of `distance` records ([`JoinDistance::finish`]); `default_pid` for records
    /// no API record names (a `.gmr` header's process id).
    pub(crate) fn new(distance: u64, default_pid: Option<u32>) -> Self {
        Lookahead {
            distance,
            pos: 0,
            joins: Joins::default(),
            learned: VecDeque::new(),
            held: VecDeque::new(),
            default_pid,
            no_names: FxHashMap::default(),
        }
    }

    /// Takes the file's next record `r` and `item`, what it converts to without joins (its
    /// time and the item), and hands on, through `emit` (time, item, process id joined,
    /// external id joined), every held item the joins are now complete for.
    pub(crate) fn push(
        &mut self,
        r: &LocatedRecord,
        item: Option<(u64, SourceItem)>,
        emit: &mut impl FnMut(u64, SourceItem, bool, bool),
    ) {
        let p = self.pos;
        self.pos += 1;
        if let Some((id, true)) = correlation_named(&r.record) {
            if !self.joins.pid_of.contains_key(&id) && !self.joins.ext_of.contains_key(&id) {
                self.learned.push_back((p, id));
            }
            // An API or EXTERNAL_CORRELATION record: it needs no names.
            self.joins.learn(std::slice::from_ref(r), &self.no_names);
        }
        if let Some((t, item)) = item {
            self.held.push_back((p, t, item));
        }
        // Every record that can name the correlation id of an item at `q <= p - distance`
        // is at or before `q + distance`: read.
        while self
            .held
            .front()
            .is_some_and(|&(q, ..)| q + self.distance <= p)
        {
            self.pop(emit);
        }
        // A join first named at `e` is named by no record after `e + distance`; the items
        // still held are after `p - distance`.
        while let Some(&(e, id)) = self.learned.front() {
            if e + 2 * self.distance > p {
                break;
            }
            self.learned.pop_front();
            self.joins.pid_of.remove(&id);
            self.joins.ext_of.remove(&id);
        }
    }

    /// Takes an item that is no record and names no join (a PM sample of a frame read after
    /// the records pushed so far), at time `t`: held behind the records read before it and
    /// handed on with them, so that items leave in file order.
    pub(crate) fn push_unjoined(&mut self, t: u64, item: SourceItem) {
        self.held.push_back((self.pos, t, item));
    }

    /// At the end of the file: hands on every item still held.
    pub(crate) fn finish(&mut self, emit: &mut impl FnMut(u64, SourceItem, bool, bool)) {
        while !self.held.is_empty() {
            self.pop(emit);
        }
    }

    fn pop(&mut self, emit: &mut impl FnMut(u64, SourceItem, bool, bool)) {
        if let Some((_, t, mut item)) = self.held.pop_front() {
            let (pid, ext) = join_item(&mut item, &self.joins.joins_ref(self.default_pid));
            emit(t, item, pid, ext);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_hold_every_id_inserted_and_stay_bounded() {
        let mut r = IdRanges::default();
        // Increasing with gaps (every third id), then a few out of order.
        let mut ids: Vec<u32> = (0..20_000).map(|i| 10 + 3 * i).collect();
        ids.extend([5, 7, 6, 11, 12, 100_000, 99_999, 100_001, u32::MAX, 0]);
        for &id in &ids {
            r.insert(id);
            assert!(r.len() <= MAX_RANGES);
        }
        for &id in &ids {
            assert!(r.contains(id), "{id}");
        }
        assert!(!r.contains(100_002));
        assert!(!r.contains(4));
        assert!(!r.contains(u32::MAX - 1));
    }

    /// One record of `kind` in the 12.8 layout with `fields` (CUPTI header name, value).
    fn raw(kind: gpumeter_cupti::ActivityKind, fields: &[(&str, u64)]) -> Vec<u8> {
        gpumeter_cupti::ApiVersion::Cupti12_8
            .layouts()
            .into_iter()
            .find(|l| l.kind == kind)
            .expect("layout")
            .encode(fields)
            .expect("fields")
    }

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// Random files of API, EXTERNAL_CORRELATION, kernel and memory records whose correlation
    /// ids repeat, wrap, are 0, are named by memory only, with joins far before and after
    /// their work: with a small cap, every file whose measured distance is within it joins,
    /// through the window, exactly as with the whole file's joins (`convert`).
    #[test]
    fn the_window_joins_as_the_whole_file_for_random_files() {
        use gpumeter_cupti::decode::Walk;
        use gpumeter_cupti::join::{convert, Converted};
        use gpumeter_cupti::ActivityKind;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut windowed, mut whole, mut zero) = (0u32, 0u32, 0u32);
        for case in 0..3_000u32 {
            let cap = 1 + rng.below(40);
            let n = 1 + rng.below(120);
            // Id pools: a few ids (reused), ids around the wrap, sequential with gaps.
            let mode = rng.below(3);
            let id = |rng: &mut Rng, i: u64| -> u32 {
                let v = match mode {
                    0 => rng.below(6) as u32,
                    1 => (u32::MAX - 3).wrapping_add((i / 2 + rng.below(3)) as u32),
                    _ => (i + rng.below(8)) as u32,
                };
                if rng.below(20) == 0 {
                    0
                } else {
                    v
                }
            };
            let mut bytes = Vec::new();
            for i in 0..n {
                let corr = u64::from(id(&mut rng, i));
                let rec = match rng.below(5) {
                    0 => raw(
                        ActivityKind::RUNTIME,
                        &[("correlationId", corr), ("processId", 5000 + rng.below(4))],
                    ),
                    1 => raw(
                        ActivityKind::EXTERNAL_CORRELATION,
                        &[
                            ("externalKind", 2 + rng.below(5)),
                            ("externalId", 900 + rng.below(4)),
                            ("correlationId", corr),
                        ],
                    ),
                    2 => raw(
                        ActivityKind::MEMORY2,
                        &[
                            ("memoryOperationType", 1 + rng.below(2)),
                            ("memoryKind", 3),
                            ("correlationId", corr),
                            ("processId", if rng.below(3) == 0 { 77 } else { 0 }),
                            ("address", 0x1000 * (1 + rng.below(4))),
                            ("bytes", 1 << 20),
                            ("timestamp", 1_000 + i),
                        ],
                    ),
                    _ => raw(
                        ActivityKind::CONCURRENT_KERNEL,
                        &[
                            ("start", 1_000 + i),
                            ("end", 2_000 + i),
                            ("gridX", 1),
                            ("gridY", 1),
                            ("gridZ", 1),
                            ("blockX", 1),
                            ("blockY", 1),
                            ("blockZ", 1),
                            ("correlationId", corr),
                        ],
                    ),
                };
                bytes.extend(rec);
            }
            let records: Vec<LocatedRecord> =
                Walk::new(&bytes, gpumeter_cupti::ApiVersion::Cupti12_8)
                    .collect::<Result<_, _>>()
                    .expect("decodes");
            let names = FxHashMap::default();
            let item = |c: Converted| match c {
                Converted::Work {
                    rec,
                    pid_joined,
                    ext_joined,
                    ..
                } => Some((rec.start_ns, SourceItem::Work(rec), pid_joined, ext_joined)),
                Converted::Memory { ev, .. } => {
                    Some((ev.timestamp_ns, SourceItem::Memory(ev), false, false))
                }
                _ => None,
            };
            let default_pid = (case % 2 == 0).then_some(4242);
            let mut all = Joins::default();
            all.learn(&records, &names);
            let want: Vec<_> = records
                .iter()
                .filter_map(|r| item(convert(r, &names, &all.joins_ref(default_pid))))
                .collect();
            let mut d = JoinDistance::new(cap);
            for r in &records {
                d.record(&r.record);
            }
            let Some(distance) = d.finish() else {
                whole += 1;
                continue;
            };
            windowed += 1;
            let none = Joins::default();
            if distance == 0 {
                // The replays then convert as read, with no process or external id learned.
                let as_read: Vec<_> = records
                    .iter()
                    .filter_map(|r| item(convert(r, &names, &none.joins_ref(default_pid))))
                    .collect();
                assert_eq!(as_read, want, "case {case}: a distance of 0");
                zero += 1;
            }
            let mut got = Vec::new();
            let mut emit = |t, item, p, e| got.push((t, item, p, e));
            let mut window = Lookahead::new(distance, default_pid);
            for r in &records {
                let it = item(convert(r, &names, &none.joins_ref(None)));
                window.push(r, it.map(|(t, i, ..)| (t, i)), &mut emit);
            }
            window.finish(&mut emit);
            assert_eq!(got, want, "case {case}: cap {cap}, distance {distance}");
        }
        // Both ways are exercised.
        assert!(
            windowed > 300 && whole > 300 && zero > 10,
            "{windowed} {whole} {zero}"
        );
    }

    #[test]
    fn ranges_merge_neighbours_exactly() {
        let mut r = IdRanges::default();
        for id in [1, 3, 5, 2, 4] {
            r.insert(id);
        }
        assert_eq!(r.len(), 1);
        assert!(r.contains(1) && r.contains(5) && !r.contains(0) && !r.contains(6));
    }
}
