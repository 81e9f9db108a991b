//! The columnar path of a [`CuptiStream`] (issue 34, "batch, columnar metering of a buffer"):
//! a buffer whose records are all of the kinds with columns ([`BufferColumns`]: kernels,
//! copies, memsets, API records, EXTERNAL_CORRELATION) is booked straight from its columns,
//! with no typed record built, moved or collected. Any other kind in the buffer (DEVICE,
//! CONTEXT, MEMORY2, GRAPH_TRACE, INSTRUCTION_EXECUTION, markers, …) sends the whole buffer to
//! the typed path ([`CuptiStream::apply`] of a [`decode`](crate::decode())d buffer), so the two
//! never split one buffer's joins.
//!
//! Both paths book the same: the joins are learned by the same rules
//! ([`Joins::learn_api`], [`Joins::learn_external`]), kernels are checked by the same
//! [`launch_of`], and the work records reach the meter sorted by start. Among records of one
//! start the typed path keeps buffer order; this path keeps each family's buffer order, the
//! families interleaved by row index: the meter's result does not depend on the order across
//! families (its pending records are ordered by what they are, never by arrival). The tests of `stream/tests.rs` compare the two paths'
//! reports on every committed buffer and on generated ones.

use gpumeter_core::{ActivityRecord, DeviceSlot, LossReason, Meter, Work};

use super::{BufferSummary, CuptiStream};
use crate::columns::{BufferColumns, BufferCounts};
use crate::join::{direction, join_work, launch_of, INVALID_KERNEL_FIELD};
use crate::kind::ActivityKind;

/// The family of a work row in [`BookOrder`].
const KERNEL: u64 = 0;
const COPY: u64 = 1;
const SET: u64 = 2;

/// Whether a buffer whose walk counted `counts` can be booked from its columns: it holds no
/// record of a kind without columns.
pub(super) fn columns_suffice(counts: &BufferCounts) -> bool {
    counts.skipped.total() == 0
}

/// The last device id placed and its slot: consecutive records are mostly on one device.
#[derive(Clone, Copy)]
struct LastSlot(Option<(u32, DeviceSlot)>);

impl CuptiStream {
    /// The meter's slot of device `id`, through `last`.
    fn slot_cached(&mut self, meter: &mut Meter, last: &mut LastSlot, id: u32) -> DeviceSlot {
        match last.0 {
            Some((d, s)) if d == id => s,
            _ => {
                let s = self.slot(meter, id);
                last.0 = Some((id, s));
                s
            }
        }
    }

    /// Books a buffer from its columns (`counts`: its walk's counts; [`columns_suffice`]
    /// holds): learns its joins, places its devices, books its invalid kernels as loss
    /// `invalid_field`, and hands its work records to the meter sorted by start.
    pub(super) fn apply_columns(
        &mut self,
        meter: &mut Meter,
        cols: &BufferColumns,
        order: &mut Vec<(u64, u64)>,
    ) -> BufferSummary {
        self.seal(meter);
        self.buffers += 1;
        for (&c, &p) in cols.api.correlation_id.iter().zip(&cols.api.process_id) {
            self.joins.learn_api(c, p);
        }
        let ext = &cols.external;
        for i in 0..ext.len() {
            self.joins.learn_external(
                ext.correlation_id[i],
                ext.external_kind[i],
                ext.external_id[i],
            );
        }
        let ids = cols.api.correlation_id.iter();
        self.note_correlation_ids(ids.chain(&ext.correlation_id).copied());
        self.fill_described(meter);
        let mut summary = BufferSummary::default();
        // Devices are placed (and invalid kernels booked) before green contexts are
        // registered and any record is pushed, as on the typed path.
        let mut last = LastSlot(None);
        order.clear();
        let k = &cols.kernels;
        for i in 0..k.len() {
            let slot = self.slot_cached(meter, &mut last, k.device_id[i]);
            let launch = launch_of(
                k.grid[i],
                k.block[i],
                k.registers_per_thread[i],
                k.static_shared_memory_bytes[i],
                k.dynamic_shared_memory_bytes[i],
            );
            match launch {
                Ok(_) => order.push((k.start_ns[i], (i as u64) << 2 | KERNEL)),
                Err((field, value)) => {
                    summary.invalid += 1;
                    self.book_invalid(meter, slot, field, value);
                }
            }
        }
        for (i, (&d, &s)) in cols
            .copies
            .device_id
            .iter()
            .zip(&cols.copies.start_ns)
            .enumerate()
        {
            self.slot_cached(meter, &mut last, d);
            order.push((s, (i as u64) << 2 | COPY));
        }
        for (i, (&d, &s)) in cols
            .sets
            .device_id
            .iter()
            .zip(&cols.sets.start_ns)
            .enumerate()
        {
            self.slot_cached(meter, &mut last, d);
            order.push((s, (i as u64) << 2 | SET));
        }
        self.register_green(meter);
        order.sort_unstable();
        summary.work_records = order.len() as u64;
        if self.joins.instructions_of.is_empty() {
            for &(_, tag) in order.iter() {
                let rec = self.work_record(meter, &mut last, cols, tag);
                if matches!(rec.work, Work::Kernel(_)) && rec.correlation_id != 0 {
                    self.booked_kernels.entry_or_insert(rec.correlation_id, ());
                }
                meter.push(rec);
            }
        } else {
            // INSTRUCTION_EXECUTION counts wait for their kernels: the typed path's code
            // gives them over the buffer's records.
            let mut recs: Vec<ActivityRecord> = order
                .iter()
                .map(|&(_, tag)| self.work_record(meter, &mut last, cols, tag))
                .collect();
            self.give_instructions(meter, &mut recs);
            for r in recs {
                if matches!(r.work, Work::Kernel(_)) && r.correlation_id != 0 {
                    self.booked_kernels.entry_or_insert(r.correlation_id, ());
                }
                meter.push(r);
            }
        }
        summary
    }

