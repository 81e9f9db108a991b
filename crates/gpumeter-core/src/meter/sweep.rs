//! The sweep: the reorder buffer, the running set and the elementary intervals it books
//! (`gpu_busy_ns`, `sm_ns`, `warp_ns`).
//!
//! The running set is kept up to date as records start and end, never rescanned: a min-heap
//! of ends gives the next end in O(log n), and per attribution key and per (key, partition)
//! counts and held sums change by one record at a time. The summary the intervals are booked
//! with (`caps.rs`) is rebuilt from those sums, into reused buffers, only when the set
//! changed; the sorted distinct keys are interned once to a set id.

use super::*;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use crate::time::WindowSize;

/// The most kernels a device runs at once: CUDA's "maximum number of resident grids per
/// device (concurrent kernel execution)", 128 for compute capabilities 6.0, 7.0, 7.5 and every
/// later one (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability").
/// Some parts have fewer (16 or 32: 5.3, 6.1, 6.2, 7.2); every device is held to the highest,
/// so work that real hardware ran is never refused. A kernel that would start while this many
/// run on its device is loss (`concurrent_kernel_limit`): records no GPU can produce, which
/// would otherwise make the sweep's cost grow with the overlap (issue 13).
pub const MAX_RESIDENT_GRIDS: u32 = 128;

/// [`Pending::flags`]: the item is a kernel.
pub(super) const KERNEL: u8 = 1;
/// [`Pending::flags`]: the kernel carries a warp-instruction count ([`Pending::instructions`]).
pub(super) const WITH_INSTRUCTIONS: u8 = 2;
/// [`Pending::flags`]: the kernel's grid is unknown (counted in `kernels_without_grid`).
pub(super) const WITHOUT_GRID: u8 = 4;
/// [`Pending::flags`]: the kernel's resident warps are unknown (`kernels_without_occupancy`).
pub(super) const WITHOUT_OCCUPANCY: u8 = 8;

/// A work record waiting for the sweep. Ordered by start, then by what it books (never by
/// arrival first), so which of several kernels starting at one instant is over
/// [`MAX_RESIDENT_GRIDS`] does not depend on the order of the inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Pending {
    pub(super) start: u64,
    pub(super) end: u64,
    /// SMs held (0 for non-kernels or when the SM count or grid is unknown).
    pub(super) held: u32,
    /// Resident warps per SM (0 for non-kernels or when they cannot be computed).
    pub(super) warps: u32,
    /// Partition (green context) index + 1; 0 = the device itself.
    pub(super) part: u32,
    /// [`KERNEL`], [`WITH_INSTRUCTIONS`], [`WITHOUT_GRID`], [`WITHOUT_OCCUPANCY`].
    pub(super) flags: u8,
    /// Warp instructions booked at arrival (0 without a count).
    pub(super) instructions: u64,
    /// The operation counts booked at arrival: 0 when the kernel has none, else their index
    /// in the device's `op_slab` plus one.
    pub(super) ops: u32,
    pub(super) key: u32,
    pub(super) seq: u64,
}

