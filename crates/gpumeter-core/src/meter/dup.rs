//! Duplicate detection: the same record, equal in every field its source gives.

use super::*;

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::hash::{Hash, Hasher};

use rustc_hash::{FxHashMap, FxHasher};

use crate::record::{ActivityRecord, Joined, MemoryEvent};

use super::lanes::{Facts, Lanes, Noted, WorkIdentity};

use super::queue::MostlySorted;

/// A duplicate key (the same record, equal in every field its source gives:
/// [`ActivityRecord::identity`], [`MemoryEvent::identity`]), after the start or timestamp that
/// the sweep prunes by. The records seen under one key keep their joined facts, and a new
/// record is a duplicate when its facts agree with one of them ([`Joined::agrees`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Dup {
    Work(WorkIdentity),
    Memory(MemoryEvent),
}

/// (start or timestamp, the record): the record's every field, ordered by time
/// so that the sweep can forget what it has passed.
pub(super) type DupKey = (u64, Dup);

/// The records seen under one duplicate key.
#[derive(Debug, Clone)]
struct Seen {
    key: DupKey,
    facts: Facts,
}

/// The keys of one 64-bit hash: the first inline, collisions (rare) in a list.
#[derive(Debug, Clone)]
struct Bucket {
    first: Seen,
    more: Vec<Seen>,
}

/// The duplicate keys of a device's records that the sweep has not passed: work records in
/// their lanes ([`Lanes`]: no lookup for a record after its lane's latest start), and in a
/// hash table the memory events and the work records that came out of order in their lane
/// ([`Lanes::note`]).
#[derive(Debug, Clone, Default)]
pub(super) struct Dups {
    lanes: Lanes,
    table: Table,
}

/// Duplicate keys by the FxHash of the key (no allocation per record once the maps have
/// grown), in two generations, and the times of the keys, 8 bytes a record, to count the keys
/// the sweep has not passed.
///
/// Keys are never removed one by one (a hash lookup per record, a cache miss once the table
/// holds a reordering horizon of records): a key the sweep has passed can never equal the key
/// of a record the meter still takes (keys begin with the record's start, and a record
/// starting before the sweep is `late` before it is looked up), so it may stay until its
/// whole generation is dropped. New keys go to `young`; once the sweep has passed every key of
/// `old` (its latest start, `old_max`), and `young` holds enough keys to make the swap worth
/// its cost, `old` is emptied (its memory kept) and the generations swap. The table so holds
/// the keys of at most about two horizons, and [`Dups::len`] still counts exactly the keys at
/// or after the sweep.
#[derive(Debug, Clone, Default)]
struct Table {
    young: FxHashMap<u64, Bucket>,
    old: FxHashMap<u64, Bucket>,
    /// Latest start or timestamp of a key in `young` / `old`.
    young_max: u64,
    old_max: u64,
    /// The start or timestamp of every key not yet passed by the sweep.
    by_time: MostlySorted<Reverse<u64>>,
}

/// The duplicate table of a device, which a copy of the meter for a report
/// ([`Meter::snapshot`], the handed-over part of [`Meter::drain`]) leaves empty: a report
/// takes no more records, so the table (up to two horizons of keys) would be copied for
/// nothing. `Clone` gives an empty table; [`DupTable::full_copy`] copies it, for a meter that
/// goes on taking records (the state [`Meter::drain`] restores on an error).
#[derive(Debug, Default)]
pub(super) struct DupTable(pub(super) Dups);

impl Clone for DupTable {
    fn clone(&self) -> Self {
        DupTable::default()
    }
}

impl DupTable {
    /// A copy with every key.
    pub(super) fn full_copy(&self) -> Self {
        DupTable(self.0.clone())
    }
}

/// Keys `young` holds before the generations may swap: the cost of emptying `old` (its
/// buckets) is spread over at least this many records.
const SWAP_AT: usize = 4096;

impl Dups {
    /// Keys held: those at or after the sweep, once [`Dups::prune`] ran with the sweep's
    /// position.
    pub(super) fn len(&self) -> usize {
        self.lanes.len() + self.table.by_time.len()
    }

