//! A stream of CUPTI activity buffers, metered one by one as CUPTI completes them: the node
//! agent's hot path (the C ABI's `gm_meter_ingest_cupti_buffer`).
//!
//! A whole source (`gpumeter_recording::meter_buffer`, `gpumeter_recording::meter_gmr`) is joined over all its
//! records before the meter sees any; a stream cannot wait for its end. A [`CuptiStream`]
//! keeps the facts that join records across buffers (API records' process ids and
//! EXTERNAL_CORRELATION external ids by correlation id, DEVICE and CONTEXT records, green
//! contexts) and hands each buffer's records to the meter at once, sorted by start; the
//! meter's reordering horizon absorbs the disorder between buffers.
//!
//! * **Joins** see the records of the buffer itself and of the buffers before it. CUPTI writes
//!   a launch's API record when the call returns, before its kernel completes, and an
//!   EXTERNAL_CORRELATION record before the API record; a kernel whose API record comes in a
//!   *later* buffer is metered without that process id or external id (attributed to the
//!   stream's tenant, else `unattributed`). INSTRUCTION_EXECUTION counts join kernels of the
//!   same buffer or a later one; each count is used once. The join tables keep the last
//!   [`JOIN_WINDOW`] correlation ids.
//! * **Devices** are keyed as in a whole source: `GPU-<uuid>` from a DEVICE record or from a
//!   description the agent registered ([`CuptiStream::register_device`]), else
//!   `<first 16 hex digits of the stream's instance id>#<device id>` with nothing known
//!   ([`gpumeter_core::source_label`]; two streams never share such a key). A description that arrives after the
//!   device's first record fills what is unknown but keeps the key.
//! * **Identity**: the stream is one source of the report, format `cupti-stream`, whose
//!   `sha256` is the stream's instance id ([`CuptiStream::sha256`]: SHA-256 of its name, the
//!   wall clock, the process id and a counter when it was made), the same in every report of
//!   the stream — snapshots and drained pieces alike — and never another stream's. So the
//!   credit bank, which bills each (source, window) once, never bills a window of a stream
//!   twice through two reports (two snapshots, or a snapshot and a drain), and the merge of a
//!   stream's reports accepts pieces with disjoint windows and refuses overlapping ones. A
//!   stream has no file whose bytes could be its identity; its buffers are gone when a report
//!   is built. The same buffer given twice within the reordering horizon is booked once: its
//!   records are duplicates (loss `duplicate`), never billed twice.
//! * **Loss**: dropped-record deltas ([`CuptiStream::report_dropped`]), kernels with fields
//!   that cannot be represented (`invalid_field`), and everything the meter counts.
//! * **Two steps**: [`CuptiStream::prepare`] decodes a buffer without the meter
//!   (so threads can decode side by side), [`CuptiStream::apply`] books it; an error in
//!   `prepare` leaves the meter and the stream untouched.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gpumeter_core::{
    ActivityRecord, DeviceInfo, DeviceSlot, LossReason, MemoryEvent, MemoryOp, Meter, MeterError,
    PartitionId, SourceInfo, UsageReport, Work,
};
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};

use crate::columns::BufferColumns;
use crate::corrmap::CorrelationMap;
use crate::decode::{decode, DecodeError, Decoded};
use crate::join::{assign_instructions, device_info};
use crate::join::{convert, Converted, InvalidField, Joins};
use crate::layout::ApiVersion;

/// Correlation ids the join tables keep: when a table holds more, ids further than this below
/// the latest one are forgotten (CUPTI numbers correlation ids upwards per process).
pub const JOIN_WINDOW: u32 = 1 << 20;

pub use gpumeter_core::{STREAM_FORMAT, STREAM_SNAPSHOT_FORMAT};

