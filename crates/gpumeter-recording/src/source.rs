//! Metering CUPTI sources: a raw activity buffer file (format `cupti`) or a `.gmr` recording
//! (format `gmr`), into a [`Meter`].
//!
//! Like the importers of `gpumeter-import`, a source is decoded and validated whole before the
//! meter sees any of it: an error leaves the meter untouched. Then the source is announced
//! ([`Meter::begin_source`] with its name, format and SHA-256; a source already metered is not
//! pushed again), its devices with activity are registered, dropped counts are booked as loss,
//! and its work records are pushed sorted by start.
//!
//! * **Joins** (two passes over the whole source): RUNTIME, DRIVER and INTERNAL_LAUNCH_API
//!   records give the process id of GPU records with the same `correlationId`;
//!   EXTERNAL_CORRELATION records of kinds CUSTOM0..2 give the external id (CUSTOM0 before
//!   CUSTOM1 before CUSTOM2 when several are present). In a `.gmr`, a GPU record with no API
//!   record takes the header's process id: CUPTI only records the process it runs in.
//! * **Devices**: a DEVICE record gives the key (`GPU-<uuid>`, `MIG-<uuid>` for a MIG instance),
//!   SM count, compute capability and per-SM limits; a `.gmr` header's device inventory fills
//!   what the record lacks (name, UUID, SM count). A device no DEVICE record or inventory entry
//!   names is keyed `<source name>#<deviceId>` with nothing known: its `sm_ns` is reported not
//!   meterable unless a device catalog (through [`CuptiOptions::on_device`]) supplies the SM
//!   count. Names come only from string tables (`.gmr` frames or [`CuptiOptions::strings`]),
//!   never from a pointer read from a buffer.
//! * **Work**: CONCURRENT_KERNEL and KERNEL → kernels; MEMCPY → copies by `copyKind`; MEMCPY2 →
//!   peer copies billed on the record's `deviceId`; MEMSET → memsets; GRAPH_TRACE → graph
//!   launches (`gpu_busy_ns` only). Records with a start or end of 0 are pushed as they are: the
//!   meter counts them as loss `zero_timestamp`.
//! * **Memory**: MEMORY2 allocations and releases of GPU memory ([`DEVICE_MEMORY_KINDS`]) are
//!   handed to the meter (`memory_byte_ns`) with the record's `processId` (else the API join,
//!   else the `.gmr` header's) and external id; host memory (`memory2_host`) and other
//!   operations (`memory2_other_operation`) are counted as skipped. A finished `.gmr` closes
//!   the allocations its process still held at the recording's end.
//! * **Partitions**: a CONTEXT record with `isGreenContext` and `numMultiprocessors` declares
//!   a green context of that many SMs ([`Meter::register_partition`]) for that source's
//!   records of that context (context ids are per process).
//! * **Instructions**: a `.gmr` instruction-count frame's per-function counts go to the kernels
//!   of its correlation id with those names, else Σ INSTRUCTION_EXECUTION `executed` of a
//!   correlation id to its kernels, split equally among several (`warp_instructions`).
//! * **Operations**: a `.gmr` operation-counters frame's (type 10, `gpumeter record --flops`)
//!   raw counter values of a correlation id give its kernel the FLOP meters (`flops_fp64`,
//!   `flops_fp32`, `flops_fp16`, `tensor_ops`) through [`gpumeter_core::OpCounter`]
//!   ([`assign_op_counts`]).
//! * **Several sources** ([`meter_sources`]) are validated whole first, then merged in time
//!   order.
//! * **One file as a stream**: [`crate::meter_buffer_file`] and [`crate::meter_gmr_file`] meter
//!   one raw buffer or one well-formed recording exactly as this module does, in two chunked
//!   passes over the file, without holding it or its records (issue 13).
//! * **Energy**: `.gmr` energy frames of a device the recording describes (by CUDA ordinal)
//!   are handed to the meter (`energy_mj`).
//! * **Skipped** (not work, counted by category in the report): OVERHEAD (`overhead`) and
//!   every kind the decoder steps over (`marker`, `synchronization`, …). API, DEVICE, CONTEXT,
//!   EXTERNAL_CORRELATION and INSTRUCTION_EXECUTION records are consumed by the joins, not
//!   counted.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use gpumeter_core::{
    push_batches, ActivityRecord, Batch, ComputeCapability, DeviceInfo, DeviceSlot, LossReason,
    MemoryEvent, MemoryOp, Meter, PartitionId, PmSample, SourceInfo, Work,
};
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};

use crate::gmr::{
    read_gmr, Damage, DamagedFrame, DroppedRecords, Frame, GmrDevice, GmrError, OpCounterValue,
    StringTable, TornFrame, TornReason,
};
use gpumeter_cupti::decode::{
    decode, decode_prefix, DecodeError, Decoded, DeviceRecord, LocatedRecord, MemoryOperation,
    Record, Walk,
};
use gpumeter_cupti::join::{
    assign_instructions, convert, device_info, instrumented_meters, intern_name, Converted,
    InvalidField, Joins, JoinsRef, INVALID_KERNEL_FIELD,
};
use gpumeter_cupti::kind::ActivityKind;
use gpumeter_cupti::layout::ApiVersion;

/// A source that cannot be metered. Every variant names the source (the file name given to
/// [`meter_buffer`] / [`meter_gmr`]); when one is returned the meter is untouched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CuptiSourceError {
    /// An activity buffer does not decode (or the producer's API version is not supported).
    #[error("{name}: {}{error}", match frame { Some(f) => format!("{f}: "), None => String::new() })]
    Decode {
        /// The source.
        name: String,
        /// The `.gmr` frame holding the buffer; `None` for a raw buffer file or the header.
        frame: Option<FrameRef>,
        /// What is wrong, with the byte offset inside the buffer.
        #[source]
        error: DecodeError,
    },
    /// A `.gmr` cannot be read.
    #[error("{name}: {error}")]
    Gmr {
        /// The source.
        name: String,
        /// What is wrong.
        #[source]
        error: GmrError,
    },
    /// A recording holds what a replay through the buffer stream cannot reproduce
    /// ([`crate::replay::Replay::from_bytes`]): damaged frames, instruction-count frames.
    #[error("{name}: cannot be replayed through the buffer stream: {reason}; meter it whole with `gpumeter usage`")]
    NotReplayable {
        /// The source.
        name: String,
        /// What it holds.
        reason: String,
    },
    /// A file could not be read ([`meter_path`]).
    #[error("{name}: cannot read: {error}")]
    Io {
        /// The file.
        name: String,
        /// The operating system's error.
        #[source]
        error: std::io::Error,
    },
}

/// Where a buffer sits in a `.gmr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRef {
    /// 0-based frame index (the header is #0).
    pub index: usize,
    /// Byte offset of the frame in the file; the buffer's bytes start 12 bytes later (after
    /// the frame's type and length).
    pub offset: u64,
}

impl fmt::Display for FrameRef {
    /// `frame #3 at byte 1234`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "frame #{} at byte {}", self.index, self.offset)
    }
}

/// Source formats, as usage reports name them (`sources[].format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CuptiFormat {
    /// A raw CUPTI activity buffer file (`cupti`).
    Cupti,
    /// A `.gmr` recording (`gmr`).
    Gmr,
}

impl CuptiFormat {
    /// `cupti` or `gmr`.
    pub fn as_str(self) -> &'static str {
        match self {
            CuptiFormat::Cupti => "cupti",
            CuptiFormat::Gmr => "gmr",
        }
    }
}

/// A function called once per device right after it is registered and before any of its
/// records is pushed, e.g. to apply a device catalog (`gpumeter_import::DeviceCatalog::apply_to`).
pub type DeviceHook<'a> = &'a dyn Fn(&mut Meter, DeviceSlot);

/// How to meter a CUPTI source.
#[derive(Clone, Copy, Default)]
pub struct CuptiOptions<'a> {
    /// The producer's API version, for raw buffers (`--cupti-api-version`; default 12.8's
    /// 26). A `.gmr` takes it from its header instead.
    pub api: ApiVersion,
    /// Extra pointer → string entries for names (applied before a `.gmr`'s own tables).
    pub strings: Option<&'a StringTable>,
    /// Called for each registered device before its records are pushed.
    pub on_device: Option<DeviceHook<'a>>,
}

impl fmt::Debug for CuptiOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CuptiOptions")
            .field("api", &self.api)
            .field("strings", &self.strings.map(StringTable::len))
            .field("on_device", &self.on_device.is_some())
            .finish()
    }
}

