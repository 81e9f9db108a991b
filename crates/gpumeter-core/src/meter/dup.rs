//! Duplicate detection (DESIGN §4): the same record, equal in every field its source gives.

use super::*;

use crate::record::{ActivityRecord, Joined, MemoryEvent};

/// A duplicate key (DESIGN §4: the same record, equal in every field its source gives:
/// [`ActivityRecord::identity`]), after the start or timestamp that the sweep prunes by. The
/// records seen under one key keep their joined facts, and a new record is a duplicate when
/// its facts agree with one of them ([`Joined::agrees`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Dup {
    Work(ActivityRecord),
    Memory(MemoryEvent),
}

/// (start or timestamp, the record): the record's every field (DESIGN §4), ordered by time
/// so that the sweep can forget what it has passed.
pub(super) type DupKey = (u64, Dup);

impl DeviceState {
    /// Notes a record under its duplicate key; `false` when it is a duplicate: a record with
    /// the same identity whose joined facts agree was seen.
    pub(super) fn first_of(&mut self, key: DupKey, joined: Joined) -> bool {
        let seen = self.dups.entry(key).or_default();
        if seen.iter().any(|j| j.agrees(&joined)) {
            return false;
        }
        seen.push(joined);
        true
    }
}