impl Pending {
    pub(super) fn is_kernel(&self) -> bool {
        self.flags & KERNEL != 0
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Active {
    pub(super) end: u64,
    pub(super) key: u32,
    pub(super) held: u32,
    pub(super) warps: u32,
    pub(super) part: u32,
    pub(super) kernel: bool,
}

/// The records running at the sweep's position, with their sums kept as they start and end.
#[derive(Debug, Clone, Default)]
pub(super) struct Running {
    /// Running records by slot; slots of ended records are reused.
    pub(super) slots: Vec<Active>,
    /// Free slots.
    free: Vec<u32>,
    /// (end, slot) of every running record.
    ends: BinaryHeap<Reverse<(u64, u32)>>,
    /// Running records per attribution key.
    key_count: FxHashMap<u32, u32>,
    /// Distinct keys running, sorted.
    pub(super) keys: Vec<u32>,
    /// Per (key, partition index + 1): running records, Σ SMs held, Σ held × warps.
    pub(super) per_kp: FxHashMap<(u32, u32), (u32, u64, u128)>,
    /// Per partition index + 1 (0: the device): Σ SMs held.
    pub(super) per_part: Vec<u64>,
    /// Whether the set changed since the summary was built.
    pub(super) changed: bool,
    /// Kernels running (at most [`MAX_RESIDENT_GRIDS`]).
    kernels: u32,
}

impl Running {
    /// Records running.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether nothing runs.
    pub(super) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The earliest end of a running record.
    fn next_end(&self) -> Option<u64> {
        self.ends.peek().map(|Reverse((e, _))| *e)
    }

    /// Forgets every running record.
    pub(super) fn clear(&mut self) {
        *self = Running::default();
    }

    fn start(&mut self, a: Active) {
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = a;
                s
            }
            None => {
                self.slots.push(a);
                (self.slots.len() - 1) as u32
            }
        };
        self.ends.push(Reverse((a.end, slot)));
        let c = self.key_count.entry(a.key).or_insert(0);
        *c += 1;
        if *c == 1 {
            if let Err(i) = self.keys.binary_search(&a.key) {
                self.keys.insert(i, a.key);
            }
        }
        let e = self.per_kp.entry((a.key, a.part)).or_insert((0, 0, 0));
        e.0 += 1;
        e.1 += u64::from(a.held);
        e.2 += u128::from(a.held) * u128::from(a.warps);
        let p = a.part as usize;
        if self.per_part.len() <= p {
            self.per_part.resize(p + 1, 0);
        }
        self.per_part[p] += u64::from(a.held);
        self.kernels += u32::from(a.kernel);
        self.changed = true;
    }

    /// Ends every record whose end is at or before `t`.
    fn end_until(&mut self, t: u64) {
        while let Some(&Reverse((end, slot))) = self.ends.peek() {
            if end > t {
                break;
            }
            self.ends.pop();
            self.free.push(slot);
            let a = self.slots[slot as usize];
            if let Some(c) = self.key_count.get_mut(&a.key) {
                *c -= 1;
                if *c == 0 {
                    self.key_count.remove(&a.key);
                    if let Ok(i) = self.keys.binary_search(&a.key) {
                        self.keys.remove(i);
                    }
                }
            }
            if let Some(e) = self.per_kp.get_mut(&(a.key, a.part)) {
                e.0 -= 1;
                e.1 -= u64::from(a.held);
                e.2 -= u128::from(a.held) * u128::from(a.warps);
                if e.0 == 0 {
                    self.per_kp.remove(&(a.key, a.part));
                }
            }
            self.per_part[a.part as usize] -= u64::from(a.held);
            self.kernels -= u32::from(a.kernel);
            self.changed = true;
        }
    }
}

impl DeviceState {
    /// Starts the sweep at the first record, and moves it on to `max start − horizon`.
    pub(super) fn note_start(
        &mut self,
        start: u64,
        horizon: u64,
        window: WindowSize,
        keys: &[AttrKey],
    ) {
        if !self.started {
            self.started = true;
            self.swept_to = start.saturating_sub(horizon);
        }
        if start > self.max_start {
            self.max_start = start;
            let to = self.max_start.saturating_sub(horizon);
            if to > self.swept_to {
                self.advance(to, window, keys);
            }
        }
    }

