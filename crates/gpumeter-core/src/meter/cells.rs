//! Per (device, window) cells: their accumulators, the report's cell budget and the faults of bookkeeping.
//!
//! Every quantity a cell accumulates is one *slot* of its device ([`Slots`]): an interned
//! (attribution key, meter) for the meters booked per key (counts, bytes, `kernel_ns`,
//! `memory_byte_ns`, uncapped SM·ns and warp·ns), a running-set id for `gpu_busy_ns`, or a
//! (key, cap factor id) for capped SM·ns and warp·ns. A cell holds only the slots it was booked
//! in, in first-touch order, as flat arrays (slot ids and values); each slot remembers the
//! cell-local index it had where it was last booked, so booking the same slot in the same
//! window again (the steady state) is two array reads, no hash. Memory: per device, one entry
//! per slot ever booked (and 4 bytes per attribution key of the meter); per cell, one entry
//! per slot booked in it: never cells × keys (docs/decisions/metering-at-memory-speed.md,
//! "Cells as flat arrays").

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use rustc_hash::FxHashMap;

use crate::report::{MeterKind, METERS};
use crate::time::WindowSize;

/// A device's first fault in bookkeeping, turned into a [`MeterError`] by [`Meter::finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DeviceFault {
    Overflow {
        meter: MeterKind,
        window: u64,
    },
    TooManyCells {
        what: &'static str,
        from: u64,
        to: u64,
        windows: u64,
    },
}

/// Adds `v` to a cell's quantity; on overflow keeps the first fault and leaves the quantity.
pub(super) fn add_checked(
    q: &mut u128,
    v: u128,
    fault: &mut Option<DeviceFault>,
    meter: MeterKind,
    window: u64,
) {
    match q.checked_add(v) {
        Some(n) => *q = n,
        None => {
            fault.get_or_insert(DeviceFault::Overflow { meter, window });
        }
    }
}

/// The number of (device, window) cells of a report and their limit, shared by its devices.
#[derive(Debug)]
pub(super) struct CellBudget {
    pub(super) used: AtomicU64,
    pub(super) limit: u64,
}

impl CellBudget {
    pub(super) fn used(&self) -> u64 {
        self.used.load(AtomicOrdering::Relaxed)
    }
}

/// A capped share factor `num / den` (reduced), applied to Σ len·held.
pub(super) type Factor = (u128, u128);

/// What a slot of a device accumulates (per cell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    /// An integer meter of a key (counts, bytes, `kernel_ns`, `memory_byte_ns`).
    Int(u32, MeterKind),
    /// Busy ns of a running set (its id in [`DeviceState::sets`]).
    Busy(u32),
    /// Uncapped SM·ns of a key.
    SmExact(u32),
    /// Uncapped warp·ns of a key: Σ len·held·warps.
    WarpExact(u32),
    /// Capped SM·ns of (key, cap factor id in [`Slots::factors`]): Σ len·held; share =
    /// value × num / den.
    SmCapped(u32, u32),
    /// Capped warp·ns of (key, cap factor id): Σ len·held·warps; share = value × num / den.
    WarpCapped(u32, u32),
    /// An integer meter's quantity of no attribution key: the tenant [`crate::IDLE`] (PM
    /// samples' pieces in which no kernel ran, `meter/pm.rs`).
    Idle(MeterKind),
}

/// Slot id meaning "none".
pub(super) const NO_SLOT: u32 = u32::MAX;

/// A key's slots, by meter index (`MeterKind as usize`); the indices of `SmNs` and `WarpNs`,
/// never integer meters, hold the key's uncapped [`Slot::SmExact`] and [`Slot::WarpExact`].
type KeySlots = [u32; METERS.len()];

/// A device's slots: what each accumulates, the cell-local index each had last, and the
/// interning of keys' meters, running sets and (key, cap factor) to slot ids; and the device's
/// distinct cap factors, interned to small ids.
#[derive(Debug, Clone, Default)]
pub(super) struct Slots {
    /// What each slot accumulates, by slot id.
    pub(super) what: Vec<Slot>,
    /// Per slot id: its index in the cell it was last booked in (checked before use).
    last: Vec<u32>,
    /// Per attribution key id (the meter's): its entry in `per_key` + 1; 0 = none yet.
    key_block: Vec<u32>,
    /// Per key of this device: its slots by meter ([`KeySlots`]), [`NO_SLOT`] until booked.
    per_key: Vec<KeySlots>,
    /// Per running-set id: its busy slot ([`NO_SLOT`] until booked).
    busy: Vec<u32>,
    /// (key << 32 | factor id) → its slots of [`Slot::SmCapped`] and [`Slot::WarpCapped`]
    /// ([`NO_SLOT`] until booked).
    capped: FxHashMap<u64, [u32; 2]>,
    /// Every distinct cap factor of the device, by id.
    pub(super) factors: Vec<Factor>,
    /// Factor → id.
    factor_index: FxHashMap<Factor, u32>,
    /// The factor interned last, and its id.
    last_factor: Option<(Factor, u32)>,
    /// Per PM-sampled meter (`sm_active_ns`, `dram_bytes`): its [`Slot::Idle`] slot, once
    /// booked (any other meter's is looked up in `idle_other`; none books idle today).
    idle: [Option<u32>; 2],
    idle_other: Vec<(MeterKind, u32)>,
}