/// A stream's instance id: SHA-256 of its name, the wall clock, the process id and a
/// per-process counter. Two streams — on two nodes, or one agent restarted — never share it,
/// so their sources and their devices without a UUID never collide in a merge.
fn instance_id(name: &str) -> [u8; 32] {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STREAMS: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([0]);
    h.update(now.to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(STREAMS.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.finalize().into()
}

/// Pushes the end of process `pid` at `t` on one device.
fn push_exit(meter: &mut Meter, slot: DeviceSlot, pid: u32, t: u64) {
    let mut exit = MemoryEvent::new(slot, t, 0, 0, MemoryOp::ProcessExit);
    exit.process_id = Some(pid);
    meter.push_memory(exit);
}

mod columnar;
#[cfg(test)]
mod tests;

/// A buffer decoded, not yet booked ([`CuptiStream::prepare`]).
#[derive(Debug)]
pub struct PreparedBuffer(Prepared);

/// How a prepared buffer was decoded.
#[derive(Debug)]
enum Prepared {
    /// Into columns: every record is of a kind with columns (`columnar.rs`).
    Columns {
        cols: Box<BufferColumns>,
        records: usize,
    },
    /// Into typed records: it holds a kind without columns.
    Typed(Decoded),
}

impl PreparedBuffer {
    /// Records the buffer holds (all kinds, skipped ones included).
    pub fn records(&self) -> usize {
        match &self.0 {
            Prepared::Columns { records, .. } => *records,
            Prepared::Typed(d) => d.records.len(),
        }
    }
}

/// What booking one buffer did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferSummary {
    /// Work records handed to the meter (kernels, copies, memsets, graph launches), including
    /// those the meter counts as loss (late, duplicate, …).
    pub work_records: u64,
    /// Device-memory events handed to the meter.
    pub memory_events: u64,
    /// Records counted as skipped (not work).
    pub skipped: u64,
    /// Kernels lost with a field that cannot be represented (`invalid_field`).
    pub invalid: u64,
}

/// A device description refused by [`CuptiStream::register_device`]: its UUID is another
/// device's. One UUID is one device: the meter keys devices by UUID, so two CUPTI device ids
/// with one UUID would be metered as one device, and one's work would be lost against the
/// other's (overlapping kernels of two GPUs on one device's concurrency limit).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "device {id}: UUID {key} is device {other}'s already (one UUID is one device; a second \
     device with it would be metered as the first)"
)]
pub struct DuplicateUuid {
    /// The CUPTI device id described.
    pub id: u32,
    /// The device id that has the UUID.
    pub other: u32,
    /// The UUID, as a device key (`GPU-…`, `MIG-…`).
    pub key: String,
}

/// The join and device state of a stream of CUPTI activity buffers feeding one [`Meter`].
#[derive(Debug)]
pub struct CuptiStream {
    name: String,
    /// The first 16 hex digits of the instance id: the label of device keys without a UUID,
    /// so that two streams (two nodes) never share a device they cannot tell apart.
    key_label: String,
    api: ApiVersion,
    /// The instance id ([`instance_id`]).
    instance: [u8; 32],
    buffers: u64,
    announced: bool,
    joins: Joins,
    latest_correlation: u32,
    /// Device id → the meter's slot.
    slots: FxHashMap<u32, DeviceSlot>,
    /// Device ids whose DEVICE record has been given to the meter.
    described: BTreeSet<u32>,
    /// Descriptions the agent registered, by device id.
    registered: FxHashMap<u32, DeviceInfo>,
    /// (device id, context id) → the meter's partition of a green context.
    partitions: FxHashMap<(u32, u32), PartitionId>,
    /// Fields of invalid kernels already named in a warning.
    warned_fields: BTreeSet<&'static str>,
    /// INSTRUCTION_EXECUTION records were seen: the run is instrumented.
    instrumented: bool,
    /// Correlation ids of the kernels booked so far (the last [`JOIN_WINDOW`] of them): an
    /// INSTRUCTION_EXECUTION count for one of them came after its kernel.
    booked_kernels: CorrelationMap<()>,
    /// Processes that ended: pid → when. Devices placed later get the exits too (an
    /// allocation of an ended process is closed wherever it shows up).
    exits: BTreeMap<u32, u64>,
    /// The columns [`CuptiStream::ingest`] decodes into, kept from buffer to buffer (their
    /// capacity: no allocation per record).
    scratch: Box<BufferColumns>,
    /// The work rows of a buffer by start, kept likewise (`columnar.rs`).
    order: Vec<(u64, u64)>,
}