    /// Books every elementary interval before `to` (exclusive) and moves the sweep there.
    /// Kernels starting at `to` stay pending (but at the end, `u64::MAX`): a kernel starting
    /// at `to` is still accepted, and all those starting at one instant must start together,
    /// or which of them are over [`MAX_RESIDENT_GRIDS`] would depend on whether the sweep
    /// reached their start (a settle, a drain, a record a horizon later) before the last of
    /// them arrived.
    /// `keys` are the meter's attribution keys by id: which kernels are over
    /// [`MAX_RESIDENT_GRIDS`] is chosen by what they are, never by their ids' arrival order.
    pub(super) fn advance(&mut self, to: u64, window: WindowSize, keys: &[AttrKey]) {
        self.advance_memory(to, window);
        // The running set has been the same since `since`: its interval is booked only when
        // the set changes (or at `to`), not at every event (a record of no duration, a kernel
        // over the limit); booking is additive in the interval's length.
        let mut since = self.swept_to;
        loop {
            let next_start = self
                .pending
                .peek()
                .map(|Reverse(p)| p.start)
                .filter(|&s| s <= to);
            let next_end = self.run.next_end().filter(|&e| e <= to);
            let next = match (next_start, next_end) {
                (None, None) => break,
                (Some(a), None) | (None, Some(a)) => a,
                (Some(a), Some(b)) => a.min(b),
            };
            self.swept_to = self.swept_to.max(next);
            let t = self.swept_to;
            // What starts now (a record of no duration never runs).
            self.starting.clear();
            while let Some(Reverse(p)) = self.pending.peek().copied() {
                if p.start > t {
                    break;
                }
                self.pending.pop();
                if p.end > t {
                    self.starting.push(p);
                } else if p.ops != 0 {
                    // Never started: its operation counts' slab entry is freed here.
                    self.op_free.push(p.ops - 1);
                }
            }
            if self.run.next_end().is_some_and(|e| e <= t) {
                // Records end: what ran before them is booked first.
                if !self.run.is_empty() && t > since {
                    self.book(since, t, window);
                }
                since = t;
                self.run.end_until(t);
            }
            // Kernels starting at `to` itself wait: more may still arrive for that instant.
            if t == to && to != u64::MAX && self.starting.iter().any(|p| p.is_kernel()) {
                let mut i = 0;
                while i < self.starting.len() {
                    if self.starting[i].is_kernel() {
                        let p = self.starting.swap_remove(i);
                        self.pending.push(Reverse(p));
                    } else {
                        i += 1;
                    }
                }
                self.start_now(&mut since, t, window);
                break;
            }
            let room = MAX_RESIDENT_GRIDS.saturating_sub(self.run.kernels) as usize;
            let kernels = self.starting.iter().filter(|p| p.is_kernel()).count();
            if kernels > room {
                self.over_limit(room, keys, window);
            }
            self.start_now(&mut since, t, window);
        }
        self.swept_to = self.swept_to.max(to);
        if !self.run.is_empty() && self.swept_to > since {
            self.book(since, self.swept_to, window);
        }
        // PM samples' pieces the sweep has now passed are complete.
        if self.pm.has_held() {
            self.complete_pm(self.swept_to, window, keys);
        }
        // Duplicate detection only needs records the sweep has not passed.
        self.prune_dups(self.swept_to);
    }

    /// Starts the records in `starting` at `t`: first the running set's interval since
    /// `since` is booked (it changes now) and `since` moves to `t`. Nothing when none starts.
    fn start_now(&mut self, since: &mut u64, t: u64, window: WindowSize) {
        if self.starting.is_empty() {
            return;
        }
        if !self.run.is_empty() && t > *since {
            self.book(*since, t, window);
        }
        *since = t;
        for p in self.starting.drain(..) {
            if p.ops != 0 {
                self.op_free.push(p.ops - 1);
            }
            self.run.start(Active {
                end: p.end,
                key: p.key,
                held: p.held,
                warps: p.warps,
                part: p.part,
                kernel: p.is_kernel(),
            });
        }
    }

    /// Of the kernels in `starting`, keeps the first `room` and makes the rest loss
    /// (`concurrent_kernel_limit`): what they booked at arrival (`kernel_launches`,
    /// `kernel_ns`, `warp_instructions`, the operation meters, the record counts) is taken back, so a lost record
    /// feeds no meter. The kept ones are the earliest ending, then by SMs held, resident
    /// warps, the partition's SM count (0 for the device), instruction and operation counts and attribution
    /// key (external id, process id, source tenant): an order of what the records are, so the
    /// inputs' order never matters (the partition's index, which follows the order green
    /// contexts were registered in, only breaks ties left after all of these).
    /// Only inputs no GPU can produce come here; it allocates.
    fn over_limit(&mut self, room: usize, keys: &[AttrKey], window: WindowSize) {
        let mut kernels: Vec<Pending> = self
            .starting
            .iter()
            .filter(|p| p.is_kernel())
            .copied()
            .collect();
        // A partition is compared by its SM count, not its index: indices follow the order
        // the inputs registered their green contexts in.
        let parts = &self.partitions;
        let part_sms = |p: &Pending| match p.part {
            0 => 0,
            i => parts.get(i as usize - 1).copied().unwrap_or(0),
        };
        let slab = &self.op_slab;
        let ops = |p: &Pending| match p.ops {
            0 => None,
            i => slab.get(i as usize - 1).copied(),
        };
        kernels.sort_by(|a, b| {
            (
                a.end,
                a.held,
                a.warps,
                part_sms(a),
                a.flags,
                a.instructions,
                ops(a),
            )
                .cmp(&(
                    b.end,
                    b.held,
                    b.warps,
                    part_sms(b),
                    b.flags,
                    b.instructions,
                    ops(b),
                ))
                .then_with(|| keys.get(a.key as usize).cmp(&keys.get(b.key as usize)))
                .then_with(|| a.part.cmp(&b.part))
        });
        let lost = kernels.split_off(room.min(kernels.len()));
        self.starting.retain(|p| !p.is_kernel());
        self.starting.extend(kernels);
        for p in lost {
            self.take_back(&p, window);
        }
    }