impl Slots {
    fn new_slot(&mut self, what: Slot) -> u32 {
        let id = self.what.len() as u32;
        self.what.push(what);
        self.last.push(NO_SLOT);
        id
    }

    /// The slot of key `key`'s meter index `m` (an integer meter, or `SmNs` / `WarpNs` for the
    /// uncapped SM·ns / warp·ns), made when new.
    #[inline]
    fn key_slot(&mut self, key: u32, m: MeterKind) -> u32 {
        if let Some(&b) = self.key_block.get(key as usize) {
            if let Some(block) = (b as usize)
                .checked_sub(1)
                .and_then(|b| self.per_key.get(b))
            {
                let s = block[m as usize];
                if s != NO_SLOT {
                    return s;
                }
            }
        }
        self.new_key_slot(key, m)
    }

    /// [`Slots::key_slot`] for a slot not made yet.
    #[cold]
    fn new_key_slot(&mut self, key: u32, m: MeterKind) -> u32 {
        let k = key as usize;
        if self.key_block.len() <= k {
            self.key_block.resize(k + 1, 0);
        }
        let b = match self.key_block[k] {
            0 => {
                self.per_key.push([NO_SLOT; METERS.len()]);
                self.key_block[k] = self.per_key.len() as u32;
                self.per_key.len() - 1
            }
            b => b as usize - 1,
        };
        match self.per_key[b][m as usize] {
            NO_SLOT => {
                let what = match m {
                    MeterKind::SmNs => Slot::SmExact(key),
                    MeterKind::WarpNs => Slot::WarpExact(key),
                    _ => Slot::Int(key, m),
                };
                let s = self.new_slot(what);
                self.per_key[b][m as usize] = s;
                s
            }
            s => s,
        }
    }

    /// The slot of integer meter `m` of key `key`, made when new.
    #[inline]
    pub(super) fn int(&mut self, key: u32, m: MeterKind) -> u32 {
        self.key_slot(key, m)
    }

    /// The slot of integer meter `m` of key `key`, or `None` when never booked.
    pub(super) fn find_int(&self, key: u32, m: MeterKind) -> Option<u32> {
        let b = *self.key_block.get(key as usize)?;
        let s = self.per_key.get((b as usize).checked_sub(1)?)?[m as usize];
        (s != NO_SLOT).then_some(s)
    }

    /// The [`Slot::Idle`] slot of meter `m`, made when new.
    pub(super) fn idle(&mut self, m: MeterKind) -> u32 {
        let i = match m {
            MeterKind::SmActiveNs => Some(0),
            MeterKind::DramBytes => Some(1),
            _ => None,
        };
        if let Some(s) = i.and_then(|i| self.idle[i]) {
            return s;
        }
        if let Some(&(_, s)) = self.idle_other.iter().find(|(o, _)| *o == m) {
            return s;
        }
        let s = self.new_slot(Slot::Idle(m));
        match i {
            Some(i) => self.idle[i] = Some(s),
            None => self.idle_other.push((m, s)),
        }
        s
    }

    /// The busy slot of running set `set`, made when new.
    pub(super) fn busy(&mut self, set: u32) -> u32 {
        let i = set as usize;
        if self.busy.len() <= i {
            self.busy.resize(i + 1, NO_SLOT);
        }
        if self.busy[i] == NO_SLOT {
            self.busy[i] = self.new_slot(Slot::Busy(set));
        }
        self.busy[i]
    }

