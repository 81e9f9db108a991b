//! `.gmr`: gpumeter's recording of a CUPTI session.
//!
//! # Format (version 1)
//!
//! All integers are little-endian.
//!
//! ```text
//! file    = magic version frame*
//! magic   = "GPUMETER-GMR" 00 0D 0A 1A        (16 bytes; the last three catch text-mode
//!                                             line-ending conversions, as PNG's do)
//! version = u32                               (GMR_FORMAT_VERSION = 1)
//! frame   = type:u32 len:u64 payload:[len bytes] crc:u32
//!           crc = CRC-32 (IEEE, as zlib) of type ‖ len ‖ payload
//! ```
//!
//! The first frame is the [header](GmrHeader) (type 1, a JSON object). The others, in the order
//! they were written:
//!
//! | type | frame | payload |
//! |---|---|---|
//! | 1 | header | JSON [`GmrHeader`] |
//! | 2 | activity buffer | the raw bytes CUPTI handed over (`validSize` bytes) |
//! | 3 | string table | entries `ptr:u64 len:u32 utf8:[len]`: the producer's pointer values and the strings they pointed to, copied while the buffer was live |
//! | 4 | dropped records | `device:u32 context:u32 stream:u32 reserved:u32 count:u64` (device `u32::MAX` = unknown; count is a delta) |
//! | 5 | attribution event | `kind:u32 pid:u32 external_id:u64 timestamp_ns:u64 label_len:u32 label:[label_len]` |
//! | 6 | energy sample | `device:u32 reserved:u32 timestamp_ns:u64 energy_mj:u64` (cumulative counter) |
//! | 7 | end | empty: the producer closed the file cleanly |
//! | 8 | instruction counts | `correlation_id:u32 device:u32 context:u32 count:u32`, then `count` × (`warp_instructions:u64 name_len:u32 name:[name_len]`, UTF-8): the warp-level SASS instructions each function executed in one kernel-launch API call (instrumented mode, [`InstructionCounts`]) |
//! | 9 | PM samples | `device:u32 count:u32`, then `count` × 56 bytes: `flags:u32 reserved:u32 start_ns:u64 end_ns:u64 sm_active_cycles:u64 sm_elapsed_cycles:u64 dram_read_bytes:u64 dram_write_bytes:u64`; flags bit 0 overflow, bits 1–4 say which of the four counters are present (absent ones written 0, else malformed), other bits 0, `reserved` 0; the payload is exactly `8 + 56 × count` bytes ([`PmSamples`]) |
//! | 10 | operation counters | `device:u32 context:u32 passes:u32 count:u32`, then `count` × (`correlation_id:u32 metrics:u32`, then `metrics` × (`value:u64 name_len:u32 name:[name_len]`, UTF-8)): the raw values of CUPTI range-profiler metrics (`smsp__sass_thread_inst_executed_op_*`, `sm__ops_path_tensor_*`) of one context's kernel launches, each by its launch's correlation id; `passes` the replay passes the configuration needed (0: not known); correlation ids nonzero and not repeated in a frame, metric names nonempty and not repeated in an entry; the payload ends with the last entry ([`OpCounters`]) |
//!
//! Fixed-size payloads may grow in later versions: a reader takes the fields it knows from the
//! front and ignores the rest (for type 8, bytes after the `count` functions; type 9 is the
//! exception: its length must match its count, and its unknown flag bits must be 0, so that a
//! later version adds fields with a new frame type rather than silently; so is type 10). Frame types it does
//! not know are skipped and counted when their checksum is right (forward compatibility: a
//! reader older than type 9 counts PM-sample frames in [`GmrFile::unknown_frames`] and reads
//! the rest of the recording as before).
//!
//! # Damage
//!
//! A producer killed mid-write leaves a *torn* last frame: a header, payload or checksum cut
//! short by the end of the file, or a final frame whose checksum does not match. The reader
//! keeps every frame before it and reports the tear ([`GmrFile::torn`]); a file without an end
//! frame is reported as unfinished ([`GmrFile::finished`]). A checksum mismatch with more bytes
//! after the frame is corruption: none of its fields can be trusted, its length included, so
//! reading resumes at the first frame whose checksum is right after it (found by scanning, with
//! a bound on the work), and everything between is one damaged region; when no such frame
//! follows, the rest of the file is damaged. A frame whose checksum is right but whose payload
//! does not parse (a string that is not UTF-8, a payload too short for its type) is malformed:
//! it is lost and reading goes on. Every such frame or region is listed in
//! [`GmrFile::damaged`] with its bytes, so that a reader can count the records it held
//! (records in a torn or corrupt frame are loss, counted; never silence). A damaged
//! header frame is always an error: nothing after it can be trusted.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

pub use gpumeter_cupti::strings::StringTable;

/// The 16 bytes every `.gmr` file starts with.
pub const GMR_MAGIC: [u8; 16] = *b"GPUMETER-GMR\0\r\n\x1a";
/// The format version this crate writes and reads.
pub const GMR_FORMAT_VERSION: u32 = 1;
/// Bytes before the first frame: magic and version.
pub const GMR_PREAMBLE_LEN: usize = 20;
/// Bytes of a frame besides its payload: type (4), length (8), checksum (4).
pub const FRAME_OVERHEAD: usize = 16;
/// `device` value of a [`DroppedRecords`] frame whose device is unknown.
pub const UNKNOWN_DEVICE: u32 = u32::MAX;

pub(crate) const T_HEADER: u32 = 1;
pub(crate) const T_BUFFER: u32 = 2;
pub(crate) const T_STRINGS: u32 = 3;
pub(crate) const T_DROPPED: u32 = 4;
pub(crate) const T_ATTRIBUTION: u32 = 5;
pub(crate) const T_ENERGY: u32 = 6;
pub(crate) const T_END: u32 = 7;
pub(crate) const T_INSTRUCTIONS: u32 = 8;
pub(crate) const T_PM_SAMPLES: u32 = 9;
pub(crate) const T_OP_COUNTS: u32 = 10;
/// The last frame type this crate knows (resynchronization after corruption accepts
/// `T_BUFFER..=T_LAST`).
pub(crate) const T_LAST: u32 = T_OP_COUNTS;

/// Bytes of one sample in a PM-samples frame (type 9).
pub const PM_SAMPLE_LEN: usize = 56;
/// PM-sample flag: CUPTI reported a hardware-buffer overflow before this sample.
pub const PM_FLAG_OVERFLOW: u32 = 1 << 0;
/// PM-sample flag: `sm_active_cycles` is present.
pub const PM_FLAG_SM_ACTIVE: u32 = 1 << 1;
/// PM-sample flag: `sm_elapsed_cycles` is present.
pub const PM_FLAG_SM_ELAPSED: u32 = 1 << 2;
/// PM-sample flag: `dram_read_bytes` is present.
pub const PM_FLAG_DRAM_READ: u32 = 1 << 3;
/// PM-sample flag: `dram_write_bytes` is present.
pub const PM_FLAG_DRAM_WRITE: u32 = 1 << 4;
/// Every flag bit a version-1 reader knows; any other set bit makes the frame malformed.
pub const PM_FLAGS_KNOWN: u32 = PM_FLAG_OVERFLOW
    | PM_FLAG_SM_ACTIVE
    | PM_FLAG_SM_ELAPSED
    | PM_FLAG_DRAM_READ
    | PM_FLAG_DRAM_WRITE;