    /// Takes back what kernel `p` booked at arrival ([`Meter::push`]) and counts it as loss
    /// `concurrent_kernel_limit`. Its cells are still held: they lie at or after its start,
    /// which the sweep (and so any drain) has only now reached.
    fn take_back(&mut self, p: &Pending, window: WindowSize) {
        let key = p.key;
        // A quantity taken back to 0 leaves its cell (`Cell::take`).
        let mut sub = |w: u64, m: MeterKind, v: u128| {
            if let (Some(cell), Some(slot)) = (self.cells.get_mut(w), self.slots.find_int(key, m)) {
                cell.take(slot, v, &mut self.slots);
            }
        };
        let w0 = window.start_of(p.start);
        sub(w0, MeterKind::KernelLaunches, 1);
        if p.flags & WITH_INSTRUCTIONS != 0 {
            sub(w0, MeterKind::WarpInstructions, u128::from(p.instructions));
        }
        let ops = match p.ops {
            0 => [None; 4],
            i => self
                .op_slab
                .get(i as usize - 1)
                .copied()
                .unwrap_or([None; 4]),
        };
        for (m, n) in crate::OP_METERS.iter().zip(ops) {
            if let Some(n) = n {
                sub(w0, *m, u128::from(n));
            }
        }
        if p.ops != 0 {
            self.op_free.push(p.ops - 1);
        }
        let mut t = p.start;
        while t < p.end {
            let w = window.start_of(t);
            let edge = w.saturating_add(window.ns()).min(p.end);
            sub(w, MeterKind::KernelNs, u128::from(edge - t));
            t = edge;
        }
        self.records = self.records.saturating_sub(1);
        self.kernels = self.kernels.saturating_sub(1);
        self.kernels_over_limit += 1;
        if p.flags & WITH_INSTRUCTIONS != 0 {
            self.kernels_with_instructions = self.kernels_with_instructions.saturating_sub(1);
        } else {
            self.kernels_without_instructions = self.kernels_without_instructions.saturating_sub(1);
        }
        for (i, n) in ops.iter().enumerate() {
            let counted = if n.is_some() {
                &mut self.kernels_with_ops[i]
            } else {
                &mut self.kernels_without_ops[i]
            };
            *counted = counted.saturating_sub(1);
        }
        if p.flags & WITHOUT_GRID != 0 {
            self.kernels_without_grid = self.kernels_without_grid.saturating_sub(1);
        }
        if p.flags & WITHOUT_OCCUPANCY != 0 {
            self.kernels_without_occupancy = self.kernels_without_occupancy.saturating_sub(1);
        }
        self.loss
            .entry(LossReason::ConcurrentKernelLimit)
            .or_default()
            .add(1, false);
    }

    /// Books `[a, b)` with the current running set, split at window edges.
    pub(super) fn book(&mut self, a: u64, b: u64, window: WindowSize) {
        if self.run.changed {
            self.summarize();
        }
        let sms = self.info.sm_count.is_some();
        let busy = self.summary.busy;
        let slots = &mut self.slots;
        let mut t = a;
        while t < b {
            let w = window.start_of(t);
            let edge = w.saturating_add(window.ns()).min(b);
            let len = u128::from(edge - t);
            let cell = self.cells.at(&self.budget, &mut self.fault, w, window);
            *cell.entry(busy, slots) += len;
            if sms {
                // Uncapped or capped by a factor: the slots say which (`Slots::held`).
                for &(sm, warp, h, hw) in &self.summary.held {
                    *cell.entry(sm, slots) += len * u128::from(h);
                    if hw > 0 {
                        *cell.entry(warp, slots) += len * hw;
                    }
                }
            }
            t = edge;
        }
        // PM samples inside [a, b) take their share of the SM·ns just booked: one check when
        // the device has none (the hot path).
        if self.pm.has_held() {
            self.feed_pm(a, b, window);
        }
    }
}