    /// The SM·ns slot and, when `warp`, the warp·ns slot ([`NO_SLOT`] otherwise) of key `key`
    /// under cap factor `factor` (`None`: uncapped), made when new: one lookup for both.
    #[inline]
    pub(super) fn held(&mut self, key: u32, factor: Option<u32>, warp: bool) -> (u32, u32) {
        match factor {
            None => {
                let sm = self.key_slot(key, MeterKind::SmNs);
                let w = if warp {
                    self.key_slot(key, MeterKind::WarpNs)
                } else {
                    NO_SLOT
                };
                (sm, w)
            }
            Some(f) => {
                let at = (u64::from(key) << 32) | u64::from(f);
                let [sm, w] = match self.capped.get(&at) {
                    Some(&pair) => pair,
                    None => {
                        let sm = self.new_slot(Slot::SmCapped(key, f));
                        self.capped.insert(at, [sm, NO_SLOT]);
                        [sm, NO_SLOT]
                    }
                };
                if warp && w == NO_SLOT {
                    let w = self.new_slot(Slot::WarpCapped(key, f));
                    self.capped.insert(at, [sm, w]);
                    return (sm, w);
                }
                (sm, if warp { w } else { NO_SLOT })
            }
        }
    }

    /// The id of cap factor `f`, interned when new.
    #[inline]
    pub(super) fn factor(&mut self, f: Factor) -> u32 {
        if let Some((last, id)) = self.last_factor {
            if last == f {
                return id;
            }
        }
        let id = match self.factor_index.get(&f) {
            Some(&id) => id,
            None => {
                let id = self.factors.len() as u32;
                self.factors.push(f);
                self.factor_index.insert(f, id);
                id
            }
        };
        self.last_factor = Some((f, id));
        id
    }
}

/// The accumulators of one (device, window) cell: the slots booked in it, in first-touch
/// order, and their values.
#[derive(Debug, Default, Clone)]
pub(super) struct Cell {
    /// Slot id of each accumulator ([`Slots::what`]).
    slots: Vec<u32>,
    /// Value of each accumulator, same index.
    values: Vec<u128>,
    /// Slot id → index, for a slot last booked in another cell: built at the first such
    /// lookup, then kept up to date (a cell whose slots were only ever booked in it, the one
    /// window of a steady stream, never needs it).
    index: Option<FxHashMap<u32, u32>>,
}

impl Cell {
    /// The index of `slot` in this cell, if booked here. `last` is [`Slots::last`]: the index
    /// a slot had where it was last booked, which is this cell's when it names the same slot
    /// here (a cell holds a slot once).
    #[inline]
    fn find(&mut self, slot: u32, last: &mut [u32]) -> Option<usize> {
        let l = last.get_mut(slot as usize)?;
        if self.slots.get(*l as usize) == Some(&slot) {
            return Some(*l as usize);
        }
        if *l == NO_SLOT {
            // Never booked in any cell.
            return None;
        }
        self.find_in_index(slot, l)
    }

    /// [`Cell::find`] for a slot last booked in another cell (or not yet here): its index
    /// from the cell's map (built now if it is the first such lookup), remembered in `l`.
    #[cold]
    fn find_in_index(&mut self, slot: u32, l: &mut u32) -> Option<usize> {
        let slots = &self.slots;
        let index = self.index.get_or_insert_with(|| {
            slots
                .iter()
                .enumerate()
                .map(|(i, &s)| (s, i as u32))
                .collect()
        });
        let &i = index.get(&slot)?;
        *l = i;
        Some(i as usize)
    }

    /// The accumulator of `slot` (a slot id of `slots`), made (0) when new.
    #[inline]
    pub(super) fn entry(&mut self, slot: u32, slots: &mut Slots) -> &mut u128 {
        let i = match self.find(slot, &mut slots.last) {
            Some(i) => i,
            None => self.push(slot, slots),
        };
        &mut self.values[i]
    }

    /// Adds `slot` to this cell (value 0); returns its index.
    #[cold]
    fn push(&mut self, slot: u32, slots: &mut Slots) -> usize {
        let i = self.slots.len();
        self.slots.push(slot);
        self.values.push(0);
        if let Some(index) = &mut self.index {
            index.insert(slot, i as u32);
        }
        if let Some(l) = slots.last.get_mut(slot as usize) {
            *l = i as u32;
        }
        i
    }

    /// Takes `v` from the accumulator of `slot` when booked in this cell (saturating at 0);
    /// one that reaches 0 is removed (the cell's last accumulator takes its index), so what
    /// is taken back leaves nothing behind.
    pub(super) fn take(&mut self, slot: u32, v: u128, slots: &mut Slots) {
        let Some(i) = self.find(slot, &mut slots.last) else {
            return;
        };
        let q = &mut self.values[i];
        *q = q.saturating_sub(v);
        if *q > 0 {
            return;
        }
        self.slots.swap_remove(i);
        self.values.swap_remove(i);
        if let Some(index) = &mut self.index {
            index.remove(&slot);
        }
        if let Some(&moved) = self.slots.get(i) {
            if let Some(index) = &mut self.index {
                index.insert(moved, i as u32);
            }
            if let Some(l) = slots.last.get_mut(moved as usize) {
                *l = i as u32;
            }
        }
    }

