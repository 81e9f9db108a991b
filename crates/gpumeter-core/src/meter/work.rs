//! Work records arriving: validity, duplicates, and the meters booked at arrival (counts, bytes, `kernel_ns` split at window edges, warp instructions).

use super::*;

use std::cmp::Reverse;

use crate::record::{ActivityRecord, CopyDirection, KernelLaunch, LossReason, Work};
use crate::report::{MeterKind, RecordCounts};
use crate::time::MAX_RECORD_NS;

/// What a work record's [`Pending`] carries from its arrival (all 0 for a record that is not
/// a kernel).
#[derive(Debug, Clone, Copy, Default)]
struct Arrival {
    held: u32,
    warps: u32,
    flags: u8,
    instructions: u64,
    ops: u32,
}

impl Meter {
    /// Meters one record. Invalid records (a zero timestamp, end before start, over 7 days,
    /// older than the reordering horizon, duplicates) are counted as loss and feed no meter.
    /// Records for an unregistered slot are ignored.
    pub fn push(&mut self, rec: ActivityRecord) {
        let Some(dev) = self.devices.get(rec.device.0 as usize) else {
            return;
        };
        if let Some(r) = dev.loss_reason(&rec) {
            self.record_loss(rec.device, r, 1);
            return;
        }
        let key = self.key_of(&rec);
        let window = self.config.window;
        let dev = &mut self.devices[rec.device.0 as usize];
        if !dev.first_work(&rec) {
            return;
        }
        dev.records += 1;
        dev.last_ns = dev.last_ns.max(rec.end_ns);
        dev.work_end = dev.work_end.max(rec.end_ns);
        // Pending/Active carry partition index + 1; 0 = the device (also for an id that is not
        // this device's).
        let part = rec
            .partition
            .map(|p| p.0)
            .filter(|&p| (p as usize) < dev.partitions.len())
            .map_or(0, |p| p + 1);
        // SMs of the kernel's partition: its green context's when set, else the device's.
        let sm_count = match part {
            0 => dev.info.sm_count,
            p => dev
                .info
                .sm_count
                .map(|n| n.min(dev.partitions[(p - 1) as usize])),
        };
        let mut arrival = dev.book_at_start(&rec, key, window, &mut self.counts);
        if let Work::Kernel(k) = &rec.work {
            dev.kernel_residency(k, sm_count, &mut arrival);
            dev.book_kernel_ns(&rec, key, window);
        }
        self.seq += 1;
        dev.pending.push(Reverse(Pending {
            start: rec.start_ns,
            seq: self.seq,
            end: rec.end_ns,
            key,
            held: arrival.held,
            warps: arrival.warps,
            part,
            flags: arrival.flags,
            instructions: arrival.instructions,
            ops: arrival.ops,
        }));
        dev.note_start(
            rec.start_ns,
            self.config.reorder_horizon_ns,
            window,
            &self.keys,
        );
    }
}

impl DeviceState {
    /// Why `rec` is lost on arrival (a zero timestamp, end before start, over 7 days, before
    /// the sweep), or `None`.
    fn loss_reason(&self, rec: &ActivityRecord) -> Option<LossReason> {
        if rec.start_ns == 0 || rec.end_ns == 0 {
            Some(LossReason::ZeroTimestamp)
        } else if rec.end_ns < rec.start_ns {
            Some(LossReason::EndBeforeStart)
        } else if rec.end_ns - rec.start_ns > MAX_RECORD_NS {
            Some(LossReason::TooLong)
        } else if self.started && rec.start_ns < self.swept_to {
            Some(LossReason::Late)
        } else {
            None
        }
    }