/// What metering one source did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CuptiSummary {
    /// The source's name in the report.
    pub source_name: String,
    /// `cupti` or `gmr`.
    pub format: CuptiFormat,
    /// The layouts used.
    pub api: ApiVersion,
    /// Work records found (kernels, copies, memsets, graph launches), including those the
    /// meter counts as loss; 0 for a duplicate source.
    pub records: u64,
    /// Records counted as skipped; 0 for a duplicate source.
    pub skipped: u64,
    /// `true` when a source with the same SHA-256 was already metered: nothing was pushed.
    pub duplicate_source: bool,
    /// Lowercase hex SHA-256 of the source's bytes.
    pub sha256: String,
    /// Keys of the devices with activity, in order of first appearance.
    pub device_keys: Vec<String>,
    /// Work records whose process id came from an API record.
    pub process_ids_joined: u64,
    /// Work records whose external id came from an EXTERNAL_CORRELATION record.
    pub external_ids_joined: u64,
    /// Dropped records booked as loss (sum of the `.gmr` dropped-count deltas).
    pub dropped: u64,
    /// Activity buffers decoded (1 for a raw buffer).
    pub buffers: u64,
    /// `.gmr` energy samples read.
    pub energy_samples: u64,
    /// `.gmr` PM-sampling samples read (frames of type 9, every sample of every frame,
    /// those of a device the recording does not describe included).
    pub pm_samples: u64,
    /// MEMORY2 allocations and releases of device memory handed to the meter
    /// (`memory_byte_ns`).
    pub memory_events: u64,
    /// Green contexts (CONTEXT records with `isGreenContext` and an SM count) declared to the
    /// meter as partitions.
    pub green_contexts: u64,
    /// Kernels given a warp-instruction count (SASS-metrics frames or INSTRUCTION_EXECUTION
    /// records joined by correlation id).
    pub kernels_with_instructions: u64,
    /// Kernels given operation counts (`.gmr` operation-counters frames joined by correlation
    /// id: the FLOP meters).
    pub kernels_with_op_counts: u64,
    /// Allocations of a finished `.gmr` still held when its process stopped recording, closed
    /// at the recording's end (the driver frees a process's memory when it exits).
    pub allocations_closed_at_end: u64,
    /// `.gmr` attribution events read (informational).
    pub attribution_events: u64,
    /// `.gmr` frames of unknown types skipped.
    pub unknown_frames: u64,
    /// The `.gmr`'s torn last frame, if any (its earlier frames were metered).
    pub torn: Option<TornFrame>,
    /// `false` for a `.gmr` without an end frame (its producer stopped early); `true` otherwise.
    pub finished: bool,
}

/// Meters a raw CUPTI activity buffer (the bytes of one buffer, laid out by
/// [`CuptiOptions::api`]).
///
/// `name` is the source's name in the report and in errors (a file name, no directories).
///
/// ```
/// use gpumeter_core::{Meter, MeterConfig, MeterKind};
/// use gpumeter_recording::{meter_buffer, CuptiOptions};
/// // One 12.8 CONCURRENT_KERNEL record (`CUpti_ActivityKernel9`, 208 bytes).
/// let mut k = vec![0u8; 208];
/// k[0..4].copy_from_slice(&10u32.to_le_bytes());
/// k[16..24].copy_from_slice(&1_000u64.to_le_bytes()); // start
/// k[24..32].copy_from_slice(&1_500u64.to_le_bytes()); // end
/// let mut meter = Meter::new(MeterConfig::default());
/// let s = meter_buffer(&mut meter, "buf.bin", &k, &CuptiOptions::default())?;
/// // No DEVICE record: the device is keyed by the source's identity (a SHA-256 prefix) and id.
/// let key = format!("{}#0", &s.sha256[..16]);
/// assert_eq!(s.device_keys, [key.clone()]);
/// let report = meter.finish().expect("report");
/// assert_eq!(report.device_total(&key, MeterKind::KernelNs), 500);
/// # Ok::<(), gpumeter_recording::CuptiSourceError>(())
/// ```
///
/// # Errors
/// [`CuptiSourceError::Decode`] when the buffer does not decode or a field cannot be valid; the
/// meter is then untouched.
pub fn meter_buffer(
    meter: &mut Meter,
    name: &str,
    bytes: &[u8],
    opts: &CuptiOptions<'_>,
) -> Result<CuptiSummary, CuptiSourceError> {
    let plan = plan_buffer(name, bytes, opts)?;
    Ok(commit(meter, plan, opts))
}

/// [`meter_buffer`]'s reading, decoding and validation, without a meter.
fn plan_buffer(
    name: &str,
    bytes: &[u8],
    opts: &CuptiOptions<'_>,
) -> Result<Plan, CuptiSourceError> {
    let decoded = decode(bytes, opts.api).map_err(|error| CuptiSourceError::Decode {
        name: name.to_string(),
        frame: None,
        error,
    })?;
    let mut input = Input::new(name, bytes, CuptiFormat::Cupti, opts.api);
    let strings = opts.string_table();
    input.add_buffer(decoded, None, &strings);
    input.plan()
}

/// Meters a `.gmr` recording: every activity buffer with the header's API version, string
/// tables for names (each buffer sees the tables written before it), the header's device
/// inventory, and dropped counts as loss. A torn last frame is reported in the summary and as a
/// report warning; the frames before it are metered.
///
/// # Errors
/// [`CuptiSourceError::Gmr`] when the file cannot be read (see [`read_gmr`]);
/// [`CuptiSourceError::Decode`] when the header's API version is not supported or a buffer does
/// not decode (naming the frame). The meter is then untouched.
pub fn meter_gmr(
    meter: &mut Meter,
    name: &str,
    bytes: &[u8],
    opts: &CuptiOptions<'_>,
) -> Result<CuptiSummary, CuptiSourceError> {
    let plan = plan_gmr(name, bytes, opts)?;
    Ok(commit(meter, plan, opts))
}

/// [`meter_gmr`]'s reading, decoding and validation, without a meter.
fn plan_gmr(name: &str, bytes: &[u8], opts: &CuptiOptions<'_>) -> Result<Plan, CuptiSourceError> {
    let file = read_gmr(bytes).map_err(|error| CuptiSourceError::Gmr {
        name: name.to_string(),
        error,
    })?;
    let api = ApiVersion::from_cupti(file.header.cupti_api_version).map_err(|error| {
        CuptiSourceError::Decode {
            name: name.to_string(),
            frame: None,
            error,
        }
    })?;
    let mut input = Input::new(name, bytes, CuptiFormat::Gmr, api);
    input.inventory = file.header.devices.clone();
    let h = &file.header;
    let recording = format!(
        "{}/{}/{}/{}",
        h.host, h.process_id, h.clock.cupti_timestamp_ns, h.clock.unix_time_ns
    );
    // Keys of devices without a UUID come from the header identity, which stays the same
    // while the recording grows (DESIGN §4, §7).
    input.key_label = gpumeter_core::device::recording_label(&recording);
    input.recording = Some(recording);
    input.default_pid = (file.header.process_id != 0).then_some(file.header.process_id);
    input.instrumented = file.header.instrumented;
    input.unknown_frames = file.unknown_frames;
    input.torn = file.torn;
    input.damaged = file.damaged.clone();
    input.finished = file.finished;
    let mut strings = opts.string_table();
    for f in &file.frames {
        let at = FrameRef {
            index: f.index,
            offset: f.offset,
        };
        match &f.frame {
            Frame::ActivityBuffer(b) => {
                // Its checksum is right: the records before a fault are the producer's, and
                // only what follows the fault is lost (its size is unknown).
                let (decoded, fault) = decode_prefix(b, api);
                if let Some(error) = fault {
                    input.undecodable.push((at, error));
                }
                input.add_buffer(decoded, Some(at), &strings);
            }
            Frame::StringTable(t) => strings.extend_from(t),
            Frame::Dropped(d) => input.dropped.push(*d),
            Frame::Attribution(_) => input.attribution_events += 1,
            // Read below through the recorded telemetry.
            Frame::Energy(_) => input.energy_samples += 1,
            Frame::PmSamples(p) => {
                input.pm_samples += p.samples.len() as u64;
                input.pm.push(p.clone());
            }
            Frame::OpCounts(c) => {
                input.op_frames += 1;
                input.op_passes.insert(c.passes);
                for k in &c.kernels {
                    match input.ops_of.entry(k.correlation_id) {
                        std::collections::hash_map::Entry::Occupied(_) => input.op_repeats += 1,
                        std::collections::hash_map::Entry::Vacant(v) => {
                            v.insert(k.counters.clone());
                        }
                    }
                }
            }
            Frame::Instructions(c) => {
                let per = input.sass_of.entry(c.correlation_id).or_default();
                per.extend(
                    c.functions
                        .iter()
                        .map(|f| (f.name.clone(), f.warp_instructions)),
                );
            }
        }
    }
    // Energy samples through the recorded implementation of the NVML telemetry trait: the
    // same interface the collector samples live.
    use gpumeter_nvml::Telemetry as _;
    let telemetry = file.telemetry();
    for gpu in telemetry.gpus().unwrap_or_default() {
        while let Ok(r) = telemetry.energy(gpu.index) {
            input.energy.push(crate::gmr::EnergySample {
                device_id: r.index,
                timestamp_ns: r.timestamp_ns,
                energy_mj: r.energy_mj,
            });
        }
    }
    input.plan()
}

