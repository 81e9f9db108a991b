//! The duplicate keys of work records by lane, (context id, stream id): CUPTI completes the
//! records of one stream in order, so a lane's records nearly always arrive with a start after
//! the lane's latest, and such a record cannot equal any record seen (a duplicate has the same
//! start, [`ActivityRecord::identity`]): it is appended to the lane with no lookup and no
//! hashing. Only a record at or before its lane's latest start is compared, exactly.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::ops::OpCounts;
use crate::record::{ActivityRecord, Joined, Work};

/// A work record's identity ([`ActivityRecord::identity`]: every field the GPU record gives
/// but its start, which the duplicate key holds beside it), packed and `Copy`: two records
/// have equal `WorkIdentity` exactly when their `identity()` without the start are equal.
/// Names and the other joined facts ([`ActivityRecord::joined`]) are never part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct WorkIdentity {
    /// CUDA context id: the lane's first half.
    pub(super) context_id: u32,
    /// CUDA stream id: the lane's second half.
    pub(super) stream_id: u32,
    /// The rest, which a lane's entries hold.
    pub(super) shape: Shape,
}

/// A work record's identity less its start and lane: end, correlation id, graph node id and the
/// work (kind, launch configuration, bytes, direction). An unknown launch field is 0 with its
/// bit clear in `known`, so that `None` and `Some(0)` differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Shape {
    end_ns: u64,
    graph_node_id: u64,
    /// A copy's or set's bytes, or a kernel's shared memory per block (bytes).
    bytes: u64,
    grid: [u32; 3],
    block: [u32; 3],
    registers_per_thread: u32,
    correlation_id: u32,
    /// 0 kernel, 1 memcpy, 2 memset, 3 graph launch.
    kind: u8,
    /// Which kernel fields are known: grid 1, block 2, registers 4, shared memory 8.
    known: u8,
    /// A copy's [`CopyDirection`](crate::record::CopyDirection) as its declaration index.
    direction: u8,
}

impl WorkIdentity {
    /// The identity of `rec` (its start aside).
    pub(super) fn of(rec: &ActivityRecord) -> Self {
        let mut s = Shape {
            end_ns: rec.end_ns,
            graph_node_id: rec.graph_node_id,
            bytes: 0,
            grid: [0; 3],
            block: [0; 3],
            registers_per_thread: 0,
            correlation_id: rec.correlation_id,
            kind: 0,
            known: 0,
            direction: 0,
        };
        match &rec.work {
            Work::Kernel(k) => {
                if let Some(g) = k.grid {
                    s.grid = g;
                    s.known |= 1;
                }
                if let Some(b) = k.block {
                    s.block = b;
                    s.known |= 2;
                }
                if let Some(r) = k.registers_per_thread {
                    s.registers_per_thread = r;
                    s.known |= 4;
                }
                if let Some(m) = k.shared_mem_bytes {
                    s.bytes = m;
                    s.known |= 8;
                }
            }
            Work::Memcpy { bytes, direction } => {
                s.kind = 1;
                s.bytes = *bytes;
                s.direction = *direction as u8;
            }
            Work::Memset { bytes } => {
                s.kind = 2;
                s.bytes = *bytes;
            }
            Work::GraphLaunch => s.kind = 3,
        }
        WorkIdentity {
            context_id: rec.context_id,
            stream_id: rec.stream_id,
            shape: s,
        }
    }

    /// The lane: (context id, stream id) in one word.
    pub(super) fn lane(&self) -> u64 {
        (u64::from(self.context_id) << 32) | u64::from(self.stream_id)
    }
}

/// The joined facts of the records seen under one duplicate key: the first inline, the rare
/// others (the same record of another process, say) in a list that allocates only then.
#[derive(Debug, Clone)]
pub(super) struct Facts {
    first: Joined,
    more: Vec<Joined>,
}

impl Facts {
    /// The facts of one record.
    pub(super) fn new(joined: Joined) -> Self {
        Facts {
            first: joined,
            more: Vec::new(),
        }
    }

    /// Notes another record of the same key: `false` when its facts agree with a record's
    /// seen ([`Joined::agrees`]: a duplicate), else `true` and they are kept.
    pub(super) fn note(&mut self, joined: Joined) -> bool {
        if self.first.agrees(&joined) || self.more.iter().any(|j| j.agrees(&joined)) {
            return false;
        }
        self.more.push(joined);
        true
    }
}