/// A `.gmr` that cannot be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GmrError {
    /// Writing failed, or reading from a `Read` failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The file does not start with [`GMR_MAGIC`] (or is shorter than the 20-byte preamble).
    #[error("not a .gmr recording (no GPUMETER-GMR magic)")]
    NotGmr,
    /// The format version is not one this crate reads.
    #[error(".gmr format version {0} is not supported (this build reads version 1)")]
    UnsupportedFormatVersion(u32),
    /// The header frame is missing, torn, fails its checksum, or is not a valid header.
    #[error(".gmr header at byte {offset}: {reason}")]
    BadHeader {
        /// Byte offset of the header frame.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A frame before the last fails its checksum, or a frame follows the end frame.
    #[error(".gmr frame #{index} (type {frame_type}) at byte {offset}: {reason}")]
    CorruptFrame {
        /// Byte offset of the frame.
        offset: u64,
        /// 0-based index of the frame (the header is #0).
        index: usize,
        /// The frame's type field as read.
        frame_type: u32,
        /// What is wrong.
        reason: String,
    },
    /// A frame's checksum is right but its payload does not parse (e.g. a string-table entry
    /// that runs past the payload, or is not UTF-8).
    #[error(".gmr frame #{index} (type {frame_type}) at byte {offset}: bad payload: {reason}")]
    BadPayload {
        /// Byte offset of the frame.
        offset: u64,
        /// 0-based index of the frame.
        index: usize,
        /// The frame's type.
        frame_type: u32,
        /// What is wrong.
        reason: String,
    },
    /// The header could not be serialized, or a string is too long for its length field.
    #[error("cannot write .gmr: {0}")]
    Write(String),
}

/// The clock pair of a recording: one CUPTI timestamp (`cuptiGetTimestamp`) and the wall clock
/// read together, so record times can be checked against or mapped to the wall clock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockPair {
    /// `cuptiGetTimestamp()`, ns.
    pub cupti_timestamp_ns: u64,
    /// The wall clock at the same moment, ns since the Unix epoch.
    pub unix_time_ns: u64,
}

/// One GPU of the producing host, as the producer saw it (NVML or CUDA device properties).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GmrDevice {
    /// CUDA device ordinal (the `deviceId` of CUPTI records).
    pub id: u32,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// UUID, `GPU-…` (or `MIG-…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Streaming multiprocessors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_count: Option<u32>,
    /// Compute capability, `"MAJOR.MINOR"` (`"9.0"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
}

/// Who wrote a recording.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Producer {
    /// Program name (`gpumeter-inject`).
    pub name: String,
    /// Its version.
    pub version: String,
}

/// The header frame of a `.gmr` (JSON). Unknown keys are ignored when reading.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GmrHeader {
    /// The producer's `CUPTI_API_VERSION` (`cuptiGetVersion()`): fixes the layout of every
    /// activity buffer in the file.
    pub cupti_api_version: u32,
    /// Host name of the producing machine.
    #[serde(default)]
    pub host: String,
    /// CUPTI and wall clock read together at the start.
    #[serde(default)]
    pub clock: ClockPair,
    /// OS process id of the metered process.
    #[serde(default)]
    pub process_id: u32,
    /// The host's GPUs.
    #[serde(default)]
    pub devices: Vec<GmrDevice>,
    /// The program that wrote the file.
    #[serde(default)]
    pub producer: Producer,
    /// `true` when the producer ran in instrumented mode (SASS metrics: instruction-count
    /// frames): its kernels ran serialized and slowed by patching, so time meters from it
    /// carry the instrumentation warning. Omitted from the JSON when `false`, so
    /// recordings without it (and their digests) are unchanged.
    #[serde(default, skip_serializing_if = "is_false")]
    pub instrumented: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Records CUPTI dropped (`cuptiActivityGetNumDroppedRecords`) since the previous frame for the
/// same context and stream: a delta, summed as loss `dropped`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DroppedRecords {
    /// CUDA device ordinal, `None` when the producer did not know it (then the reader looks
    /// the context up in the recording's CONTEXT records).
    pub device_id: Option<u32>,
    /// CUPTI context id.
    pub context_id: u32,
    /// Stream id (0 for context-wide counts).
    pub stream_id: u32,
    /// Records dropped since the last count.
    pub count: u64,
}

/// What an [`AttributionEvent`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttributionKind {
    /// An external correlation id was pushed (`cuptiActivityPushExternalCorrelationId`).
    ExternalPush,
    /// An external correlation id was popped.
    ExternalPop,
    /// A hint from the producer tying a process or external id to a tenant name (`label`).
    /// Informational: a tenant map decides attribution.
    TenantHint,
    /// A kind this version does not know, kept as its number.
    Other(u32),
}

impl AttributionKind {
    fn raw(self) -> u32 {
        match self {
            AttributionKind::ExternalPush => 1,
            AttributionKind::ExternalPop => 2,
            AttributionKind::TenantHint => 3,
            AttributionKind::Other(v) => v,
        }
    }

    fn from_raw(v: u32) -> Self {
        match v {
            1 => AttributionKind::ExternalPush,
            2 => AttributionKind::ExternalPop,
            3 => AttributionKind::TenantHint,
            o => AttributionKind::Other(o),
        }
    }
}

/// An attribution event recorded by the producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributionEvent {
    /// What happened.
    pub kind: AttributionKind,
    /// OS process id it concerns (0 when none).
    pub process_id: u32,
    /// External correlation id it concerns (0 when none).
    pub external_id: u64,
    /// When, ns on CUPTI's clock.
    pub timestamp_ns: u64,
    /// Free text (a tenant name for [`AttributionKind::TenantHint`]), UTF-8.
    pub label: String,
}

/// A reading of a device's cumulative energy counter (NVML `nvmlDeviceGetTotalEnergyConsumption`),
/// frame type 6.
///
/// What the live collector writes (`collector` module, `CollectorConfig::energy`): one sample
/// per GPU at start, one per interval (default 1 s) and one at stop after the final flush.
/// `device_id` is the CUDA ordinal of the header's inventory entry the NVML GPU was matched to
/// (by UUID; by NVML index only where that is provably the CUDA ordinal), so it joins the
/// `deviceId` of the CUPTI records and the header's `devices[].id`; an NVML GPU that matches
/// no entry (not visible to the process, or in MIG mode: its counter covers the whole GPU) is
/// not written. `timestamp_ns` is on CUPTI's clock, the clock of the activity records: the
/// collector reads `cuptiGetTimestamp` around the NVML call (the midpoint), or, without it,
/// maps NVML's wall-clock time through the header's clock pair. Per device, timestamps
/// strictly increase; `energy_mj` only falls when the driver was reloaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EnergySample {
    /// CUDA device ordinal (the `deviceId` of the CUPTI records, the header's `devices[].id`).
    pub device_id: u32,
    /// When it was read, ns on CUPTI's clock (`cuptiGetTimestamp`: ns since the Unix epoch on
    /// Linux), the clock of the activity records.
    pub timestamp_ns: u64,
    /// The counter as read: cumulative energy since the NVIDIA driver was loaded, mJ (not a
    /// delta).
    pub energy_mj: u64,
}

/// Warp-level instructions one function executed in one kernel-launch API call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FunctionInstructions {
    /// The function's (mangled) name, as CUPTI reports it (the name kernel records carry).
    pub name: String,
    /// Warp-level SASS instructions executed (`smsp__sass_inst_executed`, summed over the
    /// function's instructions and the whole GPU).
    pub warp_instructions: u64,
}

/// The instruction counts of one kernel-launch API call (instrumented mode): the functions
/// that ran between the call and the context synchronization after it (a graph launch may run
/// several). Joined to kernel records by correlation id, context and device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct InstructionCounts {
    /// The launch call's CUPTI correlation id (the `correlationId` of its kernel records).
    pub correlation_id: u32,
    /// CUDA device ordinal.
    pub device_id: u32,
    /// CUPTI context id (`contextUid`).
    pub context_id: u32,
    /// Per function, in the order the producer listed them (by name).
    pub functions: Vec<FunctionInstructions>,
}