/// Meters a file by path: a `.gmr` when it starts with the `.gmr` magic, else a raw buffer laid
/// out by [`CuptiOptions::api`]. The report names it by its file name.
///
/// # Errors
/// [`CuptiSourceError::Io`] when the file cannot be read; otherwise as [`meter_gmr`] /
/// [`meter_buffer`].
pub fn meter_path(
    meter: &mut Meter,
    path: &Path,
    opts: &CuptiOptions<'_>,
) -> Result<CuptiSummary, CuptiSourceError> {
    let (name, bytes) = read_source(path)?;
    if crate::gmr::is_gmr(&bytes) {
        meter_gmr(meter, &name, &bytes, opts)
    } else {
        meter_buffer(meter, &name, &bytes, opts)
    }
}

impl CuptiOptions<'_> {
    /// The string table names are looked up in before a source's own strings:
    /// [`CuptiOptions::strings`], or an empty one.
    pub(crate) fn string_table(&self) -> StringTable {
        let mut strings = StringTable::new();
        if let Some(s) = self.strings {
            strings.extend_from(s);
        }
        strings
    }
}

/// The name a report gives the file at `path`: its file name, else the whole path.
pub(crate) fn source_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Reads the file at `path` whole: its name as a report gives it (the file name, else the
/// whole path) and its bytes.
///
/// # Errors
/// [`CuptiSourceError::Io`], naming the file, when it cannot be read.
pub fn read_source(path: &Path) -> Result<(String, Vec<u8>), CuptiSourceError> {
    let name = source_name(path);
    let bytes = std::fs::read(path).map_err(|error| CuptiSourceError::Io {
        name: name.clone(),
        error,
    })?;
    Ok((name, bytes))
}

/// Counts a record [`convert`] refuses for an invalid field: one more invalid record of its
/// device in `invalid`, and one more of its field in `faults` with, for the field's first,
/// the error that names source, frame, offset and value (the warning's text).
pub(crate) fn note_invalid(
    invalid: &mut BTreeMap<u32, u64>,
    faults: &mut BTreeMap<&'static str, (u64, String)>,
    name: &str,
    frame: Option<FrameRef>,
    r: &LocatedRecord,
    bad: InvalidField,
) {
    let InvalidField {
        device_id,
        field,
        value,
    } = bad;
    *invalid.entry(device_id).or_insert(0) += 1;
    let slot = faults.entry(field).or_insert_with(|| {
        let e = CuptiSourceError::Decode {
            name: name.to_string(),
            frame,
            error: DecodeError::BadField {
                offset: r.offset,
                kind: r.kind,
                field,
                value,
                reason: INVALID_KERNEL_FIELD,
            },
        };
        (0, e.to_string())
    });
    slot.0 += 1;
}

/// How a source was instrumented, for its `instrumented_run` warning: by what (`SASS
/// metrics`, `INSTRUCTION_EXECUTION records`), and whether it holds PM samples (then
/// `sm_active_ns` is named among what the instrumentation inflates: [`instrumented_meters`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Instrumented<'a> {
    pub(crate) by: &'a str,
    pub(crate) pm_sampled: bool,
}

/// The warnings (and source losses) of how a source was recorded: each buffer that stops
/// decoding (a `corrupt_frame` loss of unknown size), an unfinished recording, an
/// instrumented run, frames of unknown types.
pub(crate) fn recording_warnings(
    source: &str,
    undecodable: &[(FrameRef, DecodeError)],
    unfinished: bool,
    instrumented: Option<Instrumented<'_>>,
    unknown_frames: u64,
    warnings: &mut Vec<gpumeter_core::Warning>,
    source_losses: &mut Vec<(LossReason, u64, bool)>,
) {
    for (at, error) in undecodable {
        source_losses.push((LossReason::CorruptFrame, 0, true));
        warnings.push(gpumeter_core::Warning::new(
            gpumeter_core::WarningCode::UndecodableBuffer,
            format!(
                "{source}: {at}: the activity buffer stops decoding ({error}): the records before \
             that were metered, what follows is lost (corrupt_frame, how many is unknown)"
            ),
        ));
    }
    if unfinished {
        warnings.push(gpumeter_core::Warning::new(
            gpumeter_core::WarningCode::UnfinishedRecording,
            format!(
                "{source}: the recording has no end frame (its producer stopped before closing it)"
            ),
        ));
    }
    if let Some(Instrumented { by, pm_sampled }) = instrumented {
        warnings.push(gpumeter_core::Warning::new(
            gpumeter_core::WarningCode::InstrumentedRun,
            format!(
                "{source}: instrumented run (instruction-level collection: {by}): \
                 {}",
                instrumented_meters(pm_sampled)
            ),
        ));
    }
    if unknown_frames > 0 {
        warnings.push(gpumeter_core::Warning::new(
            gpumeter_core::WarningCode::UnknownFrames,
            format!(
                "{source}: {unknown_frames} frames of unknown types were skipped (written by a \
             newer producer?)"
            ),
        ));
    }
}

/// Energy samples (the source's slot, timestamp in ns, counter in mJ) on the meter's slots;
/// a sample of a slot `slot_of` does not map is dropped.
pub(crate) fn on_slots(
    energy: Vec<(DeviceSlot, u64, u64)>,
    slot_of: impl Fn(DeviceSlot) -> Option<DeviceSlot>,
) -> Vec<(DeviceSlot, u64, u64)> {
    energy
        .into_iter()
        .filter_map(|(local, t, e)| Some((slot_of(local)?, t, e)))
        .collect()
}

/// The span a recording observed each device's energy counter over: (slot, first, last
/// timestamp in ns) per slot, in slot order.
pub(crate) fn energy_spans(energy: &[(DeviceSlot, u64, u64)]) -> Vec<(DeviceSlot, u64, u64)> {
    let mut spans: BTreeMap<DeviceSlot, (u64, u64)> = BTreeMap::new();
    for &(slot, t, _) in energy {
        let s = spans.entry(slot).or_insert((t, t));
        *s = (s.0.min(t), s.1.max(t));
    }
    spans.into_iter().map(|(d, (a, b))| (d, a, b)).collect()
}

/// Starts a source on the meter: `false`, with `summary` marked a duplicate that adds
/// nothing (no records, skipped or dropped counted), when the meter has metered it already.
pub(crate) fn begin(meter: &mut Meter, summary: &mut CuptiSummary) -> bool {
    let fresh = meter.begin_source(SourceInfo {
        name: summary.source_name.clone(),
        format: summary.format.as_str().to_string(),
        sha256: summary.sha256.clone(),
    });
    if !fresh {
        summary.duplicate_source = true;
        summary.records = 0;
        summary.skipped = 0;
        summary.dropped = 0;
    }
    fresh
}

/// Registers a source's devices in order, each followed by [`CuptiOptions::on_device`]: the
/// meter's slot of each, by the source's own slot number.
pub(crate) fn register_devices(
    meter: &mut Meter,
    devices: impl IntoIterator<Item = DeviceInfo>,
    opts: &CuptiOptions<'_>,
) -> Vec<DeviceSlot> {
    devices
        .into_iter()
        .map(|info| {
            let slot = meter.register_device(info);
            if let Some(hook) = opts.on_device {
                hook(meter, slot);
            }
            slot
        })
        .collect()
}

/// Registers a source's green contexts (its own slot, context id, SMs): the meter's
/// partition of each by (the source's slot, context id). This source's own context ids, so
/// they never match another process's contexts of the same number.
pub(crate) fn register_partitions(
    meter: &mut Meter,
    partitions: &[(DeviceSlot, u32, u32)],
    slot_of: impl Fn(DeviceSlot) -> Option<DeviceSlot>,
) -> FxHashMap<(DeviceSlot, u32), PartitionId> {
    let mut partition_of = FxHashMap::default();
    for &(local, context, sms) in partitions {
        if let Some(p) = slot_of(local).and_then(|slot| meter.register_partition(slot, sms)) {
            partition_of.insert((local, context), p);
        }
    }
    partition_of
}

/// Records a source's losses (its own slot, reason, count, whether the count is a lower
/// bound) on the meter's slots.
pub(crate) fn record_losses(
    meter: &mut Meter,
    losses: &[(DeviceSlot, LossReason, u64, bool)],
    slot_of: impl Fn(DeviceSlot) -> Option<DeviceSlot>,
) {
    for &(local, reason, n, lower) in losses {
        let Some(slot) = slot_of(local) else { continue };
        if lower {
            meter.record_loss_at_least(slot, reason, n);
        } else {
            meter.record_loss(slot, reason, n);
        }
    }
}

/// One decoded buffer with the names its pointers resolve to at its place in the source.
struct Buffer {
    decoded: Decoded,
    frame: Option<FrameRef>,
    names: FxHashMap<u64, Arc<str>>,
}

