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

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Pending {
    pub(super) start: u64,
    pub(super) seq: u64,
    pub(super) end: u64,
    pub(super) key: u32,
    /// SMs held (0 for non-kernels or when the SM count or grid is unknown).
    pub(super) held: u32,
    /// Resident warps per SM (0 for non-kernels or when they cannot be computed).
    pub(super) warps: u32,
    /// Partition (green context) index + 1; 0 = the device itself.
    pub(super) part: u32,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Active {
    pub(super) end: u64,
    pub(super) key: u32,
    pub(super) held: u32,
    pub(super) warps: u32,
    pub(super) part: u32,
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
            self.changed = true;
        }
    }
}

impl DeviceState {
    /// Starts the sweep at the first record, and moves it on to `max start − horizon`.
    pub(super) fn note_start(&mut self, start: u64, horizon: u64, window: WindowSize) {
        if !self.started {
            self.started = true;
            self.swept_to = start.saturating_sub(horizon);
        }
        if start > self.max_start {
            self.max_start = start;
            let to = self.max_start.saturating_sub(horizon);
            if to > self.swept_to {
                self.advance(to, window);
            }
        }
    }

    /// Books every elementary interval before `to` (exclusive) and moves the sweep there.
    pub(super) fn advance(&mut self, to: u64, window: WindowSize) {
        self.advance_memory(to, window);
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
            if !self.run.is_empty() && next > self.swept_to {
                self.book(self.swept_to, next, window);
            }
            self.swept_to = self.swept_to.max(next);
            let t = self.swept_to;
            self.run.end_until(t);
            while let Some(Reverse(p)) = self.pending.peek().copied() {
                if p.start > t {
                    break;
                }
                self.pending.pop();
                if p.end > t {
                    self.run.start(Active {
                        end: p.end,
                        key: p.key,
                        held: p.held,
                        warps: p.warps,
                        part: p.part,
                    });
                }
            }
        }
        if to > self.swept_to {
            if !self.run.is_empty() {
                self.book(self.swept_to, to, window);
            }
            self.swept_to = to;
        }
        // Duplicate detection only needs records the sweep has not passed.
        self.prune_dups(self.swept_to);
    }

    /// Books `[a, b)` with the current running set, split at window edges.
    pub(super) fn book(&mut self, a: u64, b: u64, window: WindowSize) {
        if self.run.changed {
            self.summarize();
        }
        let sms = self.info.sm_count.is_some();
        let set = self.summary.set;
        let mut t = a;
        while t < b {
            let w = window.start_of(t);
            let edge = w.saturating_add(window.ns()).min(b);
            let len = u128::from(edge - t);
            let cell = cell_at(&mut self.cells, &self.budget, &mut self.fault, w, window);
            *cell.busy.entry(set).or_insert(0) += len;
            if sms {
                for &(k, f, h, hw) in &self.summary.held {
                    match f {
                        None => {
                            *cell.sm_exact.entry(k).or_insert(0) += len * u128::from(h);
                            if hw > 0 {
                                *cell.warp_exact.entry(k).or_insert(0) += len * hw;
                            }
                        }
                        Some(f) => {
                            *cell.sm_capped.entry((k, f)).or_insert(0) += len * u128::from(h);
                            if hw > 0 {
                                *cell.warp_capped.entry((k, f)).or_insert(0) += len * hw;
                            }
                        }
                    }
                }
            }
            t = edge;
        }
    }
}