    /// Notes a work record starting at `start` (at or after the last [`Dups::prune`] cut):
    /// `false` when it is a duplicate (a record with the same identity whose joined facts
    /// agree was seen).
    pub(super) fn note_work(&mut self, start: u64, id: WorkIdentity, joined: Joined) -> bool {
        match self.lanes.note(start, &id, joined) {
            Noted::New => true,
            Noted::Seen(first) => first,
            Noted::Elsewhere(joined) => self.table.note((start, Dup::Work(id)), joined),
        }
    }

    /// Notes a memory event (or any key) in the table: `false` when it is a duplicate.
    pub(super) fn note(&mut self, key: DupKey, joined: Joined) -> bool {
        self.table.note(key, joined)
    }

    /// Forgets the duplicate keys before `cut` (records the sweep has passed).
    pub(super) fn prune(&mut self, cut: u64) {
        self.lanes.prune(cut);
        self.table.prune(cut);
    }

    /// Lanes holding keys.
    #[cfg(test)]
    pub(super) fn lanes(&self) -> usize {
        self.lanes.lanes()
    }
}

fn hash_of(key: &DupKey) -> u64 {
    let mut h = FxHasher::default();
    key.hash(&mut h);
    h.finish()
}

impl Table {
    /// Notes a record under its key: `false` when a record with the key whose joined facts
    /// agree was seen.
    fn note(&mut self, key: DupKey, joined: Joined) -> bool {
        let h = hash_of(&key);
        // Only a generation that holds keys at or after this one's time can hold it.
        let in_old = key.0 <= self.old_max && self.old.contains_key(&h);
        let map = if in_old {
            &mut self.old
        } else {
            self.young_max = self.young_max.max(key.0);
            &mut self.young
        };
        match map.entry(h) {
            Entry::Occupied(mut e) => {
                let bucket = e.get_mut();
                let found = if bucket.first.key == key {
                    Some(&mut bucket.first)
                } else {
                    bucket.more.iter_mut().find(|s| s.key == key)
                };
                match found {
                    Some(seen) => return seen.facts.note(joined),
                    None => {
                        self.by_time.push(Reverse(key.0));
                        bucket.more.push(Seen {
                            key,
                            facts: Facts::new(joined),
                        });
                    }
                }
                true
            }
            Entry::Vacant(e) => {
                self.by_time.push(Reverse(key.0));
                e.insert(Bucket {
                    first: Seen {
                        key,
                        facts: Facts::new(joined),
                    },
                    more: Vec::new(),
                });
                true
            }
        }
    }

    /// Counts out the keys before `cut`, and drops the old generation once every key of it is
    /// before `cut`.
    fn prune(&mut self, cut: u64) {
        while let Some(&Reverse(start)) = self.by_time.peek() {
            if start >= cut {
                break;
            }
            self.by_time.pop();
        }
        if self.old_max < cut && self.young.len() >= SWAP_AT {
            self.old.clear();
            std::mem::swap(&mut self.old, &mut self.young);
            self.old_max = self.young_max;
            self.young_max = 0;
        }
    }
}

impl DeviceState {
    /// Notes a work record; `false` when it is a duplicate ([`Dups::note_work`]), booked as
    /// `duplicate` loss.
    pub(super) fn first_work(&mut self, rec: &ActivityRecord) -> bool {
        let first = self
            .dups
            .0
            .note_work(rec.start_ns, WorkIdentity::of(rec), rec.joined());
        self.book_duplicate(first)
    }

    /// Notes a memory event under its duplicate key; `false` when it is a duplicate, booked as
    /// `duplicate` loss.
    pub(super) fn first_of(&mut self, key: DupKey, joined: Joined) -> bool {
        let first = self.dups.0.note(key, joined);
        self.book_duplicate(first)
    }

    fn book_duplicate(&mut self, first: bool) -> bool {
        if !first {
            self.loss
                .entry(LossReason::Duplicate)
                .or_default()
                .add(1, false);
        }
        first
    }

    /// Forgets the duplicate keys before `cut` (records the sweep has passed).
    pub(super) fn prune_dups(&mut self, cut: u64) {
        self.dups.0.prune(cut);
    }

    /// Forgets every duplicate key.
    pub(super) fn clear_dups(&mut self) {
        self.dups = DupTable::default();
    }
}