/// A source being gathered before planning.
struct Input<'n> {
    name: &'n str,
    /// Label for device keys without a UUID: the first 16 hex digits of the content's SHA-256
    /// ([`gpumeter_core::source_label`]; a `.gmr`'s from its header identity), so two different
    /// files never share a device and a renamed copy keeps its keys (as in `gpumeter-import`).
    key_label: String,
    /// SHA-256 of the source's bytes, lowercase hex.
    sha256: String,
    format: CuptiFormat,
    api: ApiVersion,
    buffers: Vec<Buffer>,
    inventory: Vec<GmrDevice>,
    default_pid: Option<u32>,
    dropped: Vec<crate::gmr::DroppedRecords>,
    unknown_frames: u64,
    energy_samples: u64,
    pm_samples: u64,
    /// `.gmr` PM-sample frames, in file order.
    pm: Vec<crate::gmr::PmSamples>,
    /// `.gmr` energy samples, in file order.
    energy: Vec<crate::gmr::EnergySample>,
    /// `.gmr` SASS-metrics instruction counts per correlation id: (function name, warp
    /// instructions), as the frames list them.
    sass_of: FxHashMap<u32, Vec<(String, u64)>>,
    /// The `.gmr` header says the run was instrumented (SASS metrics).
    instrumented: bool,
    /// `.gmr` operation counters per correlation id (the first frame's entry of an id).
    ops_of: FxHashMap<u32, Vec<OpCounterValue>>,
    /// `.gmr` operation-counters frames read.
    op_frames: u64,
    /// Their pass counts (`OpCounters::passes`), for the instrumented-run warning.
    op_passes: BTreeSet<u32>,
    /// Entries of a correlation id an earlier operation-counters frame gave: not metered.
    op_repeats: u64,
    attribution_events: u64,
    torn: Option<TornFrame>,
    /// `.gmr` frames that could not be used (torn or corrupt): their records are loss.
    damaged: Vec<DamagedFrame>,
    /// `.gmr` buffers whose checksum is right but that stop decoding at a fault: the records
    /// before it are metered, what follows is loss of unknown count.
    undecodable: Vec<(FrameRef, DecodeError)>,
    /// The `.gmr` recording's identity (`Batch::recording`).
    recording: Option<String>,
    finished: bool,
}

/// A source decoded, joined and validated, not yet given to a meter. Device slots in
/// `records` and `losses` index `devices`.
struct Plan {
    summary: CuptiSummary,
    devices: Vec<DeviceInfo>,
    records: Vec<ActivityRecord>,
    /// Records lost per device: (device, reason, count, lower bound) — dropped counts
    /// (summed, saturating), records with fields that cannot be represented, records of torn
    /// or corrupt `.gmr` frames.
    losses: Vec<(DeviceSlot, LossReason, u64, bool)>,
    /// Records lost whose device is unknown: (reason, count, lower bound).
    source_losses: Vec<(LossReason, u64, bool)>,
    /// The `.gmr` recording's identity.
    recording: Option<String>,
    /// Green contexts: (device, context id, SMs).
    partitions: Vec<(DeviceSlot, u32, u32)>,
    /// Device-memory allocations and releases, sorted by timestamp.
    memory: Vec<MemoryEvent>,
    /// Energy samples: (device, ns, cumulative mJ).
    energy: Vec<(DeviceSlot, u64, u64)>,
    /// PM samples of the devices the source describes, in file order.
    pm: Vec<(DeviceSlot, PmSample)>,
    skipped: BTreeMap<&'static str, u64>,
    warnings: Vec<gpumeter_core::Warning>,
}

impl<'n> Input<'n> {
    fn new(name: &'n str, bytes: &[u8], format: CuptiFormat, api: ApiVersion) -> Self {
        let sha256 = hex::encode(Sha256::digest(bytes));
        Input {
            name,
            key_label: gpumeter_core::source_label(&sha256),
            sha256,
            format,
            api,
            buffers: Vec::new(),
            inventory: Vec::new(),
            default_pid: None,
            dropped: Vec::new(),
            unknown_frames: 0,
            energy_samples: 0,
            pm_samples: 0,
            pm: Vec::new(),
            energy: Vec::new(),
            sass_of: FxHashMap::default(),
            instrumented: false,
            ops_of: FxHashMap::default(),
            op_frames: 0,
            op_passes: BTreeSet::new(),
            op_repeats: 0,
            attribution_events: 0,
            torn: None,
            damaged: Vec::new(),
            undecodable: Vec::new(),
            recording: None,
            finished: true,
        }
    }

    fn add_buffer(&mut self, decoded: Decoded, frame: Option<FrameRef>, strings: &StringTable) {
        let mut names: FxHashMap<u64, Arc<str>> = FxHashMap::default();
        for r in &decoded.records {
            intern_name(&r.record, strings, &mut names);
        }
        self.buffers.push(Buffer {
            decoded,
            frame,
            names,
        });
    }

    fn plan(self) -> Result<Plan, CuptiSourceError> {
        // Pass 1: joins, devices and contexts over the whole source.
        let mut joins = Joins::default();
        for b in &self.buffers {
            joins.learn(&b.decoded.records, &b.names);
        }
        let Joins {
            pid_of,
            ext_of,
            device_recs,
            device_of_context,
            green,
            instructions_of,
        } = joins;
        let mut devs = Devices {
            source: &self.key_label,
            inventory: &self.inventory,
            device_recs: &device_recs,
            devices: Vec::new(),
            index: FxHashMap::default(),
        };
        let mut records = Vec::new();
        let mut skipped: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut summary = CuptiSummary {
            source_name: self.name.to_string(),
            format: self.format,
            api: self.api,
            records: 0,
            skipped: 0,
            duplicate_source: false,
            sha256: self.sha256.clone(),
            device_keys: Vec::new(),
            process_ids_joined: 0,
            external_ids_joined: 0,
            dropped: 0,
            buffers: self.buffers.len() as u64,
            energy_samples: self.energy_samples,
            pm_samples: self.pm_samples,
            memory_events: 0,
            green_contexts: 0,
            kernels_with_instructions: 0,
            kernels_with_op_counts: 0,
            allocations_closed_at_end: 0,
            attribution_events: self.attribution_events,
            unknown_frames: self.unknown_frames,
            torn: self.torn,
            finished: self.finished,
        };

        // Pass 2: work records. A record with a field that cannot be represented is lost
        // (`invalid_field`), counted on its device and named in one warning per field.
        let mut memory = Vec::new();
        let mut invalid: BTreeMap<u32, u64> = BTreeMap::new();
        let mut faults: BTreeMap<&'static str, (u64, String)> = BTreeMap::new();
        let joins = JoinsRef {
            pid_of: &pid_of,
            ext_of: &ext_of,
            default_pid: self.default_pid,
        };
        for b in &self.buffers {
            for (cat, n) in &b.decoded.skipped {
                *skipped.entry(cat).or_insert(0) += n;
            }
            for r in &b.decoded.records {
                match convert(r, &b.names, &joins) {
                    Converted::Work {
                        device_id,
                        mut rec,
                        pid_joined,
                        ext_joined,
                    } => {
                        rec.device = devs.slot(device_id);
                        summary.process_ids_joined += u64::from(pid_joined);
                        summary.external_ids_joined += u64::from(ext_joined);
                        records.push(rec);
                    }
                    Converted::Memory { device_id, mut ev } => {
                        ev.device = devs.slot(device_id);
                        memory.push(ev);
                    }
                    Converted::Skipped(cat) => *skipped.entry(cat).or_insert(0) += 1,
                    Converted::Invalid(bad) => {
                        note_invalid(&mut invalid, &mut faults, self.name, b.frame, r, bad);
                        // Registered so that its loss has a device entry.
                        devs.slot(bad.device_id);
                    }
                    Converted::Consumed => {}
                }
            }
        }
        let mut warnings: Vec<gpumeter_core::Warning> = faults
            .into_values()
            .map(|(n, first)| gpumeter_core::invalid_field_warning(&first, n))
            .collect();
        let invalid_records: u64 = invalid.values().sum();
        let mut losses: Vec<(DeviceSlot, LossReason, u64, bool)> = invalid
            .into_iter()
            .map(|(id, n)| (devs.slot(id), LossReason::InvalidField, n, false))
            .collect();
        let mut source_losses: Vec<(LossReason, u64, bool)> = Vec::new();
        summary.dropped = devs.book_dropped(
            &self.dropped,
            &device_of_context,
            self.name,
            &mut warnings,
            &mut losses,
            &mut source_losses,
        );
        for d in &self.damaged {
            let known = |id: u32| devs.describes(id);
            let (per_device, exact, what, unit) = damaged_records(d, self.api, &known);
            let reason = match d.damage {
                Damage::Torn(_) => LossReason::TornFrame,
                Damage::Corrupt | Damage::FramingLost | Damage::Malformed => {
                    LossReason::CorruptFrame
                }
            };
            let lower = !exact;
            let mut placed = 0u64;
            for (id, n) in &per_device {
                match id {
                    Some(id) => losses.push((devs.slot(*id), reason, *n, lower)),
                    None => source_losses.push((reason, *n, lower)),
                }
                placed += n;
            }
            if per_device.is_empty() && lower {
                // Nothing readable, and the frame may have held records: say so.
                source_losses.push((reason, 0, true));
            }
            let kept = match d.damage {
                Damage::FramingLost => "the frames before it were metered",
                Damage::Torn(_) => "the frames before it were metered",
                Damage::Corrupt | Damage::Malformed => {
                    "the frames before and after it were metered"
                }
            };
            let count = if exact {
                format!("{placed} {unit}")
            } else {
                format!("at least {placed} {unit} (how many more is unknown)")
            };
            warnings.push(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::DamagedFrame,
                format!(
                    "{}: {d}; {what}: {count} lost as {}; {kept}",
                    self.name,
                    reason.as_str()
                ),
            ));
        }
        recording_warnings(
            self.name,
            &self.undecodable,
            !self.finished && self.format == CuptiFormat::Gmr,
            instrumented_by(
                if self.instrumented {
                    Some("SASS metrics")
                } else if !instructions_of.is_empty() {
                    Some("INSTRUCTION_EXECUTION records")
                } else {
                    None
                },
                (self.op_frames > 0).then_some(&self.op_passes),
            )
            .as_deref()
            .map(|by| Instrumented {
                by,
                pm_sampled: self.pm_samples > 0,
            }),
            self.unknown_frames,
            &mut warnings,
            &mut source_losses,
        );
        // Sorted by start so that a file's own records are never late (DESIGN §3 "Order"), and
        // so that a shared instruction count's remainder goes to the earliest kernels.
        records.sort_by_key(|r| r.start_ns);
        let (given, overflowed) =
            assign_instructions(&mut records, &self.sass_of, &instructions_of);
        summary.kernels_with_instructions = given;
        if overflowed > 0 {
            warnings.push(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::InstructionCountOverflow,
                format!(
                    "{}: the instruction counts of {overflowed} launch calls pass 64 bits: their \
                 kernels have no count, so warp_instructions is not meterable on their device \
                 (never a clamped count)",
                    self.name
                ),
            ));
        }
        let ops = assign_op_counts(&mut records, &self.ops_of);
        summary.kernels_with_op_counts = ops.given;
        ops.warn(self.name, self.op_repeats, &mut warnings);
        if self.finished && self.format == CuptiFormat::Gmr {
            // The recording's end: its latest valid work record or memory event (a record the
            // meter will refuse, or an energy sample, must not stretch it).
            let valid = |r: &ActivityRecord| {
                r.start_ns != 0
                    && r.end_ns >= r.start_ns
                    && r.end_ns - r.start_ns <= gpumeter_core::time::MAX_RECORD_NS
            };
            let end = records
                .iter()
                .filter(|r| valid(r))
                .map(|r| r.end_ns)
                .chain(memory.iter().map(|m| m.timestamp_ns))
                .max()
                .unwrap_or(0);
            let pids: Vec<Option<u32>> = memory
                .iter()
                .map(|m| m.process_id)
                .chain(std::iter::once(self.default_pid))
                .collect();
            summary.allocations_closed_at_end =
                close_at_end(&mut memory, end, &pids, devs.devices.len());
        }
        // Energy: samples of a device CUPTI or the inventory knows (by CUDA ordinal).
        let energy = devs.place_energy(
            self.energy
                .iter()
                .map(|e| (e.device_id, e.timestamp_ns, e.energy_mj)),
            self.name,
            &mut warnings,
        );
        let pm = devs.place_pm(&self.pm, self.name, &mut warnings);
        let partitions = devs.partitions(&green);
        summary.green_contexts = partitions.len() as u64;
        summary.memory_events = memory.len() as u64;
        summary.records = records.len() as u64 + invalid_records;
        summary.skipped = skipped.values().sum();
        summary.device_keys = devs.devices.iter().map(|d| d.key.clone()).collect();
        memory.sort_by_key(|m| m.timestamp_ns);
        Ok(Plan {
            summary,
            devices: devs.devices,
            records,
            losses,
            source_losses,
            recording: self.recording.clone(),
            partitions,
            memory,
            energy,
            pm,
            skipped,
            warnings,
        })
    }
}