impl CuptiStream {
    /// A stream named `name` (the source name in the report, and the label of device keys
    /// without a UUID) of buffers laid out by `api` (the producer's CUPTI API version).
    pub fn new(name: &str, api: ApiVersion) -> Self {
        let instance = instance_id(name);
        CuptiStream {
            name: name.to_string(),
            api,
            instance,
            key_label: gpumeter_core::source_label(&hex::encode(instance)),
            buffers: 0,
            announced: false,
            joins: Joins::default(),
            latest_correlation: 0,
            slots: FxHashMap::default(),
            described: BTreeSet::new(),
            registered: FxHashMap::default(),
            partitions: FxHashMap::default(),
            warned_fields: BTreeSet::new(),
            instrumented: false,
            booked_kernels: CorrelationMap::default(),
            exits: BTreeMap::new(),
            scratch: Box::default(),
            order: Vec::new(),
        }
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The layouts buffers are decoded with.
    pub fn api(&self) -> ApiVersion {
        self.api
    }

    /// Buffers applied so far.
    pub fn buffers(&self) -> u64 {
        self.buffers
    }

    /// The stream's identity, lowercase hex: its instance id (module docs), the `sha256` of
    /// its source in every report.
    pub fn sha256(&self) -> String {
        hex::encode(self.instance)
    }

    /// Announces the stream as a source of `meter` (once; every call that books something
    /// does it first).
    pub fn seal(&mut self, meter: &mut Meter) {
        if !self.announced {
            self.announced = true;
            meter.begin_source(SourceInfo {
                name: self.name.clone(),
                format: STREAM_FORMAT.to_string(),
                sha256: self.sha256(),
            });
        }
    }

    /// A snapshot of the meter ([`Meter::snapshot`]) whose stream source says so (format
    /// [`STREAM_SNAPSHOT_FORMAT`]): never merged with another report of the stream, since its
    /// windows may be handed over again.
    ///
    /// # Errors
    /// As [`Meter::snapshot`].
    pub fn snapshot(&mut self, meter: &mut Meter) -> Result<UsageReport, MeterError> {
        self.seal(meter);
        meter.set_source_format(&self.name, STREAM_SNAPSHOT_FORMAT);
        let report = meter.snapshot();
        meter.set_source_format(&self.name, STREAM_FORMAT);
        self.mark_instrumented(report?)
    }

    /// Drains the meter ([`Meter::drain`]): the windows that end at or before `before_ns`,
    /// as a report whose stream source has format [`STREAM_FORMAT`] (a piece that merges with
    /// the stream's other drained pieces). The drain hands the meter's warnings over, so the
    /// next period's reports say again what applies to them (invalid fields). Processes that
    /// ended before the drained edge are forgotten (their later events are late anyway).
    ///
    /// # Errors
    /// As [`Meter::drain`].
    pub fn drain(&mut self, meter: &mut Meter, before_ns: u64) -> Result<UsageReport, MeterError> {
        self.seal(meter);
        let report = meter.drain(before_ns)?;
        self.warned_fields.clear();
        let edge = meter.watermark_ns();
        self.exits.retain(|_, t| *t >= edge);
        self.mark_instrumented(report)
    }

    /// Once the stream has seen INSTRUCTION_EXECUTION records, every report with usage says
    /// that its time meters come from an instrumented run,
    /// whichever report the records' buffers went to (a drain can hand over windows whose
    /// counts came in an earlier period, or keep them for a later one).
    fn mark_instrumented(&self, mut report: UsageReport) -> Result<UsageReport, MeterError> {
        if self.instrumented && !report.usage.is_empty() {
            report.warnings.push(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::InstrumentedRun,
                format!(
                    "{}: instrumented run (instruction-level collection: INSTRUCTION_EXECUTION \
                 records): {}",
                    self.name,
                    crate::join::instrumented_meters(false)
                ),
            ));
            report.seal()?;
        }
        Ok(report)
    }