    /// Books what `rec` books in the window of its start (kernel launches, warp instructions,
    /// operation counts, copied and set bytes) and counts it in `counts`; the cell of its
    /// start is made for every record.
    fn book_at_start(
        &mut self,
        rec: &ActivityRecord,
        key: u32,
        window: WindowSize,
        counts: &mut RecordCounts,
    ) -> Arrival {
        let mut arrival = Arrival::default();
        let w0 = window.start_of(rec.start_ns);
        let start_cell = self.cells.at(&self.budget, &mut self.fault, w0, window);
        let fault = &mut self.fault;
        let slots = &mut self.slots;
        let mut add = |cell: &mut Cell, m: MeterKind, v: u128| {
            let slot = slots.int(key, m);
            add_checked(cell.entry(slot, slots), v, fault, m, w0);
        };
        match &rec.work {
            Work::Kernel(k) => {
                counts.kernel += 1;
                self.kernels += 1;
                add(start_cell, MeterKind::KernelLaunches, 1);
                arrival.flags |= KERNEL;
                if let Some(n) = k.warp_instructions {
                    self.kernels_with_instructions += 1;
                    arrival.flags |= WITH_INSTRUCTIONS;
                    arrival.instructions = n;
                    add(start_cell, MeterKind::WarpInstructions, u128::from(n));
                } else {
                    self.kernels_without_instructions += 1;
                }
                let op_counts = k.op_counts().as_array();
                if k.ops.is_some() {
                    arrival.ops = match self.op_free.pop() {
                        Some(i) => {
                            self.op_slab[i as usize] = op_counts;
                            i + 1
                        }
                        None => {
                            self.op_slab.push(op_counts);
                            self.op_slab.len() as u32
                        }
                    };
                }
                for (i, (m, n)) in crate::OP_METERS.iter().zip(op_counts).enumerate() {
                    match n {
                        Some(n) => {
                            self.kernels_with_ops[i] += 1;
                            add(start_cell, *m, u128::from(n));
                        }
                        None => self.kernels_without_ops[i] += 1,
                    }
                }
            }
            Work::Memcpy { bytes, direction } => {
                counts.memcpy += 1;
                let m = match direction {
                    CopyDirection::HostToDevice => MeterKind::MemcpyHtodBytes,
                    CopyDirection::DeviceToHost => MeterKind::MemcpyDtohBytes,
                    CopyDirection::DeviceToDevice => MeterKind::MemcpyDtodBytes,
                    CopyDirection::Peer => MeterKind::MemcpyPeerBytes,
                    CopyDirection::Other => MeterKind::MemcpyOtherBytes,
                };
                add(start_cell, m, u128::from(*bytes));
            }
            Work::Memset { bytes } => {
                counts.memset += 1;
                add(start_cell, MeterKind::MemsetBytes, u128::from(*bytes));
            }
            Work::GraphLaunch => {}
        }
        arrival
    }

    /// A kernel's SMs held (its blocks, at most the `sm_count` of its partition) and resident
    /// warps per SM, or the flags that say they are unknown.
    fn kernel_residency(&mut self, k: &KernelLaunch, sm_count: Option<u32>, a: &mut Arrival) {
        match (sm_count, k.blocks()) {
            (Some(n), Some(blocks)) => a.held = blocks.min(u64::from(n)) as u32,
            (_, None) => {
                self.kernels_without_grid += 1;
                a.flags |= WITHOUT_GRID;
            }
            (None, Some(_)) => {}
        }
        match self.occupancy.resident_warps(&self.info, k, a.held) {
            Some(w) => a.warps = w,
            None => {
                self.kernels_without_occupancy += 1;
                a.flags |= WITHOUT_OCCUPANCY;
            }
        }
    }

    /// `kernel_ns`: the kernel's time, split at window edges.
    fn book_kernel_ns(&mut self, rec: &ActivityRecord, key: u32, window: WindowSize) {
        let mut t = rec.start_ns;
        while t < rec.end_ns {
            let w = window.start_of(t);
            let edge = w.saturating_add(window.ns()).min(rec.end_ns);
            let slot = self.slots.int(key, MeterKind::KernelNs);
            let q = self
                .cells
                .at(&self.budget, &mut self.fault, w, window)
                .entry(slot, &mut self.slots);
            add_checked(
                q,
                u128::from(edge - t),
                &mut self.fault,
                MeterKind::KernelNs,
                w,
            );
            t = edge;
        }
    }
}