/// What instrumented a source, as its `instrumented_run` warning names it: the instruction
/// counting (`sass`: `SASS metrics`, `INSTRUCTION_EXECUTION records`), and CUPTI's range
/// profiler when the source holds operation-counters frames (`op_passes`: their pass counts),
/// which serializes kernels and replays each once per pass. `None` when nothing did.
pub(crate) fn instrumented_by(
    sass: Option<&str>,
    op_passes: Option<&BTreeSet<u32>>,
) -> Option<String> {
    let profiler = op_passes.map(|passes| {
        let known: Vec<String> = passes
            .iter()
            .filter(|&&p| p > 0)
            .map(u32::to_string)
            .collect();
        let times = match known.as_slice() {
            [] => "once per counter pass".to_string(),
            [one] if one == "1" => "once (1 counter pass)".to_string(),
            [one] => format!("{one} times ({one} counter passes)"),
            many => format!("{} times (counter passes, per context)", many.join(" or ")),
        };
        format!(
            "CUPTI range profiler for the FLOP counters, kernel replay: kernels serialized and \
             each replayed {times}"
        )
    });
    match (sass, profiler) {
        (Some(s), Some(p)) => Some(format!("{s}; {p}")),
        (Some(s), None) => Some(s.to_string()),
        (None, p) => p,
    }
}

/// What [`assign_op_counts`] did.
#[derive(Debug, Default)]
pub(crate) struct OpJoin {
    /// Kernels given operation counts.
    pub(crate) given: u64,
    /// Correlation ids with counters and no kernel record.
    pub(crate) unmatched: Vec<u32>,
    /// Launches whose counts pass 64 bits: (correlation id, why).
    pub(crate) overflowed: Vec<(u32, String)>,
    /// Per FLOP meter, launches with some but not all of its three counters.
    pub(crate) partial: BTreeMap<gpumeter_core::MeterKind, u64>,
}

impl OpJoin {
    /// The warnings of the join: counters of no kernel (`unmatched_profiler_ranges`), counts
    /// past 64 bits (`instruction_count_overflow`), partial FLOP meters
    /// (`partial_op_counters`), and `repeats` entries of a correlation id given before.
    pub(crate) fn warn(
        &self,
        source: &str,
        repeats: u64,
        warnings: &mut Vec<gpumeter_core::Warning>,
    ) {
        use gpumeter_core::{Warning, WarningCode};
        if !self.unmatched.is_empty() || repeats > 0 {
            let mut parts = Vec::new();
            if let (Some(first), n) = (self.unmatched.iter().min(), self.unmatched.len()) {
                parts.push(format!(
                    "{n} launches' operation counters (correlation ids from {first}) match no \
                     kernel record of the recording"
                ));
            }
            if repeats > 0 {
                parts.push(format!(
                    "{repeats} entries repeat a correlation id an earlier operation-counters \
                     frame gave (the first is metered)"
                ));
            }
            warnings.push(Warning::new(
                WarningCode::UnmatchedProfilerRanges,
                format!(
                    "{source}: {}: their counts are not metered (flops_fp64, flops_fp32, \
                     flops_fp16, tensor_ops)",
                    parts.join("; ")
                ),
            ));
        }
        if let Some((corr, why)) = self.overflowed.first() {
            warnings.push(Warning::new(
                WarningCode::InstructionCountOverflow,
                format!(
                    "{source}: the operation counts of {} launches pass 64 bits (the first, \
                     correlation id {corr}: {why}): their kernels have no operation counts, so \
                     the FLOP meters are not meterable on their device (never a clamped count)",
                    self.overflowed.len()
                ),
            ));
        }
        for (meter, n) in &self.partial {
            warnings.push(Warning::new(
                WarningCode::PartialOpCounters,
                format!(
                    "{source}: the operation counters of {n} launches hold some but not all of \
                     {meter}'s add, mul and fma counters: those kernels have no {meter} count"
                ),
            ));
        }
    }
}