impl InstructionCounts {
    /// Σ warp instructions over the functions (saturating).
    pub fn total(&self) -> u64 {
        self.functions
            .iter()
            .fold(0u64, |a, f| a.saturating_add(f.warp_instructions))
    }
}

/// A batch of CUPTI PM-sampling samples of one device, frame type 9, in the order the
/// producer decoded them (by start time).
///
/// `device_id` is the CUDA ordinal (the `deviceId` of the CUPTI records, the header's
/// `devices[].id`), as for [`EnergySample`]. Each [`PmSample`](gpumeter_core::PmSample) is an
/// interval `[start_ns, end_ns)` on CUPTI's clock with the counters the chip supplied (`None`
/// when the producer could not evaluate one); `overflow` says CUPTI reported a hardware-buffer
/// overflow before it (samples were overwritten: loss `pm_sample_overflow` when metered).
/// Replay hands the samples to [`gpumeter_core::Meter::push_pm_sample`] at the frame's place
/// among the activity buffers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PmSamples {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// The samples, in the frame's order.
    pub samples: Vec<gpumeter_core::PmSample>,
}

/// One metric's raw value for one kernel launch, as CUPTI's range profiler evaluated it
/// (`cuptiProfilerHostEvaluateToGpuValues`, a `double` holding an integer count).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct OpCounterValue {
    /// The metric's name with its rollup, as CUPTI names it
    /// (`smsp__sass_thread_inst_executed_op_ffma_pred_on.sum`).
    pub metric: String,
    /// Its value: thread instructions (SASS op counters) or tensor-path math operations
    /// (`sm__ops_path_tensor_*`), count.
    pub value: u64,
}

/// The operation counters of one kernel launch: joined to its kernel record by correlation id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct KernelOpCounters {
    /// The launch call's CUPTI correlation id (the `correlationId` of its kernel record).
    pub correlation_id: u32,
    /// The metrics measured for it, in the producer's order. Raw values, so a reader derives
    /// the meters ([`gpumeter_core::OpCounter`]) and may derive them again differently.
    pub counters: Vec<OpCounterValue>,
}

/// A batch of per-kernel operation counters of one CUDA context, frame type 10 (written by
/// `gpumeter record --flops`: CUPTI's range profiler with one auto range per kernel launch and
/// kernel replay). Replay gives each kernel record of a listed correlation id its
/// [`OpCounts`](gpumeter_core::OpCounts) (`flops_fp64`, `flops_fp32`, `flops_fp16`,
/// `tensor_ops`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpCounters {
    /// CUDA device ordinal.
    pub device_id: u32,
    /// CUPTI context id (`contextUid`).
    pub context_id: u32,
    /// Replay passes the range profiler needed to collect the metrics
    /// (`cuptiProfilerHostGetNumOfPasses`): each kernel ran this many times; 0 when not known.
    pub passes: u32,
    /// Per kernel launch, in launch order.
    pub kernels: Vec<KernelOpCounters>,
}

/// One frame after the header.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Frame {
    /// A raw CUPTI activity buffer (`validSize` bytes).
    ActivityBuffer(Vec<u8>),
    /// Pointer values → strings.
    StringTable(StringTable),
    /// A dropped-records delta.
    Dropped(DroppedRecords),
    /// An attribution event.
    Attribution(AttributionEvent),
    /// An energy sample.
    Energy(EnergySample),
    /// Instruction counts of one kernel launch (instrumented mode).
    Instructions(InstructionCounts),
    /// PM-sampling samples of one device.
    PmSamples(PmSamples),
    /// Operation counters of one context's kernel launches (range profiler).
    OpCounts(OpCounters),
}

/// A frame with its byte offset in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocatedFrame {
    /// Byte offset of the frame's type field.
    pub offset: u64,
    /// 0-based index among the file's frames (the header is #0).
    pub index: usize,
    /// The frame.
    pub frame: Frame,
}

/// Why the last frame of a file was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TornReason {
    /// The file ends inside the frame (header, payload or checksum).
    ShortRead,
    /// The frame is complete but its checksum does not match.
    BadChecksum,
}

/// A torn last frame: the frames before it were kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TornFrame {
    /// Byte offset where the torn frame starts.
    pub offset: u64,
    /// Bytes from there to the end of the file (dropped).
    pub bytes: u64,
    /// Why it was dropped.
    pub reason: TornReason,
}

impl std::fmt::Display for TornFrame {
    /// `torn last frame at byte N (12 bytes): the file ends inside it`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.reason {
            TornReason::ShortRead => "the file ends inside it",
            TornReason::BadChecksum => "its checksum does not match",
        };
        write!(
            f,
            "torn last frame at byte {} ({} bytes dropped): {why}",
            self.offset, self.bytes
        )
    }
}

/// How a frame is damaged ([`DamagedFrame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Damage {
    /// The torn last frame ([`GmrFile::torn`]).
    Torn(TornReason),
    /// A frame whose checksum does not match, followed by a readable frame (or the end of the
    /// file): the bytes up to that frame are lost.
    Corrupt,
    /// A frame whose checksum does not match and after which no frame can be read: the
    /// framing is lost, and the frame and everything after it (`payload`) cannot be read.
    FramingLost,
    /// A frame whose checksum is right but whose payload does not parse ([`DamagedFrame::detail`]
    /// says why): written so by its producer; only it is lost.
    Malformed,
}

/// A frame the reader could not use, with what is left of it, so that its records can be
/// counted as loss (`torn_frame`, `corrupt_frame`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedFrame {
    /// Byte offset of the frame's type field.
    pub offset: u64,
    /// 0-based index among the file's frames (the header is #0).
    pub index: usize,
    /// The frame's type field as read, `None` when the file ends before it. Untrusted for a
    /// checksum mismatch.
    pub frame_type: Option<u32>,
    /// What is wrong.
    pub damage: Damage,
    /// The payload bytes that are in the file (for [`Damage::FramingLost`], every byte after
    /// the frame's 12-byte type and length). Untrusted: a reader may count what it holds, never
    /// meter it.
    pub payload: Vec<u8>,
    /// Whether `payload` holds as many bytes as the frame's length field says (a torn frame
    /// that lacks only its checksum, say).
    pub complete: bool,
    /// Why a malformed frame's payload does not parse; empty otherwise.
    pub detail: String,
}

impl DamagedFrame {
    /// Whether the type field says the frame held a raw activity buffer (untrusted for a
    /// checksum mismatch).
    pub fn is_activity_buffer(&self) -> bool {
        self.frame_type == Some(T_BUFFER)
    }

    /// Whether the frame's type field can be trusted: it was read from a frame cut short by
    /// the end of the file, or from one whose checksum is right (a malformed frame).
    pub fn type_trusted(&self) -> bool {
        matches!(
            self.damage,
            Damage::Torn(TornReason::ShortRead) | Damage::Malformed
        )
    }

    /// Whether the frame is known to hold no records: its type field can be trusted
    /// ([`DamagedFrame::type_trusted`]) and is one of the types that carry none (header, string
    /// table, attribution event, energy sample, end, instruction counts, PM samples, operation
    /// counters).
    pub fn holds_no_records(&self) -> bool {
        self.type_trusted()
            && matches!(
                self.frame_type,
                Some(
                    T_HEADER
                        | T_STRINGS
                        | T_ATTRIBUTION
                        | T_ENERGY
                        | T_END
                        | T_INSTRUCTIONS
                        | T_PM_SAMPLES
                        | T_OP_COUNTS
                )
            )
    }

