//! Duplicate detection (DESIGN §4): the same record, equal in every field its source gives.

use super::*;

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::BinaryHeap;

use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHasher};

use crate::record::{ActivityRecord, Joined, MemoryEvent};

/// A duplicate key (DESIGN §4: the same record, equal in every field its source gives:
/// [`ActivityRecord::identity`]), after the start or timestamp that the sweep prunes by. The
/// records seen under one key keep their joined facts, and a new record is a duplicate when
/// its facts agree with one of them ([`Joined::agrees`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Dup {
    Work(ActivityRecord),
    Memory(MemoryEvent),
}

/// (start or timestamp, the record): the record's every field (DESIGN §4), ordered by time
/// so that the sweep can forget what it has passed.
pub(super) type DupKey = (u64, Dup);

/// The records seen under one duplicate key: the first one's joined facts inline, the rare
/// others (the same record of another process, say) in a list that allocates only then.
#[derive(Debug, Clone)]
struct Seen {
    key: DupKey,
    first: Joined,
    more: Vec<Joined>,
}

/// The keys of one 64-bit hash: the first inline, collisions (rare) in a list.
#[derive(Debug, Clone)]
struct Bucket {
    first: Seen,
    more: Vec<Seen>,
}

/// The duplicate keys of the records the sweep has not passed, by the FxHash of the key (no
/// allocation per record once the map has grown), and a min-heap of (time, hash), 16 bytes a
/// record, to forget them as the sweep passes.
#[derive(Debug, Clone, Default)]
pub(super) struct Dups {
    seen: FxHashMap<u64, Bucket>,
    by_time: BinaryHeap<Reverse<(u64, u64)>>,
    len: usize,
}

impl Dups {
    /// Keys held.
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

fn hash_of(key: &DupKey) -> u64 {
    let mut h = FxHasher::default();
    key.hash(&mut h);
    h.finish()
}

impl DeviceState {
    /// Notes a record under its duplicate key; `false` when it is a duplicate (a record with
    /// the same identity whose joined facts agree was seen), booked as `duplicate` loss.
    pub(super) fn first_of(&mut self, key: DupKey, joined: Joined) -> bool {
        let first = self.note_first(key, joined);
        if !first {
            self.loss
                .entry(LossReason::Duplicate)
                .or_default()
                .add(1, false);
        }
        first
    }

    /// [`DeviceState::first_of`] without booking the loss.
    fn note_first(&mut self, key: DupKey, joined: Joined) -> bool {
        let h = hash_of(&key);
        let dups = &mut self.dups;
        match dups.seen.entry(h) {
            Entry::Occupied(mut e) => {
                let bucket = e.get_mut();
                let found = if bucket.first.key == key {
                    Some(&mut bucket.first)
                } else {
                    bucket.more.iter_mut().find(|s| s.key == key)
                };
                match found {
                    Some(seen) => {
                        if seen.first.agrees(&joined) || seen.more.iter().any(|j| j.agrees(&joined))
                        {
                            return false;
                        }
                        seen.more.push(joined);
                    }
                    None => {
                        dups.by_time.push(Reverse((key.0, h)));
                        dups.len += 1;
                        bucket.more.push(Seen {
                            key,
                            first: joined,
                            more: Vec::new(),
                        });
                    }
                }
                true
            }
            Entry::Vacant(e) => {
                dups.by_time.push(Reverse((key.0, h)));
                dups.len += 1;
                e.insert(Bucket {
                    first: Seen {
                        key,
                        first: joined,
                        more: Vec::new(),
                    },
                    more: Vec::new(),
                });
                true
            }
        }
    }

    /// Forgets the duplicate keys before `cut` (records the sweep has passed).
    pub(super) fn prune_dups(&mut self, cut: u64) {
        let dups = &mut self.dups;
        while let Some(&Reverse((start, h))) = dups.by_time.peek() {
            if start >= cut {
                break;
            }
            dups.by_time.pop();
            if let Entry::Occupied(mut e) = dups.seen.entry(h) {
                let bucket = e.get_mut();
                let before = bucket.more.len();
                bucket.more.retain(|s| s.key.0 >= cut);
                dups.len -= before - bucket.more.len();
                if bucket.first.key.0 < cut {
                    dups.len -= 1;
                    match bucket.more.pop() {
                        Some(s) => bucket.first = s,
                        None => {
                            e.remove();
                        }
                    }
                }
            }
        }
    }

    /// Forgets every duplicate key.
    pub(super) fn clear_dups(&mut self) {
        self.dups = Dups::default();
    }
}
