//! Memory residency (`memory_byte_ns`): allocations paired with releases and process exits, held bytes booked per window.

use super::*;

use std::cmp::Reverse;

use crate::record::{LossReason, MemoryEvent, MemoryOp};
use crate::report::MeterKind;
use crate::time::WindowSize;

/// A memory event waiting for the sweep, ordered by (timestamp, arrival).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct MemPending {
    pub(super) ts: u64,
    pub(super) seq: u64,
    /// Process id: addresses are per process (virtual address spaces).
    pub(super) pid: Option<u32>,
    pub(super) address: u64,
    pub(super) bytes: u64,
    /// 0 allocation, 1 release, 2 process exit.
    pub(super) op: u8,
    pub(super) key: u32,
    /// When the allocation was first made (differs from `ts` for opening state).
    pub(super) allocated_at: u64,
}

/// An allocation held, billed up to `since` so far.
#[derive(Debug, Clone, Copy)]
pub(super) struct OpenAlloc {
    pub(super) since: u64,
    pub(super) allocated_at: u64,
    pub(super) bytes: u64,
    pub(super) key: u32,
}

/// Where an allocation is held: (process id, virtual address).
pub(super) type HeldAt = (Option<u32>, u64);

impl Meter {
    /// Meters one memory allocation or release (`memory_byte_ns`). Events are
    /// paired by device and address in timestamp order (arrival order for equal timestamps)
    /// within the reordering horizon. A release without an allocation is loss
    /// (`release_without_allocation`); an allocation at an address still held closes the
    /// earlier allocation there (counted in a warning). A zero timestamp is loss
    /// (`zero_timestamp`), an event older than the horizon `late`, the same event twice
    /// (device, context, correlation id, address, timestamp, operation) `duplicate`.
    /// Allocations still held when the report is built are billed to the report's end and
    /// listed in `open_allocations`. Unknown slots are ignored.
    pub fn push_memory(&mut self, ev: MemoryEvent) {
        self.push_memory_at(ev);
    }

    pub(super) fn push_memory_at(&mut self, ev: MemoryEvent) {
        let Some(dev) = self.devices.get(ev.device.0 as usize) else {
            return;
        };
        let reason = if ev.timestamp_ns == 0 {
            Some(LossReason::ZeroTimestamp)
        } else if dev.started && ev.timestamp_ns < dev.swept_to {
            Some(LossReason::Late)
        } else {
            None
        };
        if let Some(r) = reason {
            self.record_loss(ev.device, r, 1);
            return;
        }
        let op = match ev.op {
            MemoryOp::Allocation => 0,
            MemoryOp::Release => 1,
            MemoryOp::ProcessExit => 2,
        };
        let dup: DupKey = (ev.timestamp_ns, Dup::Memory(ev.identity()));
        let joined = ev.joined();
        let (key, allocated_at) = (self.own_key(ev.external_id, ev.process_id), ev.timestamp_ns);
        let window = self.config.window;
        let dev = &mut self.devices[ev.device.0 as usize];
        if !dev.first_of(dup, joined) {
            return;
        }
        dev.memory_events += 1;
        dev.last_ns = dev.last_ns.max(ev.timestamp_ns);
        self.seq += 1;
        dev.mem_pending.push(Reverse(MemPending {
            ts: ev.timestamp_ns,
            seq: self.seq,
            pid: ev.process_id,
            address: ev.address,
            bytes: ev.bytes,
            op,
            key,
            allocated_at,
        }));
        dev.note_start(
            ev.timestamp_ns,
            self.config.reorder_horizon_ns,
            window,
            &self.keys,
        );
    }
}

impl DeviceState {
    /// Books allocation `a` as held until `end`, for as long as that is (memory
    /// may be held for any time; the 7-day plausibility bound is for work records). Returns
    /// `false`, booking nothing, when the hold would take the device past
    /// [`MeterConfig::max_cells`] cells ([`Meter::finish`] then fails).
    pub(super) fn hold(&mut self, a: OpenAlloc, end: u64, window: WindowSize) -> bool {
        self.book_memory(a.key, a.since, end, a.bytes, window)
    }

    /// Books `bytes` held by `key` over `[a, b)` as `memory_byte_ns`, split at window edges.
    /// Each window's part, `bytes × ns` < 2^128, is exact; a cell whose sum would pass
    /// `u128::MAX` is a fault ([`MeterError::QuantityOverflow`]), never a clamp. A span that
    /// would add windows beyond the device's limit books nothing and is a fault
    /// ([`MeterError::TooManyCells`]). Returns whether it was booked.
    pub(super) fn book_memory(
        &mut self,
        key: u32,
        a: u64,
        b: u64,
        bytes: u64,
        window: WindowSize,
    ) -> bool {
        if b <= a {
            return true;
        }
        // Windows the span touches, and how many of them the device does not hold yet.
        let (first, last) = (window.start_of(a), window.start_of(b - 1));
        let spanned = (last - first) / window.ns() + 1;
        let now = self.budget.used();
        // Counting the windows already held costs a walk: only when the bound says it may
        // matter.
        if now.saturating_add(spanned) > self.budget.limit
            && now.saturating_add(spanned - self.cells.count_in(first, last) as u64)
                > self.budget.limit
        {
            self.fault.get_or_insert(DeviceFault::TooManyCells {
                what: "memory held",
                from: a,
                to: b,
                windows: spanned,
            });
            return false;
        }
        let mut t = a;
        while t < b {
            let w = window.start_of(t);
            let edge = w.saturating_add(window.ns()).min(b);
            let slot = self.slots.int(key, MeterKind::MemoryByteNs);
            let q = self
                .cells
                .at(&self.budget, &mut self.fault, w, window)
                .entry(slot, &mut self.slots);
            let part = u128::from(bytes) * u128::from(edge - t);
            add_checked(q, part, &mut self.fault, MeterKind::MemoryByteNs, w);
            t = edge;
        }
        true
    }

    /// Pairs the memory events before `to` (exclusive; all of them for `u64::MAX`).
    pub(super) fn advance_memory(&mut self, to: u64, window: WindowSize) {
        while let Some(Reverse(m)) = self.mem_pending.peek().copied() {
            if m.ts >= to && to != u64::MAX {
                break;
            }
            self.mem_pending.pop();
            if m.op == 2 {
                let ended: Vec<HeldAt> = self
                    .open
                    .range((m.pid, 0)..=(m.pid, u64::MAX))
                    .map(|(k, _)| *k)
                    .collect();
                for k in ended {
                    if let Some(a) = self.open.remove(&k) {
                        self.hold(a, m.ts, window);
                    }
                }
            } else if m.op == 1 {
                match self.open.remove(&(m.pid, m.address)) {
                    Some(a) => {
                        self.hold(a, m.ts, window);
                    }
                    None => {
                        self.loss
                            .entry(LossReason::ReleaseWithoutAllocation)
                            .or_default()
                            .add(1, false);
                    }
                }
            } else {
                let new = OpenAlloc {
                    since: m.ts,
                    allocated_at: m.allocated_at,
                    bytes: m.bytes,
                    key: m.key,
                };
                if let Some(prev) = self.open.insert((m.pid, m.address), new) {
                    self.reallocations += 1;
                    self.hold(prev, m.ts, window);
                }
            }
        }
    }
}