    /// The PM samples a damaged frame whose type field says PM samples (type 9, trusted or
    /// not) held, as far as its bytes tell: `(device id, count, exact)`; `None` for a frame of
    /// another type, or when no count can be trusted (a payload shorter than its 8-byte
    /// header, or a header count of more samples than the bytes hold and no whole sample in
    /// them).
    ///
    /// The count is the header's when the bytes are the producer's as written (a frame cut
    /// short by the end of the file, or a malformed one) and agree with it: the payload is
    /// exactly `8 + 56 × count` bytes, or is cut short before that. Otherwise it is a lower
    /// bound: the header's count when those samples fit in the bytes
    /// (`count ≤ (len − 8) / 56`), else the count the bytes imply (`(len − 8) / 56`). The
    /// device id is untrusted after a checksum mismatch: the caller places it only on a device
    /// the recording knows.
    pub fn pm_sample_count(&self) -> Option<(u32, u64, bool)> {
        if self.frame_type != Some(T_PM_SAMPLES) {
            return None;
        }
        let header = self.payload.get(..8)?;
        let device = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let count = u64::from(u32::from_le_bytes([
            header[4], header[5], header[6], header[7],
        ]));
        let len = self.payload.len() as u64;
        let written = 8 + count * PM_SAMPLE_LEN as u64;
        if self.type_trusted() && (written == len || (!self.complete && written > len)) {
            return Some((device, count, true));
        }
        let fits = (len - 8) / PM_SAMPLE_LEN as u64;
        if count <= fits {
            Some((device, count, false))
        } else if fits > 0 {
            Some((device, fits, false))
        } else {
            None
        }
    }

    /// The frame as its type field and payload read, when the payload is complete and parses
    /// (the checksum is not checked: for counting what was lost, never for metering).
    pub fn parse(&self) -> Option<Frame> {
        if !self.complete || !self.type_trusted() {
            return None;
        }
        parse_payload(self.frame_type?, &self.payload)
            .ok()
            .flatten()
    }
}

impl std::fmt::Display for DamagedFrame {
    /// `frame #4 at byte 1234 (type 2): torn: the file ends inside it`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "frame #{} at byte {}", self.index, self.offset)?;
        if let Some(t) = self.frame_type {
            write!(f, " (type {t})")?;
        }
        let why = match self.damage {
            Damage::Torn(TornReason::ShortRead) => "torn last frame: the file ends inside it",
            Damage::Torn(TornReason::BadChecksum) => "torn last frame: its checksum does not match",
            Damage::Corrupt => "corrupt: its checksum does not match",
            Damage::FramingLost => {
                "corrupt: its checksum does not match and no readable frame follows, so it and \
                 the rest of the file cannot be read"
            }
            Damage::Malformed => "malformed: its checksum is right but its payload does not parse",
        };
        write!(f, ": {why}")?;
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

/// A read recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GmrFile {
    /// The header.
    pub header: GmrHeader,
    /// The frames after the header, in file order (unknown types and the end frame excluded).
    pub frames: Vec<LocatedFrame>,
    /// Frames of unknown types skipped (their checksums were right).
    pub unknown_frames: u64,
    /// `true` when the file ends with an end frame (the producer closed it).
    pub finished: bool,
    /// The torn last frame, if any.
    pub torn: Option<TornFrame>,
    /// Every frame the reader could not use (the torn one included), in file order.
    pub damaged: Vec<DamagedFrame>,
}

impl GmrFile {
    /// The recording's GPUs and energy samples as a replayable [`gpumeter_nvml::Telemetry`]:
    /// the recorded implementation of the live NVML one. GPUs are indexed by CUDA ordinal
    /// (the header's inventory, plus any ordinal an energy frame names), and each GPU's
    /// [`Telemetry::energy`](gpumeter_nvml::Telemetry::energy) returns its energy frames in
    /// file order, then [`gpumeter_nvml::TelemetryError::Exhausted`].
    pub fn telemetry(&self) -> gpumeter_nvml::Recorded {
        let mut gpus: BTreeMap<u32, gpumeter_nvml::Gpu> = self
            .header
            .devices
            .iter()
            .map(|d| {
                (
                    d.id,
                    gpumeter_nvml::Gpu {
                        index: d.id,
                        name: d.name.clone(),
                        uuid: d.uuid.clone(),
                        mig: d.uuid.as_deref().is_some_and(|u| u.starts_with("MIG-")),
                    },
                )
            })
            .collect();
        let mut readings = Vec::new();
        for f in &self.frames {
            if let Frame::Energy(e) = &f.frame {
                gpus.entry(e.device_id)
                    .or_insert_with(|| gpumeter_nvml::Gpu {
                        index: e.device_id,
                        ..gpumeter_nvml::Gpu::default()
                    });
                readings.push(gpumeter_nvml::EnergyReading {
                    index: e.device_id,
                    timestamp_ns: e.timestamp_ns,
                    energy_mj: e.energy_mj,
                });
            }
        }
        let recorded = gpumeter_nvml::Recorded::new(gpus.into_values().collect());
        for r in readings {
            recorded.push(r);
        }
        recorded
    }
}

/// Tells whether bytes start like a `.gmr` (the 16-byte magic).
pub fn is_gmr(head: &[u8]) -> bool {
    head.starts_with(&GMR_MAGIC)
}

