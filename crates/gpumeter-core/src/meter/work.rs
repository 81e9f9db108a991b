//! Work records arriving: validity, duplicates, and the meters booked at arrival (counts, bytes, `kernel_ns` split at window edges, warp instructions).

use super::*;

use std::cmp::Reverse;

use crate::record::{ActivityRecord, CopyDirection, LossReason, Work};
use crate::report::MeterKind;
use crate::time::MAX_RECORD_NS;

impl Meter {
    /// Meters one record. Invalid records (a zero timestamp, end before start, over 7 days,
    /// older than the reordering horizon, duplicates) are counted as loss and feed no meter.
    /// Records for an unregistered slot are ignored.
    pub fn push(&mut self, rec: ActivityRecord) {
        let Some(dev) = self.devices.get(rec.device.0 as usize) else {
            return;
        };
        let reason = if rec.start_ns == 0 || rec.end_ns == 0 {
            Some(LossReason::ZeroTimestamp)
        } else if rec.end_ns < rec.start_ns {
            Some(LossReason::EndBeforeStart)
        } else if rec.end_ns - rec.start_ns > MAX_RECORD_NS {
            Some(LossReason::TooLong)
        } else if dev.started && rec.start_ns < dev.swept_to {
            Some(LossReason::Late)
        } else {
            None
        };
        if let Some(r) = reason {
            self.record_loss(rec.device, r, 1);
            return;
        }
        let dup: DupKey = (rec.start_ns, Dup::Work(rec.identity()));
        let joined = rec.joined();
        let key = self.key_of(&rec);
        let window = self.config.window;
        let dev = &mut self.devices[rec.device.0 as usize];
        if !dev.first_of(dup, joined) {
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
        let mut held = 0u32;
        let mut warps = 0u32;
        let mut flags = 0u8;
        let mut instructions = 0u64;
        let mut ops = 0u32;
        let w0 = window.start_of(rec.start_ns);
        let start_cell = dev.cells.at(&dev.budget, &mut dev.fault, w0, window);
        let fault = &mut dev.fault;
        let slots = &mut dev.slots;
        let mut add = |cell: &mut Cell, m: MeterKind, v: u128| {
            let slot = slots.int(key, m);
            add_checked(cell.entry(slot, slots), v, fault, m, w0);
        };
        match &rec.work {
            Work::Kernel(k) => {
                self.counts.kernel += 1;
                dev.kernels += 1;
                add(start_cell, MeterKind::KernelLaunches, 1);
                flags |= KERNEL;
                if let Some(n) = k.warp_instructions {
                    dev.kernels_with_instructions += 1;
                    flags |= WITH_INSTRUCTIONS;
                    instructions = n;
                    add(start_cell, MeterKind::WarpInstructions, u128::from(n));
                } else {
                    dev.kernels_without_instructions += 1;
                }
                let counts = k.op_counts().as_array();
                if k.ops.is_some() {
                    ops = match dev.op_free.pop() {
                        Some(i) => {
                            dev.op_slab[i as usize] = counts;
                            i + 1
                        }
                        None => {
                            dev.op_slab.push(counts);
                            dev.op_slab.len() as u32
                        }
                    };
                }
                for (i, (m, n)) in crate::OP_METERS.iter().zip(counts).enumerate() {
                    match n {
                        Some(n) => {
                            dev.kernels_with_ops[i] += 1;
                            add(start_cell, *m, u128::from(n));
                        }
                        None => dev.kernels_without_ops[i] += 1,
                    }
                }
                match (sm_count, k.blocks()) {
                    (Some(n), Some(blocks)) => held = blocks.min(u64::from(n)) as u32,
                    (_, None) => {
                        dev.kernels_without_grid += 1;
                        flags |= WITHOUT_GRID;
                    }
                    (None, Some(_)) => {}
                }
                match dev.occupancy.resident_warps(&dev.info, k, held) {
                    Some(w) => warps = w,
                    None => {
                        dev.kernels_without_occupancy += 1;
                        flags |= WITHOUT_OCCUPANCY;
                    }
                }
                // kernel_ns: split by time at window edges.
                let mut t = rec.start_ns;
                while t < rec.end_ns {
                    let w = window.start_of(t);
                    let edge = w.saturating_add(window.ns()).min(rec.end_ns);
                    let slot = dev.slots.int(key, MeterKind::KernelNs);
                    let q = dev
                        .cells
                        .at(&dev.budget, &mut dev.fault, w, window)
                        .entry(slot, &mut dev.slots);
                    add_checked(
                        q,
                        u128::from(edge - t),
                        &mut dev.fault,
                        MeterKind::KernelNs,
                        w,
                    );
                    t = edge;
                }
            }
            Work::Memcpy { bytes, direction } => {
                self.counts.memcpy += 1;
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
                self.counts.memset += 1;
                add(start_cell, MeterKind::MemsetBytes, u128::from(*bytes));
            }
            Work::GraphLaunch => {}
        }
        self.seq += 1;
        dev.pending.push(Reverse(Pending {
            start: rec.start_ns,
            seq: self.seq,
            end: rec.end_ns,
            key,
            held,
            warps,
            part,
            flags,
            instructions,
            ops,
        }));
        dev.note_start(
            rec.start_ns,
            self.config.reorder_horizon_ns,
            window,
            &self.keys,
        );
    }
}
