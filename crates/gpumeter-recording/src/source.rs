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

mod announce;
mod booking;
mod devices;
mod op_counts;
mod plan;

use self::announce::commit;
pub use self::announce::{announce_sources, meter_sources, CuptiInput};
pub(crate) use self::booking::*;
pub(crate) use self::devices::Devices;
use self::devices::*;
pub(crate) use self::op_counts::*;
use self::plan::*;

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
    // while the recording grows (docs/ARCHITECTURE.md, "Invariants" and "Documents").
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