fn frame_crc(frame_type: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&frame_type.to_le_bytes());
    h.update(&(payload.len() as u64).to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Writes a `.gmr`: the preamble and header at construction, then frames, then
/// [`GmrWriter::finish`].
///
/// ```
/// use gpumeter_recording::gmr::{read_gmr, GmrHeader, GmrWriter};
/// let header = GmrHeader { cupti_api_version: 26, ..GmrHeader::default() };
/// let mut w = GmrWriter::new(Vec::<u8>::new(), &header)?;
/// w.write_buffer(&[0u8; 0])?;
/// let bytes = w.finish()?;
/// let file = read_gmr(&bytes)?;
/// assert!(file.finished && file.torn.is_none());
/// assert_eq!(file.header.cupti_api_version, 26);
/// # Ok::<(), gpumeter_recording::gmr::GmrError>(())
/// ```
///
/// Each `write_*` call writes one whole frame with one `write_all`; wrap a file in a
/// `BufWriter` only if losing the buffered frames on a crash is acceptable.
#[derive(Debug)]
pub struct GmrWriter<W: Write> {
    out: Option<W>,
}

impl<W: Write> GmrWriter<W> {
    /// Writes the preamble and the header frame.
    ///
    /// # Errors
    /// [`GmrError::Io`] when writing fails; [`GmrError::Write`] when the header cannot be
    /// serialized.
    pub fn new(mut out: W, header: &GmrHeader) -> Result<Self, GmrError> {
        let mut pre = Vec::with_capacity(GMR_PREAMBLE_LEN);
        pre.extend_from_slice(&GMR_MAGIC);
        pre.extend_from_slice(&GMR_FORMAT_VERSION.to_le_bytes());
        out.write_all(&pre)?;
        let json = serde_json::to_vec(header).map_err(|e| GmrError::Write(e.to_string()))?;
        let mut w = GmrWriter { out: Some(out) };
        w.frame(T_HEADER, &json)?;
        Ok(w)
    }

    fn frame(&mut self, frame_type: u32, payload: &[u8]) -> Result<(), GmrError> {
        let Some(out) = self.out.as_mut() else {
            return Err(GmrError::Write("the writer is finished".to_string()));
        };
        let mut f = Vec::with_capacity(payload.len() + FRAME_OVERHEAD);
        f.extend_from_slice(&frame_type.to_le_bytes());
        f.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        f.extend_from_slice(payload);
        f.extend_from_slice(&frame_crc(frame_type, payload).to_le_bytes());
        out.write_all(&f)?;
        Ok(())
    }

    /// Writes a raw activity buffer (the `validSize` bytes CUPTI handed over).
    ///
    /// # Errors
    /// [`GmrError::Io`].
    pub fn write_buffer(&mut self, bytes: &[u8]) -> Result<(), GmrError> {
        self.frame(T_BUFFER, bytes)
    }

    /// Writes a string table.
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`]; [`GmrError::Write`] for a string over 4 GiB.
    pub fn write_strings(&mut self, table: &StringTable) -> Result<(), GmrError> {
        let mut p = Vec::new();
        for (ptr, text) in &table.entries {
            let len = u32::try_from(text.len())
                .map_err(|_| GmrError::Write(format!("string for {ptr:#x} is over 4 GiB")))?;
            p.extend_from_slice(&ptr.to_le_bytes());
            p.extend_from_slice(&len.to_le_bytes());
            p.extend_from_slice(text.as_bytes());
        }
        self.frame(T_STRINGS, &p)
    }

    /// Writes a dropped-records delta.
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`].
    pub fn write_dropped(&mut self, d: &DroppedRecords) -> Result<(), GmrError> {
        let mut p = Vec::with_capacity(24);
        p.extend_from_slice(&d.device_id.unwrap_or(UNKNOWN_DEVICE).to_le_bytes());
        p.extend_from_slice(&d.context_id.to_le_bytes());
        p.extend_from_slice(&d.stream_id.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&d.count.to_le_bytes());
        self.frame(T_DROPPED, &p)
    }

    /// Writes an attribution event.
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`]; [`GmrError::Write`] for a label over 4 GiB.
    pub fn write_attribution(&mut self, e: &AttributionEvent) -> Result<(), GmrError> {
        let len = u32::try_from(e.label.len())
            .map_err(|_| GmrError::Write("attribution label is over 4 GiB".to_string()))?;
        let mut p = Vec::with_capacity(28 + e.label.len());
        p.extend_from_slice(&e.kind.raw().to_le_bytes());
        p.extend_from_slice(&e.process_id.to_le_bytes());
        p.extend_from_slice(&e.external_id.to_le_bytes());
        p.extend_from_slice(&e.timestamp_ns.to_le_bytes());
        p.extend_from_slice(&len.to_le_bytes());
        p.extend_from_slice(e.label.as_bytes());
        self.frame(T_ATTRIBUTION, &p)
    }

    /// Writes an energy sample.
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`].
    pub fn write_energy(&mut self, s: &EnergySample) -> Result<(), GmrError> {
        let mut p = Vec::with_capacity(24);
        p.extend_from_slice(&s.device_id.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&s.timestamp_ns.to_le_bytes());
        p.extend_from_slice(&s.energy_mj.to_le_bytes());
        self.frame(T_ENERGY, &p)
    }

    /// Writes the instruction counts of one launch.
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`]; [`GmrError::Write`] for more than `u32::MAX` functions
    /// or a name over 4 GiB.
    pub fn write_instructions(&mut self, c: &InstructionCounts) -> Result<(), GmrError> {
        let count = u32::try_from(c.functions.len())
            .map_err(|_| GmrError::Write("more than u32::MAX functions".to_string()))?;
        let mut p =
            Vec::with_capacity(16 + c.functions.iter().map(|f| 12 + f.name.len()).sum::<usize>());
        p.extend_from_slice(&c.correlation_id.to_le_bytes());
        p.extend_from_slice(&c.device_id.to_le_bytes());
        p.extend_from_slice(&c.context_id.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        for f in &c.functions {
            let len = u32::try_from(f.name.len())
                .map_err(|_| GmrError::Write("function name is over 4 GiB".to_string()))?;
            p.extend_from_slice(&f.warp_instructions.to_le_bytes());
            p.extend_from_slice(&len.to_le_bytes());
            p.extend_from_slice(f.name.as_bytes());
        }
        self.frame(T_INSTRUCTIONS, &p)
    }

    /// Writes a batch of PM samples of one device (frame type 9).
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`]; [`GmrError::Write`] for more than `u32::MAX` samples.
    pub fn write_pm_samples(&mut self, s: &PmSamples) -> Result<(), GmrError> {
        let count = u32::try_from(s.samples.len())
            .map_err(|_| GmrError::Write("more than u32::MAX PM samples in a frame".to_string()))?;
        let mut p = Vec::with_capacity(8 + PM_SAMPLE_LEN * s.samples.len());
        p.extend_from_slice(&s.device_id.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        for x in &s.samples {
            let mut flags = 0u32;
            if x.overflow {
                flags |= PM_FLAG_OVERFLOW;
            }
            let counters = [
                (x.sm_active_cycles, PM_FLAG_SM_ACTIVE),
                (x.sm_elapsed_cycles, PM_FLAG_SM_ELAPSED),
                (x.dram_read_bytes, PM_FLAG_DRAM_READ),
                (x.dram_write_bytes, PM_FLAG_DRAM_WRITE),
            ];
            for (v, bit) in counters {
                if v.is_some() {
                    flags |= bit;
                }
            }
            p.extend_from_slice(&flags.to_le_bytes());
            p.extend_from_slice(&0u32.to_le_bytes());
            p.extend_from_slice(&x.start_ns.to_le_bytes());
            p.extend_from_slice(&x.end_ns.to_le_bytes());
            for (v, _) in counters {
                p.extend_from_slice(&v.unwrap_or(0).to_le_bytes());
            }
        }
        self.frame(T_PM_SAMPLES, &p)
    }

    /// Writes the operation counters of one context's kernel launches (frame type 10).
    ///
    /// # Errors
    /// As [`GmrWriter::write_buffer`]; [`GmrError::Write`] for more than `u32::MAX` kernels or
    /// metrics, or a metric name over 4 GiB. The writer does not check what the reader
    /// refuses (a zero or repeated correlation id, an empty or repeated metric name): such a
    /// frame reads as malformed.
    pub fn write_op_counts(&mut self, c: &OpCounters) -> Result<(), GmrError> {
        let too_many = |what: &str| GmrError::Write(format!("more than u32::MAX {what}"));
        let count = u32::try_from(c.kernels.len()).map_err(|_| too_many("kernels"))?;
        let mut p = Vec::with_capacity(16);
        p.extend_from_slice(&c.device_id.to_le_bytes());
        p.extend_from_slice(&c.context_id.to_le_bytes());
        p.extend_from_slice(&c.passes.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        for k in &c.kernels {
            let metrics = u32::try_from(k.counters.len()).map_err(|_| too_many("metrics"))?;
            p.extend_from_slice(&k.correlation_id.to_le_bytes());
            p.extend_from_slice(&metrics.to_le_bytes());
            for m in &k.counters {
                let len = u32::try_from(m.metric.len())
                    .map_err(|_| GmrError::Write("metric name is over 4 GiB".to_string()))?;
                p.extend_from_slice(&m.value.to_le_bytes());
                p.extend_from_slice(&len.to_le_bytes());
                p.extend_from_slice(m.metric.as_bytes());
            }
        }
        self.frame(T_OP_COUNTS, &p)
    }

    /// Writes any [`Frame`].
    ///
    /// # Errors
    /// As the specific `write_*` method.
    pub fn write_frame(&mut self, frame: &Frame) -> Result<(), GmrError> {
        match frame {
            Frame::ActivityBuffer(b) => self.write_buffer(b),
            Frame::StringTable(t) => self.write_strings(t),
            Frame::Dropped(d) => self.write_dropped(d),
            Frame::Attribution(a) => self.write_attribution(a),
            Frame::Energy(e) => self.write_energy(e),
            Frame::Instructions(c) => self.write_instructions(c),
            Frame::PmSamples(s) => self.write_pm_samples(s),
            Frame::OpCounts(c) => self.write_op_counts(c),
        }
    }

    /// Writes the end frame, flushes, and returns the output.
    ///
    /// # Errors
    /// [`GmrError::Io`].
    pub fn finish(mut self) -> Result<W, GmrError> {
        self.frame(T_END, &[])?;
        let Some(mut out) = self.out.take() else {
            return Err(GmrError::Write("the writer is finished".to_string()));
        };
        out.flush()?;
        Ok(out)
    }
}

/// Little-endian field reader over a payload; `None` past its end.
struct Fields<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
    }
    fn done(&self) -> bool {
        self.at >= self.b.len()
    }
}

