//! Duplicate detection (DESIGN §4): the same record, equal in every field its source gives.

use super::*;

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

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
pub(super) struct Seen {
    first: Joined,
    more: Vec<Joined>,
}

/// The duplicate keys of the records the sweep has not passed: a hash map (no allocation per
/// record once it has grown) and a min-heap of the same keys by time, to forget them as the
/// sweep passes.
#[derive(Debug, Clone, Default)]
pub(super) struct Dups {
    seen: FxHashMap<DupKey, Seen>,
    by_time: BinaryHeap<Reverse<DupKey>>,
}

impl Dups {
    /// Keys held.
    pub(super) fn len(&self) -> usize {
        self.seen.len()
    }
}

impl DeviceState {
    /// Notes a record under its duplicate key; `false` when it is a duplicate: a record with
    /// the same identity whose joined facts agree was seen.
    pub(super) fn first_of(&mut self, key: DupKey, joined: Joined) -> bool {
        match self.dups.seen.entry(key) {
            Entry::Occupied(mut e) => {
                let seen = e.get_mut();
                if seen.first.agrees(&joined) || seen.more.iter().any(|j| j.agrees(&joined)) {
                    return false;
                }
                seen.more.push(joined);
                true
            }
            Entry::Vacant(e) => {
                self.dups.by_time.push(Reverse(e.key().clone()));
                e.insert(Seen {
                    first: joined,
                    more: Vec::new(),
                });
                true
            }
        }
    }

    /// Forgets the duplicate keys before `cut` (records the sweep has passed).
    pub(super) fn prune_dups(&mut self, cut: u64) {
        while let Some(Reverse(first)) = self.dups.by_time.peek() {
            if first.0 >= cut {
                break;
            }
            if let Some(Reverse(k)) = self.dups.by_time.pop() {
                self.dups.seen.remove(&k);
            }
        }
    }

    /// Forgets every duplicate key.
    pub(super) fn clear_dups(&mut self) {
        self.dups = Dups::default();
    }
}