/// Gives kernels their operation counts ([`gpumeter_core::OpCounts`]: `flops_fp64`,
/// `flops_fp32`, `flops_fp16`, `tensor_ops`) from the raw counters of their correlation id
/// (`.gmr` operation-counters frames), added up by [`gpumeter_core::OpCounter`] (add and mul
/// count 1, fma 2; tensor-path counters summed). A FLOP meter with only some of its three
/// counters is left without a count ([`gpumeter_core::OpCounter::partial`]); a launch whose
/// counts pass 64 bits gets none. Several kernel records of one correlation id (a graph
/// launch) are one launch call's: the earliest gets the counts, the others 0, so the call's
/// total is given once.
pub(crate) fn assign_op_counts(
    records: &mut [ActivityRecord],
    ops_of: &FxHashMap<u32, Vec<OpCounterValue>>,
) -> OpJoin {
    let mut join = OpJoin::default();
    if ops_of.is_empty() {
        return join;
    }
    let mut seen: BTreeSet<u32> = BTreeSet::new();
    let mut counted: FxHashMap<u32, Option<gpumeter_core::OpCounts>> = FxHashMap::default();
    // `records` are sorted by start: the first of a correlation id is the earliest.
    for r in records.iter_mut() {
        let Work::Kernel(k) = &mut r.work else {
            continue;
        };
        let corr = r.correlation_id;
        let Some(counters) = ops_of.get(&corr).filter(|_| corr != 0) else {
            continue;
        };
        if !seen.insert(corr) {
            // A later kernel of the same call: 0 of each meter the call counted.
            if let Some(Some(c)) = counted.get(&corr) {
                let zero = |n: Option<u64>| n.map(|_| 0);
                k.set_op_counts(gpumeter_core::OpCounts {
                    flops_fp64: zero(c.flops_fp64),
                    flops_fp32: zero(c.flops_fp32),
                    flops_fp16: zero(c.flops_fp16),
                    tensor_ops: zero(c.tensor_ops),
                });
                join.given += 1;
            }
            continue;
        }
        let mut c = gpumeter_core::OpCounter::new();
        let mut overflow = None;
        for v in counters {
            if let Err(e) = c.add(&v.metric, v.value) {
                overflow = Some(e.to_string());
                break;
            }
        }
        if overflow.is_none() && c.tensor_overflow() {
            overflow = Some("tensor_ops's total for one kernel overflows u64".to_string());
        }
        if let Some(why) = overflow {
            join.overflowed.push((corr, why));
            counted.insert(corr, None);
            continue;
        }
        let mut ops = c.finish();
        for m in c.partial() {
            *join.partial.entry(m).or_insert(0) += 1;
            match m {
                gpumeter_core::MeterKind::FlopsFp64 => ops.flops_fp64 = None,
                gpumeter_core::MeterKind::FlopsFp32 => ops.flops_fp32 = None,
                gpumeter_core::MeterKind::FlopsFp16 => ops.flops_fp16 = None,
                _ => {}
            }
        }
        k.set_op_counts(ops);
        counted.insert(corr, Some(ops));
        join.given += 1;
    }
    join.unmatched = ops_of
        .keys()
        .copied()
        .filter(|c| !seen.contains(c))
        .collect();
    join.unmatched.sort_unstable();
    join
}

/// The devices of a source, registered locally in order of first activity.
pub(crate) struct Devices<'a> {
    pub(crate) source: &'a str,
    pub(crate) inventory: &'a [GmrDevice],
    pub(crate) device_recs: &'a BTreeMap<u32, (DeviceRecord, Option<Arc<str>>)>,
    pub(crate) devices: Vec<DeviceInfo>,
    pub(crate) index: FxHashMap<u32, DeviceSlot>,
}

impl Devices<'_> {
    /// Places energy samples (device id, timestamp in ns, counter in mJ) of a device CUPTI or
    /// the inventory knows (by CUDA ordinal) on its slot, registering it if it has none yet;
    /// the others are not metered, and one warning of `source` counts them.
    pub(crate) fn place_energy(
        &mut self,
        samples: impl IntoIterator<Item = (u32, u64, u64)>,
        source: &str,
        warnings: &mut Vec<gpumeter_core::Warning>,
    ) -> Vec<(DeviceSlot, u64, u64)> {
        let mut energy = Vec::new();
        let mut unplaced = 0u64;
        for (id, timestamp_ns, energy_mj) in samples {
            if self.describes(id) && id != crate::gmr::UNKNOWN_DEVICE {
                energy.push((self.slot(id), timestamp_ns, energy_mj));
            } else {
                unplaced += 1;
            }
        }
        if unplaced > 0 {
            warnings.push(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::UnplacedEnergySamples,
                format!(
                    "{source}: {unplaced} energy samples name a device the recording does not \
                 describe; not metered"
                ),
            ));
        }
        energy
    }

    /// Places PM-sample frames (by CUDA ordinal, as energy samples) on the slot of a device
    /// CUPTI or the inventory knows, registering it if it has none yet; the samples of other
    /// devices are not metered, and one warning of `source` counts them (code
    /// `unplaced_pm_samples`). The samples keep the file's order.
    pub(crate) fn place_pm(
        &mut self,
        frames: &[crate::gmr::PmSamples],
        source: &str,
        warnings: &mut Vec<gpumeter_core::Warning>,
    ) -> Vec<(DeviceSlot, PmSample)> {
        let counts: Vec<(u32, u64)> = frames
            .iter()
            .map(|f| (f.device_id, f.samples.len() as u64))
            .collect();
        self.place_pm_devices(&counts, source, warnings);
        let mut placed = Vec::new();
        for f in frames {
            let id = f.device_id;
            if let Some(&slot) = self
                .index
                .get(&id)
                .filter(|_| id != crate::gmr::UNKNOWN_DEVICE)
            {
                placed.extend(f.samples.iter().map(|x| (slot, *x)));
            }
        }
        placed
    }

    /// [`Devices::place_pm`] for a source that only counts its PM-sample frames (device id,
    /// samples), in file order: registers the devices it places in the same order and warns
    /// the same way; the samples of a placed device id are then those of its slot in
    /// `index`.
    pub(crate) fn place_pm_devices(
        &mut self,
        frames: &[(u32, u64)],
        source: &str,
        warnings: &mut Vec<gpumeter_core::Warning>,
    ) {
        let (mut unplaced, mut devices) = (0u64, BTreeSet::new());
        for &(id, n) in frames {
            if self.describes(id) && id != crate::gmr::UNKNOWN_DEVICE {
                self.slot(id);
            } else if n > 0 {
                unplaced += n;
                devices.insert(id);
            }
        }
        if unplaced > 0 {
            let ids: Vec<String> = devices.iter().map(u32::to_string).collect();
            warnings.push(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::UnplacedPmSamples,
                format!(
                    "{source}: {unplaced} PM samples name a device the recording does not \
                 describe (CUDA ordinal {}); not metered (sm_active_ns, dram_bytes)",
                    ids.join(", ")
                ),
            ));
        }
    }

    /// Whether the source describes device `id` anywhere: a record of it, a DEVICE record or an
    /// inventory entry (by CUDA ordinal).
    pub(crate) fn describes(&self, id: u32) -> bool {
        self.index.contains_key(&id)
            || self.device_recs.contains_key(&id)
            || self.inventory.iter().any(|d| d.id == id)
    }

    /// Books records CUPTI dropped as losses: per device (a device id the source describes
    /// nowhere is not made a device of its own; one not given is the context's device, else
    /// the source's only device), the others on the source with a warning each. A per-device
    /// sum past 64 bits is a lower bound. Returns how many were dropped in all (saturating).
    pub(crate) fn book_dropped(
        &mut self,
        dropped: &[DroppedRecords],
        device_of_context: &FxHashMap<u32, u32>,
        source: &str,
        warnings: &mut Vec<gpumeter_core::Warning>,
        losses: &mut Vec<(DeviceSlot, LossReason, u64, bool)>,
        source_losses: &mut Vec<(LossReason, u64, bool)>,
    ) -> u64 {
        let mut total = 0u64;
        // Per device (None: unknown), the dropped count and whether its sum passed 64 bits
        // (then it is a lower bound).
        let mut per_device: BTreeMap<Option<DeviceSlot>, (u64, bool)> = BTreeMap::new();
        for d in dropped {
            if d.count == 0 {
                continue;
            }
            let device = match d.device_id {
                Some(id) if self.describes(id) => Some(id),
                // Named, but described nowhere: which device it is cannot be told.
                Some(_) => None,
                None => device_of_context
                    .get(&d.context_id)
                    .copied()
                    .or_else(|| self.only_device()),
            };
            let slot = device.map(|id| self.slot(id));
            let n = per_device.entry(slot).or_insert((0, false));
            *n = match n.0.checked_add(d.count) {
                Some(v) => (v, n.1),
                None => (u64::MAX, true),
            };
            total = total.saturating_add(d.count);
            if slot.is_none() {
                warnings.push(gpumeter_core::Warning::new(
                    gpumeter_core::WarningCode::DroppedWithoutDevice,
                    format!(
                    "{source}: {} records dropped by CUPTI in context {} stream {} belong to a \
                     device the recording does not tell: booked as loss on the source",
                    d.count, d.context_id, d.stream_id
                ),
                ));
            }
        }
        for (slot, (n, overflowed)) in per_device {
            match slot {
                Some(s) => losses.push((s, LossReason::Dropped, n, overflowed)),
                None => source_losses.push((LossReason::Dropped, n, overflowed)),
            }
        }
        total
    }

    /// The green contexts (device id, context id) → SMs of devices with activity only (a
    /// green context without work bills nothing): (slot, context id, SMs) in key order.
    pub(crate) fn partitions(
        &self,
        green: &BTreeMap<(u32, u32), u32>,
    ) -> Vec<(DeviceSlot, u32, u32)> {
        let mut partitions = Vec::new();
        for (&(device, context), &sms) in green {
            if let Some(&slot) = self.index.get(&device) {
                partitions.push((slot, context, sms));
            }
        }
        partitions
    }

    pub(crate) fn slot(&mut self, id: u32) -> DeviceSlot {
        if let Some(&s) = self.index.get(&id) {
            return s;
        }
        let info = self.info(id);
        let s = DeviceSlot(self.devices.len() as u32);
        self.devices.push(info);
        self.index.insert(id, s);
        s
    }

    /// The one device id the source knows of, if exactly one.
    pub(crate) fn only_device(&self) -> Option<u32> {
        let mut ids: Vec<u32> = self.index.keys().copied().collect();
        ids.extend(self.device_recs.keys().copied());
        ids.extend(self.inventory.iter().map(|d| d.id));
        ids.sort_unstable();
        ids.dedup();
        match ids.as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    fn info(&self, id: u32) -> DeviceInfo {
        let from_record = self
            .device_recs
            .get(&id)
            .map(|(d, name)| device_info(self.source, d, name.as_deref()));
        let from_inventory = self
            .inventory
            .iter()
            .find(|d| d.id == id)
            .map(|d| inventory_info(self.source, d));
        match (from_record, from_inventory) {
            (Some(mut r), Some(i)) => {
                if r.uuid.is_none() && i.uuid.is_some() {
                    r.key.clone_from(&i.key);
                }
                r.fill_from(&i);
                r
            }
            (Some(r), None) => r,
            (None, Some(i)) => i,
            (None, None) => DeviceInfo::bare(DeviceInfo::source_key(self.source, id), id),
        }
    }
}