fn parse_strings(p: &[u8]) -> Result<StringTable, String> {
    let mut f = Fields { b: p, at: 0 };
    let mut t = StringTable::new();
    while !f.done() {
        let at = f.at;
        let ptr = f
            .u64()
            .ok_or_else(|| format!("string entry at payload byte {at} is cut short"))?;
        let len = f
            .u32()
            .ok_or_else(|| format!("string entry at payload byte {at} is cut short"))?;
        let bytes = f.take(len as usize).ok_or_else(|| {
            format!("string entry at payload byte {at} ({len} bytes) runs past the payload")
        })?;
        let text = std::str::from_utf8(bytes)
            .map_err(|e| format!("string entry at payload byte {at} is not UTF-8: {e}"))?;
        t.insert(ptr, text);
    }
    Ok(t)
}

pub(crate) fn parse_payload(frame_type: u32, p: &[u8]) -> Result<Option<Frame>, String> {
    let short = |what: &str| format!("{what} payload of {} bytes is too short", p.len());
    let mut f = Fields { b: p, at: 0 };
    Ok(Some(match frame_type {
        T_BUFFER => Frame::ActivityBuffer(p.to_vec()),
        T_STRINGS => Frame::StringTable(parse_strings(p)?),
        T_DROPPED => {
            let (Some(device), Some(context_id), Some(stream_id), Some(_), Some(count)) =
                (f.u32(), f.u32(), f.u32(), f.u32(), f.u64())
            else {
                return Err(short("dropped-records"));
            };
            Frame::Dropped(DroppedRecords {
                device_id: (device != UNKNOWN_DEVICE).then_some(device),
                context_id,
                stream_id,
                count,
            })
        }
        T_ATTRIBUTION => {
            let (Some(kind), Some(process_id), Some(external_id), Some(timestamp_ns), Some(len)) =
                (f.u32(), f.u32(), f.u64(), f.u64(), f.u32())
            else {
                return Err(short("attribution"));
            };
            let label = f
                .take(len as usize)
                .ok_or_else(|| format!("attribution label of {len} bytes runs past the payload"))?;
            let label = std::str::from_utf8(label)
                .map_err(|e| format!("attribution label is not UTF-8: {e}"))?;
            Frame::Attribution(AttributionEvent {
                kind: AttributionKind::from_raw(kind),
                process_id,
                external_id,
                timestamp_ns,
                label: label.to_string(),
            })
        }
        T_ENERGY => {
            let (Some(device_id), Some(_), Some(timestamp_ns), Some(energy_mj)) =
                (f.u32(), f.u32(), f.u64(), f.u64())
            else {
                return Err(short("energy"));
            };
            Frame::Energy(EnergySample {
                device_id,
                timestamp_ns,
                energy_mj,
            })
        }
        T_INSTRUCTIONS => Frame::Instructions(parse_instructions(p)?),
        T_PM_SAMPLES => Frame::PmSamples(parse_pm_samples(p)?),
        T_OP_COUNTS => Frame::OpCounts(parse_op_counts(p)?),
        _ => return Ok(None),
    }))
}

fn parse_instructions(p: &[u8]) -> Result<InstructionCounts, String> {
    let mut f = Fields { b: p, at: 0 };
    let (Some(correlation_id), Some(device_id), Some(context_id), Some(count)) =
        (f.u32(), f.u32(), f.u32(), f.u32())
    else {
        return Err(format!(
            "instruction-counts payload of {} bytes is too short",
            p.len()
        ));
    };
    // No allocation from `count` before the entries are there: each takes 12 bytes or more.
    let mut functions = Vec::with_capacity((count as usize).min(p.len() / 12));
    for i in 0..count {
        let at = f.at;
        let cut = || format!("function {i} of {count} at payload byte {at} is cut short");
        let (Some(warp_instructions), Some(len)) = (f.u64(), f.u32()) else {
            return Err(cut());
        };
        let name = f.take(len as usize).ok_or_else(|| {
            format!("function {i} name of {len} bytes at payload byte {at} runs past the payload")
        })?;
        let name = std::str::from_utf8(name)
            .map_err(|e| format!("function {i} name at payload byte {at} is not UTF-8: {e}"))?;
        functions.push(FunctionInstructions {
            name: name.to_string(),
            warp_instructions,
        });
    }
    Ok(InstructionCounts {
        correlation_id,
        device_id,
        context_id,
        functions,
    })
}

fn parse_op_counts(p: &[u8]) -> Result<OpCounters, String> {
    let mut f = Fields { b: p, at: 0 };
    let (Some(device_id), Some(context_id), Some(passes), Some(count)) =
        (f.u32(), f.u32(), f.u32(), f.u32())
    else {
        return Err(format!(
            "operation-counters payload of {} bytes is too short",
            p.len()
        ));
    };
    // Kernels and metrics are numbered from #0, as frames are.
    let mut seen = BTreeMap::new();
    // No allocation from `count` before the entries are there: each takes 8 bytes or more.
    let mut kernels = Vec::with_capacity((count as usize).min(p.len() / 8));
    for i in 0..count {
        let at = f.at;
        let kernel = || format!("kernel #{i} of {count} (at payload byte {at})");
        let (Some(correlation_id), Some(metrics)) = (f.u32(), f.u32()) else {
            return Err(format!("{} is cut short", kernel()));
        };
        if correlation_id == 0 {
            return Err(format!("{} has correlation id 0", kernel()));
        }
        if let Some(first) = seen.insert(correlation_id, i) {
            return Err(format!(
                "{} repeats correlation id {correlation_id} of kernel #{first}",
                kernel()
            ));
        }
        let mut counters: Vec<OpCounterValue> =
            Vec::with_capacity((metrics as usize).min(p.len() / 12));
        for j in 0..metrics {
            let at = f.at;
            let metric = || format!("{} metric #{j} (at payload byte {at})", kernel());
            let (Some(value), Some(len)) = (f.u64(), f.u32()) else {
                return Err(format!("{} is cut short", metric()));
            };
            let name = f.take(len as usize).ok_or_else(|| {
                format!("{}'s name of {len} bytes runs past the payload", metric())
            })?;
            let name = std::str::from_utf8(name)
                .map_err(|e| format!("{}'s name is not UTF-8: {e}", metric()))?;
            if name.is_empty() {
                return Err(format!("{} has an empty name", metric()));
            }
            if counters.iter().any(|c| c.metric == name) {
                return Err(format!("{} repeats the metric {name}", metric()));
            }
            counters.push(OpCounterValue {
                metric: name.to_string(),
                value,
            });
        }
        kernels.push(KernelOpCounters {
            correlation_id,
            counters,
        });
    }
    if !f.done() {
        return Err(format!(
            "operation-counters payload of {} bytes has {} bytes after its {count} kernels",
            p.len(),
            p.len() - f.at
        ));
    }
    Ok(OpCounters {
        device_id,
        context_id,
        passes,
        kernels,
    })
}