    /// Every accumulator: (slot id, value), in order of first booking (changed by removals).
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, u128)> + '_ {
        self.slots.iter().copied().zip(self.values.iter().copied())
    }
}

/// A device's cells by window start: the cells in an arena, found by a `BTreeMap` from window
/// start to arena index, and the two windows booked last kept as hints. Booking mostly goes to
/// the window of the sweep and that of the latest arrivals, so the map is walked only when a
/// booking changes window; a new cell is pushed to the arena (never moved: a sorted `Vec`
/// would move every later cell per insert, and memory held over many windows behind a long
/// kernel's would insert thousands of them).
#[derive(Debug, Default, Clone)]
pub(super) struct Cells {
    /// Window start → index in `cells`.
    index: BTreeMap<u64, u32>,
    cells: Vec<Cell>,
    /// The windows booked last and their indices, the latest first.
    hints: [Option<(u64, u32)>; 2],
}

impl Cells {
    /// Cells held.
    pub(super) fn len(&self) -> usize {
        self.cells.len()
    }

    /// Whether no cell is held.
    pub(super) fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The arena index of window `w`'s cell, if held; a hint first.
    #[inline]
    fn position(&self, w: u64) -> Option<u32> {
        for &(hw, i) in self.hints.iter().flatten() {
            if hw == w {
                return Some(i);
            }
        }
        self.index.get(&w).copied()
    }

    /// Makes window `w`'s cell (at arena index `i`) the latest hint.
    #[inline]
    fn hint(&mut self, w: u64, i: u32) {
        if self.hints[0].is_some_and(|(hw, _)| hw == w) {
            return;
        }
        self.hints[1] = self.hints[0];
        self.hints[0] = Some((w, i));
    }

    /// The cell of window `w`, if held.
    pub(super) fn get(&self, w: u64) -> Option<&Cell> {
        let i = self.position(w)?;
        self.cells.get(i as usize)
    }

    /// The cell of window `w`, if held.
    pub(super) fn get_mut(&mut self, w: u64) -> Option<&mut Cell> {
        let i = self.position(w)?;
        self.hint(w, i);
        self.cells.get_mut(i as usize)
    }

    /// Whether the cell of window `w` is held.
    pub(super) fn contains(&self, w: u64) -> bool {
        self.position(w).is_some()
    }

    /// Cells held of the windows from `first` to `last`, both included.
    pub(super) fn count_in(&self, first: u64, last: u64) -> usize {
        self.index.range(first..=last).count()
    }