/// One key of a lane: its start, identity and the facts seen (152 bytes: a lane holds up to a
/// reordering horizon of records, and every byte is written once and read once per record).
#[derive(Debug, Clone)]
struct Entry {
    start: u64,
    shape: Shape,
    /// The first record's joined facts.
    first: Packed,
    /// The others' (the same record of another process, say): allocated only then. Boxed, so
    /// that the field takes 8 bytes, not a `Vec`'s 24, in every entry.
    #[allow(clippy::box_collection)]
    more: Option<Box<Vec<Joined>>>,
}

impl Entry {
    /// [`Facts::note`] for the entry's facts.
    fn note(&mut self, joined: Joined) -> bool {
        let agrees = |more: &Option<Box<Vec<Joined>>>| {
            more.as_ref()
                .is_some_and(|m| m.iter().any(|j| j.agrees(&joined)))
        };
        if self.first.unpack().agrees(&joined) || agrees(&self.more) {
            return false;
        }
        self.more.get_or_insert_default().push(joined);
        true
    }
}

/// [`Joined`] packed (72 bytes where it takes 120): each optional number a word, with a bit in
/// `known` when given. Unpacked to be compared, which only a record at or before its lane's
/// latest start is.
#[derive(Debug, Clone)]
struct Packed {
    name: Option<Arc<str>>,
    external_id: u64,
    warp_instructions: u64,
    ops: [u64; 4],
    process_id: u32,
    /// Given: process id 1, external id 2, warp instructions 4, operation counts 8 << i.
    known: u8,
}

impl Packed {
    fn pack(j: Joined) -> Self {
        let mut p = Packed {
            name: j.name,
            external_id: j.external_id.unwrap_or(0),
            warp_instructions: j.warp_instructions.unwrap_or(0),
            ops: [0; 4],
            process_id: j.process_id.unwrap_or(0),
            known: u8::from(j.process_id.is_some())
                | u8::from(j.external_id.is_some()) << 1
                | u8::from(j.warp_instructions.is_some()) << 2,
        };
        for (i, n) in j.ops.as_array().into_iter().enumerate() {
            if let Some(n) = n {
                p.ops[i] = n;
                p.known |= 8 << i;
            }
        }
        p
    }

    fn unpack(&self) -> Joined {
        let given = |bit: u8, v: u64| (self.known & bit != 0).then_some(v);
        Joined {
            process_id: (self.known & 1 != 0).then_some(self.process_id),
            external_id: given(2, self.external_id),
            name: self.name.clone(),
            warp_instructions: given(4, self.warp_instructions),
            ops: OpCounts {
                flops_fp64: given(8, self.ops[0]),
                flops_fp32: given(16, self.ops[1]),
                flops_fp16: given(32, self.ops[2]),
                tensor_ops: given(64, self.ops[3]),
            },
        }
    }
}

/// One lane's keys, sorted by start (appended only at the back, pruned at the front).
#[derive(Debug, Clone, Default)]
struct Lane {
    /// (context id, stream id); stale in a free slot.
    key: u64,
    entries: VecDeque<Entry>,
    /// Entries at the back with the back's start.
    run: u32,
}

/// Keys with one start a lane holds at most ([`Lanes::note`]): more go to the caller's table,
/// so that comparing a record with its lane's equal starts costs at most this many
/// comparisons whatever the input.
pub(super) const MAX_RUN: u32 = 16;

/// What [`Lanes::note`] found.
pub(super) enum Noted {
    /// A new key, appended to its lane.
    New,
    /// The key was in the lane; `true` when the record is a new one (its facts disagree with
    /// every record's seen under it), `false` for a duplicate.
    Seen(bool),
    /// Not in the lane and not appended (before the lane's latest start, or at it with a full
    /// run of that start): the caller compares it with its table, and keeps it there. The
    /// record's joined facts, handed back.
    Elsewhere(Joined),
}

/// The lanes of one device: a slab of lanes (slots of dropped lanes reused, with their
/// memory), the slot of each lane, the last lane used (consecutive records mostly share one),
/// and a min-heap of each lane's first start, so that pruning touches only the lanes the sweep
/// has passed (one heap entry per lane, not per record: any number of lanes stays linear).
#[derive(Debug, Clone, Default)]
pub(super) struct Lanes {
    slots: Vec<Lane>,
    free: Vec<u32>,
    index: FxHashMap<u64, u32>,
    /// (lane, slot) of the last lane used.
    last: Option<(u64, u32)>,
    /// (first start, slot) of every lane that holds keys.
    fronts: BinaryHeap<Reverse<(u64, u32)>>,
    /// Keys held.
    len: usize,
}