fn parse_pm_samples(p: &[u8]) -> Result<PmSamples, String> {
    let mut f = Fields { b: p, at: 0 };
    let (Some(device_id), Some(count)) = (f.u32(), f.u32()) else {
        return Err(format!(
            "PM-samples payload of {} bytes is too short",
            p.len()
        ));
    };
    let want = (count as u64) * PM_SAMPLE_LEN as u64 + 8;
    if p.len() as u64 != want {
        return Err(format!(
            "PM-samples payload of {} bytes does not hold its {count} samples ({want} bytes)",
            p.len()
        ));
    }
    let mut samples = Vec::with_capacity(count as usize);
    for i in 0..count {
        // Samples are numbered from #0, as frames are; the byte offset removes any doubt.
        let name = || {
            format!(
                "PM sample #{i} of {count} (numbered from #0, at payload byte {})",
                8 + u64::from(i) * PM_SAMPLE_LEN as u64
            )
        };
        let (
            Some(flags),
            Some(reserved),
            Some(start_ns),
            Some(end_ns),
            Some(active),
            Some(elapsed),
            Some(read),
            Some(write),
        ) = (
            f.u32(),
            f.u32(),
            f.u64(),
            f.u64(),
            f.u64(),
            f.u64(),
            f.u64(),
            f.u64(),
        )
        else {
            return Err(format!("{} is cut short", name()));
        };
        if flags & !PM_FLAGS_KNOWN != 0 {
            return Err(format!(
                "{} has unknown flag bits {:#x}",
                name(),
                flags & !PM_FLAGS_KNOWN
            ));
        }
        // Both are written 0: anything else is not this format's (a newer producer's field,
        // or bytes that only look like a sample).
        if reserved != 0 {
            return Err(format!(
                "{} has a nonzero reserved field {reserved:#x} (written 0)",
                name()
            ));
        }
        for (bit, field, v) in [
            (PM_FLAG_SM_ACTIVE, "sm_active_cycles", active),
            (PM_FLAG_SM_ELAPSED, "sm_elapsed_cycles", elapsed),
            (PM_FLAG_DRAM_READ, "dram_read_bytes", read),
            (PM_FLAG_DRAM_WRITE, "dram_write_bytes", write),
        ] {
            if flags & bit == 0 && v != 0 {
                return Err(format!(
                    "{} has {field} {v} with its presence flag {bit:#x} clear (an absent \
                     counter is written 0)",
                    name()
                ));
            }
        }
        let has = |bit: u32, v: u64| (flags & bit != 0).then_some(v);
        samples.push(gpumeter_core::PmSample {
            start_ns,
            end_ns,
            sm_active_cycles: has(PM_FLAG_SM_ACTIVE, active),
            sm_elapsed_cycles: has(PM_FLAG_SM_ELAPSED, elapsed),
            dram_read_bytes: has(PM_FLAG_DRAM_READ, read),
            dram_write_bytes: has(PM_FLAG_DRAM_WRITE, write),
            overflow: flags & PM_FLAG_OVERFLOW != 0,
        });
    }
    Ok(PmSamples { device_id, samples })
}

/// One frame as cut from the bytes, before its payload is parsed.
pub(crate) enum Cut<'a> {
    Whole {
        frame_type: u32,
        payload: &'a [u8],
        next: usize,
    },
    /// The torn last frame: its type when it is there, the payload bytes that are there, and
    /// whether they are all the length field says.
    Torn(TornFrame, Option<u32>, &'a [u8], bool),
    BadCrc {
        frame_type: u32,
    },
}

pub(crate) fn cut(bytes: &[u8], at: usize) -> Cut<'_> {
    let rest = bytes.get(at..).unwrap_or(&[]);
    let t = |reason| TornFrame {
        offset: at as u64,
        bytes: rest.len() as u64,
        reason,
    };
    fn torn(t: TornFrame, frame_type: Option<u32>, payload: &[u8], complete: bool) -> Cut<'_> {
        Cut::Torn(t, frame_type, payload, complete)
    }
    let mut f = Fields { b: rest, at: 0 };
    let frame_type = f.u32();
    let (Some(frame_type), Some(len)) = (frame_type, f.u64()) else {
        return torn(t(TornReason::ShortRead), frame_type, &[], false);
    };
    let there = rest.get(12..).unwrap_or(&[]);
    let Ok(len) = usize::try_from(len) else {
        return torn(t(TornReason::ShortRead), Some(frame_type), there, false);
    };
    let Some(payload) = f.take(len) else {
        return torn(t(TornReason::ShortRead), Some(frame_type), there, false);
    };
    let Some(crc) = f.u32() else {
        return torn(t(TornReason::ShortRead), Some(frame_type), payload, true);
    };
    if frame_crc(frame_type, payload) != crc {
        if f.done() {
            return torn(t(TornReason::BadChecksum), Some(frame_type), payload, true);
        }
        return Cut::BadCrc { frame_type };
    }
    Cut::Whole {
        frame_type,
        payload,
        next: at + f.at,
    }
}

/// The first offset after the corrupt frame at `at` where a frame reads whole (checksum right);
/// `None` when none does before the end of the file or within `budget` (bytes of checksums
/// computed, charged as it goes).
fn resync(bytes: &[u8], at: usize, budget: &mut u64) -> Option<usize> {
    let mut p = at + 1;
    while p < bytes.len() {
        let mut f = Fields {
            b: bytes.get(p..).unwrap_or(&[]),
            at: 0,
        };
        // A candidate: a known frame type (not the header) whose payload and checksum fit.
        if let (Some(t), Some(len)) = (f.u32(), f.u64()) {
            let fits = usize::try_from(len)
                .ok()
                .and_then(|l| l.checked_add(FRAME_OVERHEAD))
                .is_some_and(|n| n <= bytes.len() - p);
            if (T_BUFFER..=T_LAST).contains(&t) && fits {
                *budget = budget.saturating_sub(len.saturating_add(16));
                if *budget == 0 {
                    return None;
                }
                if matches!(cut(bytes, p), Cut::Whole { .. }) {
                    return Some(p);
                }
            }
        }
        *budget = budget.saturating_sub(1);
        if *budget == 0 {
            return None;
        }
        p += 1;
    }
    None
}