    /// The windows held, in order.
    pub(super) fn windows(&self) -> impl Iterator<Item = u64> + '_ {
        self.index.keys().copied()
    }

    /// Keeps the cells of windows before `edge` and returns those from `edge` on (each part's
    /// arena rebuilt in window order).
    pub(super) fn split_off(&mut self, edge: u64) -> Cells {
        let mut later = self.index.split_off(&edge);
        let mut arena = std::mem::take(&mut self.cells);
        let mut take = |index: &mut BTreeMap<u64, u32>| {
            let mut cells = Vec::with_capacity(index.len());
            for i in index.values_mut() {
                cells.push(
                    arena
                        .get_mut(*i as usize)
                        .map(std::mem::take)
                        .unwrap_or_default(),
                );
                *i = (cells.len() - 1) as u32;
            }
            cells
        };
        self.cells = take(&mut self.index);
        let cells = take(&mut later);
        self.hints = [None; 2];
        Cells {
            index: later,
            cells,
            hints: [None; 2],
        }
    }

    /// The cell of window `w`, made (and counted against the report's budget) when new; past
    /// the budget the device keeps a fault ([`MeterError::TooManyCells`]).
    pub(super) fn at(
        &mut self,
        budget: &CellBudget,
        fault: &mut Option<DeviceFault>,
        w: u64,
        window: WindowSize,
    ) -> &mut Cell {
        let i = match self.position(w) {
            Some(i) => i,
            None => {
                let used = budget.used.fetch_add(1, AtomicOrdering::Relaxed) + 1;
                if used > budget.limit {
                    fault.get_or_insert(DeviceFault::TooManyCells {
                        what: "work",
                        from: w,
                        to: w.saturating_add(window.ns()),
                        windows: 1,
                    });
                }
                let i = self.cells.len() as u32;
                self.cells.push(Cell::default());
                self.index.insert(w, i);
                i
            }
        };
        self.hint(w, i);
        &mut self.cells[i as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cell's quantities by slot, whatever their order in it.
    fn values(cell: &Cell) -> BTreeMap<u32, u128> {
        let mut out = BTreeMap::new();
        for (s, v) in cell.iter() {
            assert!(out.insert(s, v).is_none(), "slot {s} held twice");
        }
        out
    }

    /// Review: a slot's remembered index that names another slot in this cell (it was last
    /// booked in another cell, or a removal moved another slot there) never books into the
    /// wrong accumulator, before and after the cell's map is built, and a quantity taken back
    /// to 0 leaves the cell.
    #[test]
    fn slots_book_into_their_own_accumulator_across_cells_and_removals() {
        let mut slots = Slots::default();
        let (a, b, c) = (
            slots.int(1, MeterKind::KernelNs),
            slots.int(2, MeterKind::KernelNs),
            slots.int(3, MeterKind::KernelNs),
        );
        let (mut one, mut two) = (Cell::default(), Cell::default());
        *one.entry(a, &mut slots) += 1;
        *one.entry(b, &mut slots) += 10;
        *one.entry(c, &mut slots) += 100;
        // c at index 0 of `two`, where `one` holds a; then c in `one` again.
        *two.entry(c, &mut slots) += 1_000;
        *one.entry(c, &mut slots) += 100;
        *one.entry(a, &mut slots) += 1;
        assert_eq!(values(&one), BTreeMap::from([(a, 2), (b, 10), (c, 200)]));
        assert_eq!(values(&two), BTreeMap::from([(c, 1_000)]));
        // b taken back in part, then to 0: c or a moves into its index.
        one.take(b, 4, &mut slots);
        assert_eq!(values(&one), BTreeMap::from([(a, 2), (b, 6), (c, 200)]));
        one.take(b, 6, &mut slots);
        assert_eq!(values(&one), BTreeMap::from([(a, 2), (c, 200)]));
        // b's remembered index now holds another slot: a new accumulator, not that one; c,
        // moved by the removal and last booked in `two`, is found through the map.
        *two.entry(c, &mut slots) += 1;
        *one.entry(b, &mut slots) += 7;
        *one.entry(c, &mut slots) += 1;
        *two.entry(a, &mut slots) += 5;
        *one.entry(a, &mut slots) += 1;
        assert_eq!(values(&one), BTreeMap::from([(a, 3), (b, 7), (c, 201)]));
        assert_eq!(values(&two), BTreeMap::from([(a, 5), (c, 1_001)]));
        // Taking from a slot the cell does not hold changes nothing.
        two.take(b, 1, &mut slots);
        assert_eq!(values(&two), BTreeMap::from([(a, 5), (c, 1_001)]));
    }

    /// Review: cells are found by window through the hints and the map alike, and a split
    /// keeps each cell with its window.
    #[test]
    fn cells_by_window_survive_hints_and_splits() {
        let budget = CellBudget {
            used: AtomicU64::new(0),
            limit: 100,
        };
        let mut fault = None;
        let window = WindowSize::HOUR;
        let h = window.ns();
        let mut slots = Slots::default();
        let s = slots.int(0, MeterKind::KernelLaunches);
        let mut cells = Cells::default();
        for (w, v) in [(3, 3), (1, 1), (2, 2), (3, 30), (0, 0), (1, 10), (5, 5)] {
            *cells
                .at(&budget, &mut fault, w * h, window)
                .entry(s, &mut slots) += v;
        }
        assert_eq!(budget.used(), 5);
        assert_eq!(fault, None);
        let at = |cells: &Cells, w: u64| cells.get(w * h).map(|c| values(c)[&s]);
        assert_eq!(
            (0..6).map(|w| at(&cells, w)).collect::<Vec<_>>(),
            [Some(0), Some(11), Some(2), Some(33), None, Some(5)]
        );
        assert_eq!(cells.count_in(h, 4 * h), 3);
        let later = cells.split_off(2 * h);
        assert_eq!(cells.windows().collect::<Vec<_>>(), [0, h]);
        assert_eq!(later.windows().collect::<Vec<_>>(), [2 * h, 3 * h, 5 * h]);
        assert_eq!(
            (at(&cells, 1), at(&later, 3), at(&later, 1)),
            (Some(11), Some(33), None)
        );
    }
}
