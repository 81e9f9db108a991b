//! Handing a streamed file's items on in the whole-file path's order: the bounded reorder
//! buffer, the settling of the meter's devices as items arrive in time order, and the items
//! the meter refuses (as the whole-file path refuses them).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use gpumeter_core::time::MAX_RECORD_NS;
use gpumeter_core::{ActivityRecord, DeviceSlot, Meter, PmSample};
use gpumeter_cupti::join::Converted;
use rustc_hash::FxHashMap;

use crate::scanned::SourceItem;

/// How many items a device takes between two [`Meter::settle`] calls of a time-ordered replay.
const SETTLE_EVERY: u32 = 4096;

/// Settles the meter's devices as a replay hands them items in time order
/// ([`Meter::settle`]): every [`SETTLE_EVERY`] items of a device, before pushing one at time
/// `t`, nothing earlier than `t` can follow on that device, so its sweep moves to `t` and the
/// meter holds only the work running there (issue 13: memory flat in the input's size). What
/// is pushed to those devices while it runs must come in time order: one file's replay, or the
/// time-ordered merge of several ([`crate::meter_files`]).
#[derive(Debug, Default)]
pub(crate) struct Settle {
    /// Items per device slot since its last settle.
    counts: Vec<u32>,
}

impl Settle {
    /// Called before pushing an item of time `t_ns` (start or timestamp) on `slot`.
    pub(crate) fn before(&mut self, meter: &mut Meter, slot: DeviceSlot, t_ns: u64) {
        let i = slot.0 as usize;
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        if let Some(n) = self.counts.get_mut(i) {
            *n += 1;
            if *n >= SETTLE_EVERY {
                *n = 0;
                meter.settle(slot, t_ns);
            }
        }
    }
}

/// A work record the meter refuses whatever its place in time (zero timestamp, end before
/// start, longer than [`MAX_RECORD_NS`]): the meter books it as loss without touching its
/// sweep, so the passes neither count its times in the file's disorder nor hold it in the
/// reorder buffer (one such record at the end of a file would otherwise make the buffer hold
/// the whole file).
pub(crate) fn refused_work(rec: &ActivityRecord) -> bool {
    rec.start_ns == 0
        || rec.end_ns == 0
        || rec.end_ns < rec.start_ns
        || rec.end_ns - rec.start_ns > MAX_RECORD_NS
}

/// Whether the meter refuses a PM sample whatever its time (a zero time, an end before its
/// start, over 7 days: loss by its fields), as [`refused_work`] for a record: handed on at
/// once by a replay, never held for order, and no measure of a file's disorder.
pub(crate) fn refused_pm(x: &PmSample) -> bool {
    x.start_ns == 0
        || x.end_ns == 0
        || x.end_ns < x.start_ns
        || x.end_ns - x.start_ns > MAX_RECORD_NS
}

/// Whether the meter refuses `item` whatever its time ([`refused_work`], [`refused_pm`]).
pub(crate) fn refused_item(item: &SourceItem) -> bool {
    match item {
        SourceItem::Work(r) => refused_work(r),
        SourceItem::Memory(_) => false,
        SourceItem::Pm(_, x) => refused_pm(x),
    }
}

/// What a second pass hands on for one converted record: its time (a work record's start, a
/// memory event's timestamp), the item on its source slot (by `index`, device id → slot), and
/// whether its process id and its external id were joined. `None` for a record of a device
/// `index` does not hold, or one that is neither work nor memory.
pub(crate) fn replay_item(
    converted: Converted,
    index: &FxHashMap<u32, DeviceSlot>,
) -> Option<(u64, SourceItem, bool, bool)> {
    match converted {
        Converted::Work {
            device_id,
            mut rec,
            pid_joined,
            ext_joined,
        } => {
            rec.device = *index.get(&device_id)?;
            Some((rec.start_ns, SourceItem::Work(rec), pid_joined, ext_joined))
        }
        Converted::Memory { device_id, mut ev } => {
            ev.device = *index.get(&device_id)?;
            Some((ev.timestamp_ns, SourceItem::Memory(ev), false, false))
        }
        _ => None,
    }
}

/// A bounded reorder buffer that hands items on in the whole-file path's order: by time, work
/// before memory at equal times, equal keys in arrival order. It holds an item until no later
/// arrival can precede it: every later arrival's time is at least the latest time seen less the
/// displacement measured by the scan.
pub(crate) struct Reorder {
    heap: BinaryHeap<Reverse<(u64, u8, u64, u32)>>,
    slab: Vec<Option<SourceItem>>,
    free: Vec<u32>,
    seq: u64,
    latest: u64,
    displacement: u64,
}

impl Reorder {
    pub(crate) fn new(displacement: u64) -> Self {
        Reorder {
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            seq: 0,
            latest: 0,
            displacement,
        }
    }

    /// Takes `item` at time `t` and hands on every item no later one can precede. A work
    /// record the meter refuses whatever its time ([`refused_work`]) is handed on at once.
    pub(crate) fn push(&mut self, t: u64, item: SourceItem, sink: &mut impl FnMut(SourceItem)) {
        if refused_item(&item) {
            sink(item);
            return;
        }
        // At equal times: work, then memory, then PM samples (`merge`'s merge key).
        let class = match item {
            SourceItem::Work(_) => 0,
            SourceItem::Memory(_) => 1,
            SourceItem::Pm(..) => 2,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                if let Some(slot) = self.slab.get_mut(i as usize) {
                    *slot = Some(item);
                }
                i
            }
            None => {
                self.slab.push(Some(item));
                (self.slab.len() - 1) as u32
            }
        };
        self.heap.push(Reverse((t, class, self.seq, idx)));
        self.seq += 1;
        self.latest = self.latest.max(t);
        let bound = self.latest.saturating_sub(self.displacement);
        while let Some(&Reverse((t0, ..))) = self.heap.peek() {
            if t0 >= bound {
                break;
            }
            self.pop(sink);
        }
    }

    fn pop(&mut self, sink: &mut impl FnMut(SourceItem)) -> bool {
        let Some(Reverse((_, _, _, idx))) = self.heap.pop() else {
            return false;
        };
        if let Some(item) = self.slab.get_mut(idx as usize).and_then(Option::take) {
            self.free.push(idx);
            sink(item);
        }
        true
    }

    pub(crate) fn drain(&mut self, sink: &mut impl FnMut(SourceItem)) {
        while self.pop(sink) {}
    }
}