impl Lanes {
    /// Keys held (those the sweep has not passed, once [`Lanes::prune`] ran).
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The slot of `lane`, made (empty) when new.
    fn slot(&mut self, lane: u64) -> u32 {
        if let Some((l, s)) = self.last {
            if l == lane {
                return s;
            }
        }
        let s = match self.index.get(&lane) {
            Some(&s) => s,
            None => {
                let s = match self.free.pop() {
                    Some(s) => s,
                    None => {
                        self.slots.push(Lane::default());
                        (self.slots.len() - 1) as u32
                    }
                };
                self.slots[s as usize].key = lane;
                self.index.insert(lane, s);
                s
            }
        };
        self.last = Some((lane, s));
        s
    }

    /// Notes a work record: appended when it starts after its lane's latest start (no
    /// comparison), else compared with the lane's keys of its start ([`Noted`]).
    ///
    /// The caller's table holds the keys answered [`Noted::Elsewhere`]: each before its lane's
    /// latest start, or at it when the lane held [`MAX_RUN`] keys of that start (and so holds
    /// that many as long as it is the latest). A key is so in one place: a record after its
    /// lane's latest start, or at it with a run not full, can be in no table. (A lane is
    /// dropped only once the sweep passed its latest start, and so every key of it in the
    /// table; a record the meter takes starts at or after the sweep.)
    pub(super) fn note(&mut self, start: u64, id: &WorkIdentity, joined: Joined) -> Noted {
        let s = self.slot(id.lane());
        let lane = &mut self.slots[s as usize];
        let Some(latest) = lane.entries.back().map(|e| e.start) else {
            self.fronts.push(Reverse((start, s)));
            self.push_back(s, start, id.shape, joined);
            return Noted::New;
        };
        if start > latest {
            self.push_back(s, start, id.shape, joined);
            return Noted::New;
        }
        let found = if start == latest {
            lane.entries
                .iter_mut()
                .rev()
                .take_while(|e| e.start == start)
                .find(|e| e.shape == id.shape)
        } else {
            let i = lane.entries.partition_point(|e| e.start < start);
            lane.entries
                .range_mut(i..)
                .take_while(|e| e.start == start)
                .find(|e| e.shape == id.shape)
        };
        match found {
            Some(e) => Noted::Seen(e.note(joined)),
            None if start == latest && lane.run < MAX_RUN => {
                self.push_back(s, start, id.shape, joined);
                Noted::New
            }
            None => Noted::Elsewhere(joined),
        }
    }

    fn push_back(&mut self, s: u32, start: u64, shape: Shape, joined: Joined) {
        let lane = &mut self.slots[s as usize];
        match lane.entries.back() {
            Some(e) if e.start == start => lane.run += 1,
            _ => lane.run = 1,
        }
        lane.entries.push_back(Entry {
            start,
            shape,
            first: Packed::pack(joined),
            more: None,
        });
        self.len += 1;
    }

    /// Forgets the keys before `cut`, and the lanes left empty.
    pub(super) fn prune(&mut self, cut: u64) {
        while let Some(&Reverse((first, s))) = self.fronts.peek() {
            if first >= cut {
                break;
            }
            self.fronts.pop();
            let lane = &mut self.slots[s as usize];
            while lane.entries.front().is_some_and(|e| e.start < cut) {
                lane.entries.pop_front();
                self.len -= 1;
            }
            match lane.entries.front() {
                Some(e) => self.fronts.push(Reverse((e.start, s))),
                None => {
                    self.index.remove(&lane.key);
                    self.free.push(s);
                    if self.last.is_some_and(|(_, l)| l == s) {
                        self.last = None;
                    }
                }
            }
        }
    }

    /// Lanes holding keys.
    #[cfg(test)]
    pub(super) fn lanes(&self) -> usize {
        self.index.len()
    }
}

/// [`Joined`] through a lane entry's packing and back.
#[cfg(test)]
pub(super) fn repacked(j: Joined) -> Joined {
    Packed::pack(j).unpack()
}

/// Bytes of a lane entry.
#[cfg(test)]
pub(super) const ENTRY_BYTES: usize = std::mem::size_of::<Entry>();