    /// Decodes one buffer (`bytes`: the `validSize` bytes CUPTI completed; any
    /// alignment; empty is an empty buffer). Needs no meter: threads may prepare side by side.
    /// A buffer of kernels, copies, memsets, API and EXTERNAL_CORRELATION records only is
    /// decoded into columns (no typed record: `stream/columnar.rs`); one holding any other
    /// kind, into typed records ([`CuptiStream::prepare_typed`]).
    ///
    /// # Errors
    /// [`DecodeError`] (with the byte offset) when the buffer does not decode; nothing is
    /// booked.
    pub fn prepare(api: ApiVersion, bytes: &[u8]) -> Result<PreparedBuffer, DecodeError> {
        let mut cols = Box::<BufferColumns>::default();
        let counts = crate::columns::decode_buffer_columns(bytes, api, &mut cols)?;
        if columnar::columns_suffice(&counts) {
            let records = counts.records() as usize;
            return Ok(PreparedBuffer(Prepared::Columns { cols, records }));
        }
        Self::prepare_typed(api, bytes)
    }

    /// [`CuptiStream::prepare`] on the typed path whatever the buffer holds: every record
    /// decoded ([`decode`]), joined and converted one by one. It books what the columnar
    /// path books (the tests compare the two), at several times its cost; for comparisons.
    ///
    /// # Errors
    /// As [`CuptiStream::prepare`].
    pub fn prepare_typed(api: ApiVersion, bytes: &[u8]) -> Result<PreparedBuffer, DecodeError> {
        Ok(PreparedBuffer(Prepared::Typed(decode(bytes, api)?)))
    }

    /// [`CuptiStream::prepare`] then [`CuptiStream::apply`], decoding into columns the
    /// stream keeps from buffer to buffer.
    ///
    /// # Errors
    /// As [`CuptiStream::prepare`]; the meter is then untouched.
    pub fn ingest(
        &mut self,
        meter: &mut Meter,
        bytes: &[u8],
    ) -> Result<BufferSummary, DecodeError> {
        let counts = crate::columns::decode_buffer_columns(bytes, self.api, &mut self.scratch)?;
        if !columnar::columns_suffice(&counts) {
            let decoded = decode(bytes, self.api)?;
            return Ok(self.apply(meter, PreparedBuffer(Prepared::Typed(decoded))));
        }
        let cols = std::mem::take(&mut self.scratch);
        let mut order = std::mem::take(&mut self.order);
        let summary = self.apply_columns(meter, &cols, &mut order);
        self.scratch = cols;
        self.order = order;
        Ok(summary)
    }

    /// DEVICE records of devices already placed fill what is unknown of them.
    fn fill_described(&mut self, meter: &mut Meter) {
        let newly: Vec<u32> = self
            .joins
            .device_recs
            .keys()
            .copied()
            .filter(|id| !self.described.contains(id))
            .collect();
        for id in newly {
            self.described.insert(id);
            if let Some(&slot) = self.slots.get(&id) {
                let info = self.info(id);
                meter.fill_device(slot, &info);
            }
        }
    }

    /// Registers the green contexts of placed devices (before their records are pushed).
    fn register_green(&mut self, meter: &mut Meter) {
        let green: Vec<((u32, u32), u32)> = self
            .joins
            .green
            .iter()
            .filter(|(k, _)| !self.partitions.contains_key(k) && self.slots.contains_key(&k.0))
            .map(|(&k, &v)| (k, v))
            .collect();
        for ((device, context), sms) in green {
            if let Some(p) = self
                .slots
                .get(&device)
                .and_then(|&slot| meter.register_partition(slot, sms))
            {
                self.partitions.insert((device, context), p);
            }
        }
    }