/// Reads a whole `.gmr` from memory.
///
/// # Errors
/// [`GmrError::NotGmr`], [`GmrError::UnsupportedFormatVersion`], [`GmrError::BadHeader`];
/// [`GmrError::CorruptFrame`] for data after the end frame or a second header;
/// [`GmrError::BadPayload`] for a frame whose checksum is right but whose payload does not
/// parse. A torn last frame and frames whose checksum does not match are not errors: they are
/// listed in [`GmrFile::damaged`] (module docs, "Damage").
pub fn read_gmr(bytes: &[u8]) -> Result<GmrFile, GmrError> {
    let (Some(magic), Some(version)) = (bytes.get(0..16), bytes.get(16..20)) else {
        return Err(GmrError::NotGmr);
    };
    if magic != GMR_MAGIC {
        return Err(GmrError::NotGmr);
    }
    let version = u32::from_le_bytes([version[0], version[1], version[2], version[3]]);
    if version != GMR_FORMAT_VERSION {
        return Err(GmrError::UnsupportedFormatVersion(version));
    }
    let bad_header = |reason: String| GmrError::BadHeader {
        offset: GMR_PREAMBLE_LEN as u64,
        reason,
    };
    let (header, mut at) = match cut(bytes, GMR_PREAMBLE_LEN) {
        Cut::Whole {
            frame_type: T_HEADER,
            payload,
            next,
        } => {
            let h: GmrHeader = serde_json::from_slice(payload)
                .map_err(|e| bad_header(format!("not a valid header: {e}")))?;
            (h, next)
        }
        Cut::Whole { frame_type, .. } => {
            return Err(bad_header(format!(
                "the first frame has type {frame_type}, not 1 (header)"
            )))
        }
        Cut::Torn(t, ..) => return Err(bad_header(t.to_string())),
        Cut::BadCrc { .. } => return Err(bad_header("checksum mismatch".to_string())),
    };
    let mut file = GmrFile {
        header,
        frames: Vec::new(),
        unknown_frames: 0,
        finished: false,
        torn: None,
        damaged: Vec::new(),
    };
    let mut index = 0usize;
    // Resyncing after corruption checks candidate frames' checksums: bounded, so that a file
    // of many candidates costs at most a few passes over its bytes.
    let mut resync_budget = (bytes.len() as u64)
        .saturating_mul(4)
        .saturating_add(1 << 20);
    while at < bytes.len() {
        index += 1;
        let offset = at as u64;
        if file.finished {
            return Err(GmrError::CorruptFrame {
                offset,
                index,
                frame_type: 0,
                reason: "data after the end frame".to_string(),
            });
        }
        match cut(bytes, at) {
            Cut::Torn(t, frame_type, payload, complete) => {
                file.torn = Some(t);
                file.damaged.push(DamagedFrame {
                    offset,
                    index,
                    frame_type,
                    damage: Damage::Torn(t.reason),
                    payload: payload.to_vec(),
                    complete,
                    detail: String::new(),
                });
                break;
            }
            Cut::BadCrc { frame_type, .. } => {
                // Nothing of the frame can be trusted, its length included: resume at the
                // first frame after it that reads whole (or the end of the file), else the
                // framing is lost from here on.
                match resync(bytes, at, &mut resync_budget) {
                    Some(next) => {
                        file.damaged.push(DamagedFrame {
                            offset,
                            index,
                            frame_type: Some(frame_type),
                            damage: Damage::Corrupt,
                            payload: bytes.get(at + 12..next).unwrap_or(&[]).to_vec(),
                            complete: true,
                            detail: String::new(),
                        });
                        at = next;
                        continue;
                    }
                    None => {
                        file.damaged.push(DamagedFrame {
                            offset,
                            index,
                            frame_type: Some(frame_type),
                            damage: Damage::FramingLost,
                            payload: bytes.get(at + 12..).unwrap_or(&[]).to_vec(),
                            complete: false,
                            detail: String::new(),
                        });
                        break;
                    }
                }
            }
            Cut::Whole {
                frame_type,
                payload,
                next,
            } => {
                at = next;
                if frame_type == T_END {
                    file.finished = true;
                    continue;
                }
                if frame_type == T_HEADER {
                    return Err(GmrError::CorruptFrame {
                        offset,
                        index,
                        frame_type,
                        reason: "a second header frame".to_string(),
                    });
                }
                match parse_payload(frame_type, payload) {
                    Ok(Some(frame)) => file.frames.push(LocatedFrame {
                        offset,
                        index,
                        frame,
                    }),
                    Ok(None) => file.unknown_frames += 1,
                    Err(reason) => file.damaged.push(DamagedFrame {
                        offset,
                        index,
                        frame_type: Some(frame_type),
                        damage: Damage::Malformed,
                        payload: payload.to_vec(),
                        complete: true,
                        detail: reason,
                    }),
                }
            }
        }
    }
    Ok(file)
}

/// Reads a whole `.gmr` from a reader (into memory, then as [`read_gmr`]).
///
/// # Errors
/// [`GmrError::Io`] when reading fails; otherwise as [`read_gmr`].
pub fn read_gmr_from<R: Read>(mut r: R) -> Result<GmrFile, GmrError> {
    let mut bytes = Vec::new();
    r.read_to_end(&mut bytes)?;
    read_gmr(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Each sample's flags masked to `mask`; with `zeroed`, its reserved field and the counters
    /// whose presence flag is clear written 0, as the format says.
    fn shaped(
        samples: &[[u8; PM_SAMPLE_LEN]],
        mask: u32,
        zeroed: bool,
    ) -> Vec<[u8; PM_SAMPLE_LEN]> {
        samples
            .iter()
            .map(|s| {
                let mut s = *s;
                let flags = u32::from_le_bytes([s[0], s[1], s[2], s[3]]) & mask;
                s[..4].copy_from_slice(&flags.to_le_bytes());
                if zeroed {
                    s[4..8].fill(0);
                    for (i, bit) in PM_COUNTER_FLAGS.iter().enumerate() {
                        if flags & bit == 0 {
                            s[24 + 8 * i..32 + 8 * i].fill(0);
                        }
                    }
                }
                s
            })
            .collect()
    }

    /// The presence flags of the four counters, in their order in a sample.
    const PM_COUNTER_FLAGS: [u32; 4] = [
        PM_FLAG_SM_ACTIVE,
        PM_FLAG_SM_ELAPSED,
        PM_FLAG_DRAM_READ,
        PM_FLAG_DRAM_WRITE,
    ];

    /// A PM-samples payload of `count` (as written) and the 56-byte `samples`.
    fn payload(count: u32, samples: &[[u8; PM_SAMPLE_LEN]]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&3u32.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        for s in samples {
            p.extend_from_slice(s);
        }
        p
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any bytes as a type-9 payload: an error or samples, never a panic, and never an
        /// allocation sized by a count the payload does not hold.
        #[test]
        fn pm_payload_of_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            match parse_payload(T_PM_SAMPLES, &bytes) {
                Ok(Some(Frame::PmSamples(p))) => {
                    prop_assert_eq!(bytes.len(), 8 + PM_SAMPLE_LEN * p.samples.len());
                }
                Ok(other) => prop_assert!(false, "{:?}", other),
                Err(_) => {}
            }
        }

        /// Well-sized payloads: parsed exactly when the count matches, no unknown flag bit is
        /// set, the reserved field is 0 and so is every counter whose presence flag is clear;
        /// each field read from its place.
        #[test]
        fn pm_payload_parses_exactly_the_valid_ones(
            raw in proptest::collection::vec(any::<[u8; PM_SAMPLE_LEN]>(), 0..6),
            off_by in prop_oneof![Just(0i64), -2i64..3],
            known_only in any::<bool>(),
            zeroed in prop_oneof![3 => Just(true), 1 => Just(false)],
        ) {
            let mask = if known_only { PM_FLAGS_KNOWN } else { u32::MAX };
            let samples = shaped(&raw, mask, zeroed);
            let count = (samples.len() as i64 + off_by).max(0) as u32;
            let p = payload(count, &samples);
            let flags_of = |s: &[u8; PM_SAMPLE_LEN]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            let word = |s: &[u8; PM_SAMPLE_LEN], i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&s[8 + 8 * i..16 + 8 * i]);
                u64::from_le_bytes(b)
            };
            let unknown = samples.iter().any(|s| flags_of(s) & !PM_FLAGS_KNOWN != 0);
            let stray = samples.iter().any(|s| {
                s[4..8] != [0; 4]
                    || PM_COUNTER_FLAGS
                        .iter()
                        .enumerate()
                        .any(|(i, bit)| flags_of(s) & bit == 0 && word(s, 2 + i) != 0)
            });
            let got = parse_payload(T_PM_SAMPLES, &p);
            let valid = count as usize == samples.len() && !unknown && !stray;
            prop_assert_eq!(got.is_ok(), valid, "{:?}", got);
            if let Ok(Some(Frame::PmSamples(pm))) = got {
                prop_assert_eq!(pm.device_id, 3);
                prop_assert_eq!(pm.samples.len(), samples.len());
                for (x, s) in pm.samples.iter().zip(&samples) {
                    let flags = flags_of(s);
                    prop_assert_eq!(x.overflow, flags & PM_FLAG_OVERFLOW != 0);
                    prop_assert_eq!((x.start_ns, x.end_ns), (word(s, 0), word(s, 1)));
                    let has = |bit: u32, i: usize| (flags & bit != 0).then(|| word(s, i));
                    prop_assert_eq!(x.sm_active_cycles, has(PM_FLAG_SM_ACTIVE, 2));
                    prop_assert_eq!(x.sm_elapsed_cycles, has(PM_FLAG_SM_ELAPSED, 3));
                    prop_assert_eq!(x.dram_read_bytes, has(PM_FLAG_DRAM_READ, 4));
                    prop_assert_eq!(x.dram_write_bytes, has(PM_FLAG_DRAM_WRITE, 5));
                }
            }
        }
    }
}
