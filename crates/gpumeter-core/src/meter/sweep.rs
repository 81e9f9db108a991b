//! The sweep: the reorder buffer, the running set and the elementary intervals it books (`gpu_busy_ns`, `sm_ns`, `warp_ns`).

use super::*;

use std::cmp::Reverse;

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
            let next_end = self.active.iter().map(|a| a.end).min().filter(|&e| e <= to);
            let next = match (next_start, next_end) {
                (None, None) => break,
                (Some(a), None) | (None, Some(a)) => a,
                (Some(a), Some(b)) => a.min(b),
            };
            if !self.active.is_empty() && next > self.swept_to {
                self.book(self.swept_to, next, window);
            }
            self.swept_to = self.swept_to.max(next);
            let t = self.swept_to;
            let before = self.active.len();
            self.active.retain(|a| a.end > t);
            let mut changed = before != self.active.len();
            while let Some(Reverse(p)) = self.pending.peek().copied() {
                if p.start > t {
                    break;
                }
                self.pending.pop();
                if p.end > t {
                    self.active.push(Active {
                        end: p.end,
                        key: p.key,
                        held: p.held,
                        warps: p.warps,
                        part: p.part,
                    });
                    changed = true;
                }
            }
            if changed {
                self.summary = None;
            }
        }
        if to > self.swept_to {
            if !self.active.is_empty() {
                self.book(self.swept_to, to, window);
            }
            self.swept_to = to;
        }
        // Duplicate detection only needs records the sweep has not passed.
        let cut = self.swept_to;
        while let Some((first, _)) = self.dups.first_key_value() {
            if first.0 >= cut {
                break;
            }
            self.dups.pop_first();
        }
    }

    /// Books `[a, b)` with the current active set, split at window edges.
    pub(super) fn book(&mut self, a: u64, b: u64, window: WindowSize) {
        if self.summary.is_none() {
            self.summary = Some(self.summarize());
        }
        let Some(ActiveSummary { keys, held }) = self.summary.as_ref() else {
            return;
        };
        let sms = self.info.sm_count.is_some();
        let mut t = a;
        while t < b {
            let w = window.start_of(t);
            let edge = w.saturating_add(window.ns()).min(b);
            let len = u128::from(edge - t);
            let cell = cell_at(&mut self.cells, &self.budget, &mut self.fault, w, window);
            *cell.busy.entry(keys.clone()).or_insert(0) += len;
            if sms {
                for &(k, f, h, hw) in held {
                    match f {
                        None => {
                            *cell.sm_exact.entry(k).or_insert(0) += len * u128::from(h);
                            if hw > 0 {
                                *cell.warp_exact.entry(k).or_insert(0) += len * hw;
                            }
                        }
                        Some(f) => {
                            *cell.sm_capped.entry(k).or_default().entry(f).or_insert(0) +=
                                len * u128::from(h);
                            if hw > 0 {
                                *cell.warp_capped.entry(k).or_default().entry(f).or_insert(0) +=
                                    len * hw;
                            }
                        }
                    }
                }
            }
            t = edge;
        }
    }
}