    /// Gives kernels their INSTRUCTION_EXECUTION counts ([`assign_instructions`]), each count
    /// used once; says when counts came after their kernels or pass 64 bits.
    fn give_instructions(&mut self, meter: &mut Meter, recs: &mut [ActivityRecord]) {
        self.instrumented = true;
        let (_, overflowed) =
            assign_instructions(recs, &FxHashMap::default(), &self.joins.instructions_of);
        // Each count is used once.
        for r in recs.iter() {
            if matches!(r.work, Work::Kernel(_)) {
                self.joins.instructions_of.remove(&r.correlation_id);
            }
        }
        // A count for a kernel booked from an earlier buffer came after its kernel: it
        // can no longer be metered. Said, never dropped silently. (A count whose kernel
        // has not come yet waits for it.)
        let late: Vec<u32> = self
            .joins
            .instructions_of
            .keys()
            .copied()
            .filter(|c| self.booked_kernels.contains_key(c))
            .collect();
        if !late.is_empty() {
            for c in &late {
                self.joins.instructions_of.remove(c);
            }
            meter.warn(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::LateInstructionCounts,
                format!(
                    "{}: {} INSTRUCTION_EXECUTION counts (launch correlation ids from {}) came \
                 in a buffer after their kernels' and were not metered: those kernels have \
                 no warp-instruction count",
                    self.name,
                    late.len(),
                    late.iter().min().copied().unwrap_or(0)
                ),
            ));
        }
        if overflowed > 0 {
            meter.warn(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::InstructionCountOverflow,
                format!(
                    "{}: the instruction counts of {overflowed} launch calls pass 64 bits: their \
                 kernels have no count, so warp_instructions is not meterable on their \
                 device (never a clamped count)",
                    self.name
                ),
            ));
        }
    }

    /// Books a prepared buffer: learns its joins, places its records on devices and hands
    /// them to the meter sorted by start.
    pub fn apply(&mut self, meter: &mut Meter, buffer: PreparedBuffer) -> BufferSummary {
        let decoded = match buffer.0 {
            Prepared::Typed(d) => d,
            Prepared::Columns { cols, .. } => {
                let mut order = std::mem::take(&mut self.order);
                let summary = self.apply_columns(meter, &cols, &mut order);
                self.order = order;
                return summary;
            }
        };
        self.seal(meter);
        self.buffers += 1;
        let names: FxHashMap<u64, Arc<str>> = FxHashMap::default();
        self.joins.learn(&decoded.records, &names);
        self.note_correlations(&decoded);
        self.fill_described(meter);
        let mut summary = BufferSummary::default();
        let mut skipped: BTreeMap<&'static str, u64> = BTreeMap::new();
        for (cat, n) in &decoded.skipped {
            *skipped.entry(cat).or_insert(0) += n;
        }
        let mut records = Vec::new();
        let mut memory = Vec::new();
        let joins = self.joins.joins_ref(None);
        let mut placed: Vec<(u32, Converted)> = Vec::new();
        for r in &decoded.records {
            match convert(r, &names, &joins) {
                Converted::Consumed => {}
                Converted::Skipped(cat) => *skipped.entry(cat).or_insert(0) += 1,
                c @ Converted::Work { device_id, .. } => placed.push((device_id, c)),
                c @ Converted::Memory { device_id, .. } => placed.push((device_id, c)),
                c @ Converted::Invalid(InvalidField { device_id, .. }) => {
                    placed.push((device_id, c))
                }
            }
        }
        for (device_id, c) in placed {
            let slot = self.slot(meter, device_id);
            match c {
                Converted::Work { mut rec, .. } => {
                    rec.device = slot;
                    records.push((device_id, rec));
                }
                Converted::Memory { mut ev, .. } => {
                    ev.device = slot;
                    memory.push(ev);
                }
                Converted::Invalid(InvalidField { field, value, .. }) => {
                    summary.invalid += 1;
                    self.book_invalid(meter, slot, field, value);
                }
                Converted::Skipped(_) | Converted::Consumed => {}
            }
        }
        self.register_green(meter);
        let mut recs: Vec<_> = records
            .into_iter()
            .map(|(device_id, mut rec)| {
                rec.partition = self.partitions.get(&(device_id, rec.context_id)).copied();
                rec
            })
            .collect();
        recs.sort_by_key(|r| r.start_ns);
        if !self.joins.instructions_of.is_empty() {
            self.give_instructions(meter, &mut recs);
        }
        for r in &recs {
            if matches!(r.work, Work::Kernel(_)) && r.correlation_id != 0 {
                self.booked_kernels.entry_or_insert(r.correlation_id, ());
            }
        }
        summary.work_records = recs.len() as u64;
        summary.memory_events = memory.len() as u64;
        summary.skipped = skipped.values().sum();
        push_in_order(meter, recs, memory);
        for (cat, n) in skipped {
            meter.record_skipped(cat, n);
        }
        summary
    }

    /// Registers a device's description for buffers without a DEVICE record (or to add what
    /// they lack: name, UUID). `info.id` is CUPTI's device id; `info.key` is replaced by the
    /// stream's key for it (`GPU-<uuid>` when `info.uuid` is set, in one spelling whatever the
    /// case or prefix of the given one, [`DeviceInfo::uuid_key`]; else
    /// `<16 hex digits of the instance id>#<id>`). The device is placed when its first record
    /// (or dropped count) arrives, from its DEVICE record if one has been seen — which wins
    /// where both know a field, the key included unless the record has no UUID — filled from
    /// this description. Once the device is placed, a description (a later call, or a DEVICE record
    /// in a later buffer) only fills what is still unknown; a later call replaces what the
    /// stream remembers for devices not yet placed.
    ///
    /// # Errors
    /// [`DuplicateUuid`] when another device id of the stream (described, placed, or named by
    /// a DEVICE record) has the same UUID, in any spelling; nothing is registered.
    pub fn register_device(
        &mut self,
        meter: &mut Meter,
        mut info: DeviceInfo,
    ) -> Result<(), DuplicateUuid> {
        info.key = match &info.uuid {
            Some(u) => DeviceInfo::uuid_key(u),
            None => DeviceInfo::source_key(&self.key_label, info.id),
        };
        info.uuid = info.uuid.as_deref().map(DeviceInfo::uuid_key);
        let id = info.id;
        if info.uuid.is_some() {
            if let Some(other) = self.device_keyed(&info.key, id) {
                return Err(DuplicateUuid {
                    id,
                    other,
                    key: info.key,
                });
            }
        }
        self.seal(meter);
        if let Some(&slot) = self.slots.get(&id) {
            meter.fill_device(slot, &info);
        }
        self.registered.insert(id, info);
        Ok(())
    }

    /// A device id other than `except` that the stream knows (described, placed, or named by
    /// a DEVICE record) and keys `key`.
    fn device_keyed(&self, key: &str, except: u32) -> Option<u32> {
        let ids: BTreeSet<u32> = self
            .registered
            .keys()
            .chain(self.slots.keys())
            .chain(self.joins.device_recs.keys())
            .copied()
            .filter(|&id| id != except)
            .collect();
        ids.into_iter().find(|&id| self.info(id).key == key)
    }

    /// Books `count` records CUPTI dropped (a delta, `cuptiActivityGetNumDroppedRecords`) on
    /// device `device_id` as loss `dropped`; on the stream as a whole (a loss with no device)
    /// when the device is `None` or one the stream has never heard of.
    pub fn report_dropped(&mut self, meter: &mut Meter, device_id: Option<u32>, count: u64) {
        self.seal(meter);
        if count == 0 {
            return;
        }
        let known = device_id.filter(|id| {
            self.slots.contains_key(id)
                || self.registered.contains_key(id)
                || self.joins.device_recs.contains_key(id)
        });
        match known {
            Some(id) => {
                let slot = self.slot(meter, id);
                meter.record_loss(slot, LossReason::Dropped, count);
            }
            None => meter.record_source_loss(&self.name, LossReason::Dropped, count, false),
        }
    }

    /// A process ended at `timestamp_ns`: the driver frees its device memory, so every
    /// allocation it still holds on any of the stream's devices ends there (memory is
    /// billed for as long as it is held, and no longer).
    ///
    /// A device first seen after the exit gets it too, when it is placed; the stream
    /// remembers the exit until a drain passes it.
    pub fn process_exited(&mut self, meter: &mut Meter, pid: u32, timestamp_ns: u64) {
        self.seal(meter);
        self.exits.insert(pid, timestamp_ns);
        let mut slots: Vec<DeviceSlot> = self.slots.values().copied().collect();
        slots.sort();
        for slot in slots {
            push_exit(meter, slot, pid, timestamp_ns);
        }
    }

    /// Forgets correlation ids far below the latest one when the tables grow past
    /// [`JOIN_WINDOW`].
    fn note_correlations(&mut self, decoded: &Decoded) {
        use crate::decode::Record;
        let ids = decoded.records.iter().filter_map(|r| match &r.record {
            Record::Api(a) => Some(a.correlation_id),
            Record::ExternalCorrelation(e) => Some(e.correlation_id),
            _ => None,
        });
        self.note_correlation_ids(ids);
    }

    /// [`CuptiStream::note_correlations`] of a buffer's API and EXTERNAL_CORRELATION
    /// correlation ids, `ids` in any order: the latest id becomes the one furthest ahead of it
    /// within half the id space (CUPTI numbers correlation ids upwards; one behind, or further
    /// ahead than half the space, is older after a wrap), which no order of a buffer's records
    /// changes.
    fn note_correlation_ids(&mut self, ids: impl Iterator<Item = u32>) {
        let from = self.latest_correlation;
        let ahead = ids
            .map(|c| c.wrapping_sub(from))
            .filter(|&d| d < u32::MAX / 2)
            .max();
        if let Some(d) = ahead {
            self.latest_correlation = from.wrapping_add(d);
        }
        let latest = self.latest_correlation;
        let keep = |c: &u32| latest.wrapping_sub(*c) < JOIN_WINDOW;
        if self.joins.pid_of.len() > JOIN_WINDOW as usize {
            self.joins.pid_of.retain(|c, _| keep(c));
        }
        if self.joins.ext_of.len() > JOIN_WINDOW as usize {
            self.joins.ext_of.retain(|c, _| keep(c));
        }
        if self.joins.instructions_of.len() > JOIN_WINDOW as usize {
            self.joins.instructions_of.retain(|c, _| keep(c));
        }
        if self.booked_kernels.len() > JOIN_WINDOW as usize {
            self.booked_kernels.retain(|c, _| keep(c));
        }
    }

    /// The meter's slot of device `id`, registering it on first sight.
    fn slot(&mut self, meter: &mut Meter, id: u32) -> DeviceSlot {
        if let Some(&s) = self.slots.get(&id) {
            return s;
        }
        let info = self.info(id);
        let s = meter.register_device(info);
        self.slots.insert(id, s);
        for (&pid, &t) in &self.exits {
            push_exit(meter, s, pid, t);
        }
        s
    }

    /// What the stream knows of device `id`: its DEVICE record, filled from the agent's
    /// description (whose UUID gives the key when the record has none).
    fn info(&self, id: u32) -> DeviceInfo {
        let from_record = self
            .joins
            .device_recs
            .get(&id)
            .map(|(d, name)| device_info(&self.key_label, d, name.as_deref()));
        match (from_record, self.registered.get(&id)) {
            (Some(mut r), Some(i)) => {
                if r.uuid.is_none() && i.uuid.is_some() {
                    r.key.clone_from(&i.key);
                }
                r.fill_from(i);
                r
            }
            (Some(r), None) => r,
            (None, Some(i)) => i.clone(),
            (None, None) => DeviceInfo::bare(DeviceInfo::source_key(&self.key_label, id), id),
        }
    }
}

/// Pushes a buffer's work records (sorted by start) and memory events as one stream in time
/// order.
fn push_in_order(meter: &mut Meter, recs: Vec<ActivityRecord>, mut memory: Vec<MemoryEvent>) {
    // One stream in time order, as `push_batches` pushes a file's (equal times: work,
    // then releases, then allocations): an allocation made long before the buffer's
    // first kernel must reach the meter before that kernel moves the sweep past it.
    let class = |m: &MemoryEvent| u8::from(m.op == MemoryOp::Allocation) + 1;
    memory.sort_by_key(|m| (m.timestamp_ns, class(m)));
    let mut memory = memory.into_iter().peekable();
    for rec in recs {
        while let Some(m) = memory.next_if(|m| m.timestamp_ns < rec.start_ns) {
            meter.push_memory(m);
        }
        meter.push(rec);
    }
    for m in memory {
        meter.push_memory(m);
    }
}