/// The records a damaged `.gmr` frame held, as far as its bytes tell: per device id (`None`
/// where the device cannot be trusted), whether the count is exact, and what the frame was.
///
/// A torn activity buffer whose payload is all there (only the checksum missing) is walked
/// whole: the count is exact. A buffer cut short, or any frame whose checksum does not match,
/// is walked as far as it decodes: a lower bound, and after a checksum mismatch a device id
/// counts only if the recording knows that device (`known`), since the bytes may be
/// corrupted. Work records and device-memory events are counted (what metering would have
/// used). A dropped-records frame's count is a count of lost records itself.
///
/// A frame whose type field says PM samples (type 9) is counted in PM samples instead (the
/// last item says which unit): the count its header gives where the bytes make it plausible
/// ([`DamagedFrame::pm_sample_count`]), on its device only when the recording describes that
/// device (as samples are placed); when no count can be trusted, at least one sample of no
/// device.
fn damaged_records(
    d: &DamagedFrame,
    api: ApiVersion,
    known: &dyn Fn(u32) -> bool,
) -> (BTreeMap<Option<u32>, u64>, bool, &'static str, &'static str) {
    let mut per: BTreeMap<Option<u32>, u64> = BTreeMap::new();
    if d.frame_type == Some(crate::gmr::T_PM_SAMPLES) {
        let what = if d.type_trusted() {
            "a PM-samples frame"
        } else {
            "a frame whose type (PM samples) cannot be trusted"
        };
        let (id, n, exact) = match d.pm_sample_count() {
            Some((id, n, exact)) => (Some(id), n, exact),
            None => (None, 1, false),
        };
        let id = id.filter(|&id| known(id) && id != crate::gmr::UNKNOWN_DEVICE);
        if n > 0 || !exact {
            per.insert(id, n);
        }
        return (per, exact, what, "PM samples");
    }
    // Only bytes cut short by the end of the file are the producer's as written; after a
    // checksum mismatch nothing is (the type and length fields included).
    let trusted = d.damage == Damage::Torn(TornReason::ShortRead);
    let place = |id: u32| (trusted || known(id)).then_some(id);
    if d.frame_type == Some(crate::gmr::T_OP_COUNTS) && d.type_trusted() {
        // It holds no records; its kernels are left without operation counts, so the FLOP
        // meters of their device are not meterable (or absent when no kernel has counts).
        return (
            per,
            true,
            "an operation-counters frame (its kernels have no FLOP counts)",
            "records",
        );
    }
    if d.holds_no_records() {
        return (per, true, "a frame that holds no records", "records");
    }
    match d.parse() {
        Some(Frame::Dropped(x)) => {
            if x.count > 0 {
                let id = x.device_id.and_then(place);
                per.insert(id, x.count);
            }
            return (per, trusted, "a dropped-records count", "records");
        }
        Some(Frame::ActivityBuffer(_)) => {}
        Some(_) => return (per, true, "a frame that holds no records", "records"),
        // A frame of a type that holds records but whose payload cannot be read (malformed:
        // its count is unknown), or of a type that cannot be trusted: its bytes are walked as
        // a buffer below, whatever its type field says.
        None if d.type_trusted() && !d.is_activity_buffer() => {
            return (per, false, "a frame of unknown content", "records");
        }
        None => {}
    }
    let mut whole = true;
    for r in Walk::new(&d.payload, api) {
        let Ok(r) = r else {
            whole = false;
            break;
        };
        let id = match &r.record {
            Record::Kernel(k) => k.device_id,
            Record::Memcpy(m) => m.device_id,
            Record::PeerCopy(p) => p.device_id,
            Record::Memset(m) => m.device_id,
            Record::GraphTrace(g) => g.device_id,
            Record::Memory(m)
                if DEVICE_MEMORY_KINDS.contains(&m.memory_kind)
                    && !matches!(m.operation, MemoryOperation::Other(_)) =>
            {
                m.device_id
            }
            _ => continue,
        };
        *per.entry(place(id)).or_insert(0) += 1;
    }
    let exact = trusted && d.complete && whole;
    let what = if d.type_trusted() {
        "an activity buffer"
    } else {
        "a frame whose type cannot be trusted, read as an activity buffer"
    };
    (per, exact, what, "records")
}

fn inventory_info(source: &str, d: &GmrDevice) -> DeviceInfo {
    let uuid = d
        .uuid
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(DeviceInfo::uuid_key);
    let mut info = DeviceInfo::bare(
        uuid.clone()
            .unwrap_or_else(|| DeviceInfo::source_key(source, d.id)),
        d.id,
    );
    info.uuid = uuid;
    info.name.clone_from(&d.name);
    info.sm_count = d.sm_count.filter(|&n| n > 0);
    info.compute_capability = d
        .compute_capability
        .as_deref()
        .and_then(|c| c.parse::<ComputeCapability>().ok());
    info
}

/// Hands a plan to the meter: source, devices (hook applied), losses, records.
fn commit(meter: &mut Meter, plan: Plan, opts: &CuptiOptions<'_>) -> CuptiSummary {
    let (summary, batch, pm) = announce(meter, plan, opts);
    push_pm(meter, vec![(batch.sha256.clone(), pm)]);
    push_batches(meter, vec![batch]);
    summary
}

/// Announces a plan (source, devices with the hook applied, warnings, skipped, losses,
/// partitions) and returns what it has to push, mapped to the meter's slots and partitions:
/// the batch and the PM samples ([`push_pm`]); an empty batch and no samples for a source
/// already metered.
fn announce(
    meter: &mut Meter,
    plan: Plan,
    opts: &CuptiOptions<'_>,
) -> (CuptiSummary, Batch, Vec<(DeviceSlot, PmSample)>) {
    let mut summary = plan.summary;
    if !begin(meter, &mut summary) {
        return (summary, Batch::default(), Vec::new());
    }
    let slots = register_devices(meter, plan.devices, opts);
    let slot_of = |local: DeviceSlot| slots.get(local.0 as usize).copied();
    for w in plan.warnings {
        meter.warn(w);
    }
    let losses: Vec<(DeviceSlot, LossReason, u64, bool)> = plan
        .losses
        .into_iter()
        .filter_map(|(local, reason, n, lower)| Some((slot_of(local)?, reason, n, lower)))
        .collect();
    let partition_of = register_partitions(meter, &plan.partitions, slot_of);
    let records = plan
        .records
        .into_iter()
        .filter_map(|mut rec| {
            rec.partition = partition_of.get(&(rec.device, rec.context_id)).copied();
            rec.device = slot_of(rec.device)?;
            Some(rec)
        })
        .collect();
    let memory = plan
        .memory
        .into_iter()
        .filter_map(|mut m| {
            m.device = slot_of(m.device)?;
            Some(m)
        })
        .collect();
    let energy = on_slots(plan.energy, slot_of);
    let energy_spans = energy_spans(&energy);
    let pm = plan
        .pm
        .into_iter()
        .filter_map(|(local, x)| Some((slot_of(local)?, x)));
    let pm = pm_unread(meter, pm.collect(), plan.recording.as_deref());
    let batch = Batch {
        sha256: summary.sha256.clone(),
        name: summary.source_name.clone(),
        records,
        memory,
        energy,
        energy_spans,
        losses,
        source_losses: plan.source_losses,
        recording: plan.recording,
        skipped: plan
            .skipped
            .into_iter()
            .map(|(cat, n)| (cat.to_string(), n))
            .collect(),
    };
    (summary, batch, pm)
}