    /// Books one kernel with a field that cannot be represented: loss `invalid_field` on its
    /// device, and a warning naming the field once per report.
    pub(super) fn book_invalid(
        &mut self,
        meter: &mut Meter,
        slot: DeviceSlot,
        field: &'static str,
        value: i64,
    ) {
        meter.record_loss(slot, LossReason::InvalidField, 1);
        if self.warned_fields.insert(field) {
            meter.warn(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::InvalidField,
                format!(
                    "{}: a kernel record's {field} is {value}: {INVALID_KERNEL_FIELD}; such \
                     records are lost as invalid_field (counted in `loss`)",
                    self.name
                ),
            ));
        }
    }

    /// The work record of row `tag` (row index << 2 | family) of `cols`, placed and joined
    /// as [`crate::join::convert`] would make it from the typed record.
    fn work_record(
        &mut self,
        meter: &mut Meter,
        last: &mut LastSlot,
        cols: &BufferColumns,
        tag: u64,
    ) -> ActivityRecord {
        let i = (tag >> 2) as usize;
        let (device_id, start, end, ctx, stream, corr, node, work) = match tag & 3 {
            KERNEL => {
                let k = &cols.kernels;
                // Checked when the row was ordered: invalid rows are never ordered.
                let launch = launch_of(
                    k.grid[i],
                    k.block[i],
                    k.registers_per_thread[i],
                    k.static_shared_memory_bytes[i],
                    k.dynamic_shared_memory_bytes[i],
                )
                .unwrap_or_default();
                (
                    k.device_id[i],
                    k.start_ns[i],
                    k.end_ns[i],
                    k.context_id[i],
                    k.stream_id[i],
                    k.correlation_id[i],
                    k.graph_node_id[i],
                    Work::Kernel(launch),
                )
            }
            COPY => {
                let c = &cols.copies;
                let dir = if c.kind[i] == ActivityKind::MEMCPY2 {
                    gpumeter_core::CopyDirection::Peer
                } else {
                    direction(c.copy_kind[i])
                };
                (
                    c.device_id[i],
                    c.start_ns[i],
                    c.end_ns[i],
                    c.context_id[i],
                    c.stream_id[i],
                    c.correlation_id[i],
                    c.graph_node_id[i],
                    Work::Memcpy {
                        bytes: c.bytes[i],
                        direction: dir,
                    },
                )
            }
            _ => {
                let s = &cols.sets;
                (
                    s.device_id[i],
                    s.start_ns[i],
                    s.end_ns[i],
                    s.context_id[i],
                    s.stream_id[i],
                    s.correlation_id[i],
                    s.graph_node_id[i],
                    Work::Memset { bytes: s.bytes[i] },
                )
            }
        };
        let slot = self.slot_cached(meter, last, device_id);
        let mut rec = ActivityRecord::new(slot, start, end, work);
        rec.context_id = ctx;
        rec.stream_id = stream;
        rec.correlation_id = corr;
        rec.graph_node_id = node;
        join_work(&mut rec, &self.joins.joins_ref(None));
        if !self.partitions.is_empty() {
            rec.partition = self.partitions.get(&(device_id, ctx)).copied();
        }
        rec
    }
}