/// The identity under which a report notes how far it read a recording's PM samples
/// (`extensions.recordings`): the recording's own ([`gpumeter_core::Batch::recording`]) with
/// `#pm` after it. PM samples are decoded on their own period (100 ms by default) while
/// activity buffers are flushed on theirs, so at any moment a growing recording holds its
/// records and its samples up to different times: one cut for both would leave out, in the
/// next report of the chain, the records or samples written after the report though they
/// end before that cut, never metered.
pub(crate) fn pm_recording(recording: &str) -> String {
    format!("{recording}#pm")
}

/// A source's PM samples (on the meter's slots, in file order) less those an earlier report
/// of the chain read: for a `.gmr` recording continued from an earlier report (`--opening`),
/// how far this report reads the samples is noted apart from its records
/// ([`pm_recording`]), and the samples the earlier report read (ending at or before the time
/// it read the device's samples to) are left out, counted as billed by the opening report
/// ([`Meter::record_pm_billed_earlier`]).
pub(crate) fn pm_unread(
    meter: &mut Meter,
    pm: Vec<(DeviceSlot, PmSample)>,
    recording: Option<&str>,
) -> Vec<(DeviceSlot, PmSample)> {
    if pm.is_empty() {
        return pm;
    }
    let cont = match recording {
        Some(r) => gpumeter_core::Continuation::begin(
            meter,
            &pm_recording(r),
            pm.iter()
                .map(|(slot, x)| (*slot, x.end_ns.max(x.start_ns)))
                .collect::<Vec<_>>(),
        ),
        None => gpumeter_core::Continuation::default(),
    };
    let n = pm.len();
    let unread: Vec<(DeviceSlot, PmSample)> = pm
        .into_iter()
        .filter(|(slot, x)| !pm_read_earlier(&cont, *slot, x))
        .collect();
    if unread.len() < n {
        meter.record_pm_billed_earlier((n - unread.len()) as u64);
    }
    unread
}

/// Pushes the sources' PM samples (per source: its SHA-256 and its samples from
/// [`pm_unread`]) into the meter ([`Meter::push_pm_sample`]) once every source is announced,
/// before any source's records: a [`Batch`] carries no PM samples, and samples pushed before
/// the records are never `late` (the meter holds them until its sweep passes their end; the
/// whole-file path holds the files in memory anyway). A streamed recording hands them on
/// among its records instead ([`crate::recording_file`]).
///
/// They are pushed in the order the streamed paths hand them on: by start; at equal starts,
/// the source whose SHA-256 sorts first ([`crate::meter_files`]' merge); within a source, the
/// file's order ([`crate::buffer_file::Reorder`]). Of two overlapping samples the meter keeps the one
/// it is handed first, so the files' order would otherwise make the whole-file report differ
/// from the streamed one.
pub(crate) fn push_pm(meter: &mut Meter, sources: Vec<(String, Vec<(DeviceSlot, PmSample)>)>) {
    let mut all: Vec<(u64, &str, usize, DeviceSlot, PmSample)> = Vec::new();
    for (sha, pm) in &sources {
        all.extend(
            pm.iter()
                .enumerate()
                .map(|(i, (slot, x))| (x.start_ns, sha.as_str(), i, *slot, *x)),
        );
    }
    all.sort_unstable_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
    for (_, _, _, slot, x) in all {
        meter.push_pm_sample(slot, &x);
    }
}

/// Whether the earlier report of a chain read PM sample `x` of `slot` (it ends at or before
/// the time that report read the device to; a sample with a zero time is never read, the
/// meter refuses it itself).
pub(crate) fn pm_read_earlier(
    cont: &gpumeter_core::Continuation,
    slot: DeviceSlot,
    x: &PmSample,
) -> bool {
    if cont.is_empty() || x.start_ns == 0 {
        return false;
    }
    // The continuation answers for memory events by time: a release at the sample's end.
    cont.read_memory(&MemoryEvent {
        device: slot,
        timestamp_ns: x.end_ns.max(x.start_ns),
        address: 0,
        bytes: 0,
        op: MemoryOp::Release,
        context_id: 0,
        correlation_id: 0,
        process_id: None,
        external_id: None,
    })
}

/// One CUPTI source for [`meter_sources`]: a `.gmr` recording or a raw activity buffer.
#[derive(Debug, Clone, Copy)]
pub struct CuptiInput<'a> {
    /// The source's name in the report and in errors (a file name, no directories).
    pub name: &'a str,
    /// Its bytes.
    pub bytes: &'a [u8],
    /// `Gmr`, or `Cupti` for a raw buffer laid out by [`CuptiOptions::api`].
    pub format: CuptiFormat,
}

/// Meters several CUPTI sources as one: every source is read, decoded and validated first
/// (an error leaves the meter untouched), then each is announced in order and their records
/// and memory events are pushed merged in time order, so the order of the inputs does not
/// matter and one recording never makes another's records `late` (e.g. the recordings of the
/// processes of one job on one GPU). One summary per input, in order.
///
/// # Errors
/// As [`meter_gmr`] / [`meter_buffer`], for the first input that fails.
pub fn meter_sources(
    meter: &mut Meter,
    inputs: &[CuptiInput<'_>],
    opts: &CuptiOptions<'_>,
) -> Result<Vec<CuptiSummary>, CuptiSourceError> {
    let (summaries, batches) = announce_sources(meter, inputs, opts)?;
    push_batches(meter, batches);
    Ok(summaries)
}

/// [`meter_sources`] without the pushing: every input is validated (an error leaves the meter
/// untouched), then announced, and its records, memory events and energy samples are returned
/// as [`Batch`]es for [`push_batches`], to be merged with other formats' batches (the facade
/// merges Kineto and Nsight inputs with recordings this way). One summary per input.
///
/// # Errors
/// As [`meter_sources`].
pub fn announce_sources(
    meter: &mut Meter,
    inputs: &[CuptiInput<'_>],
    opts: &CuptiOptions<'_>,
) -> Result<(Vec<CuptiSummary>, Vec<Batch>), CuptiSourceError> {
    let mut plans = Vec::with_capacity(inputs.len());
    for input in inputs {
        plans.push(match input.format {
            CuptiFormat::Gmr => plan_gmr(input.name, input.bytes, opts)?,
            CuptiFormat::Cupti => plan_buffer(input.name, input.bytes, opts)?,
        });
    }
    let mut summaries = Vec::with_capacity(plans.len());
    let mut batches = Vec::with_capacity(plans.len());
    let mut pm = Vec::new();
    for plan in plans {
        let (summary, batch, samples) = announce(meter, plan, opts);
        pm.push((batch.sha256.clone(), samples));
        batches.push(batch);
        summaries.push(summary);
    }
    push_pm(meter, pm);
    Ok((summaries, batches))
}

/// The end of a finished recording: one process-exit event at `end` per device of the source
/// (`devices` local slots) and process id of `pids` (those of its memory events and its
/// header's), which ends every allocation that process still holds there, also allocations
/// carried in by `--opening`. Returns how many of the source's own allocations it ends.
fn close_at_end(
    memory: &mut Vec<MemoryEvent>,
    end: u64,
    pids: &[Option<u32>],
    devices: usize,
) -> u64 {
    memory.sort_by_key(|m| m.timestamp_ns);
    let mut held: BTreeMap<(u32, Option<u32>, u64), ()> = BTreeMap::new();
    for m in memory.iter() {
        let key = (m.device.0, m.process_id, m.address);
        match m.op {
            MemoryOp::Allocation => {
                held.insert(key, ());
            }
            MemoryOp::Release => {
                held.remove(&key);
            }
            MemoryOp::ProcessExit => held.retain(|k, ()| !(k.0 == key.0 && k.1 == key.1)),
        }
    }
    if end == 0 {
        return held.len() as u64;
    }
    let mut procs: Vec<Option<u32>> = pids.to_vec();
    procs.sort_unstable();
    procs.dedup();
    for device in 0..devices {
        for &pid in &procs {
            let mut exit =
                MemoryEvent::new(DeviceSlot(device as u32), end, 0, 0, MemoryOp::ProcessExit);
            exit.process_id = pid;
            memory.push(exit);
        }
    }
    memory.sort_by_key(|m| m.timestamp_ns);
    held.len() as u64
}

pub use gpumeter_cupti::join::DEVICE_MEMORY_KINDS;

/// Kinds whose records [`meter_buffer`] turns into work (the rest are joined or skipped).
pub const WORK_KINDS: [ActivityKind; 6] = [
    ActivityKind::CONCURRENT_KERNEL,
    ActivityKind::KERNEL,
    ActivityKind::MEMCPY,
    ActivityKind::MEMCPY2,
    ActivityKind::MEMSET,
    ActivityKind::GRAPH_TRACE,
];
