//! The usage report, `gpumeter.usage/v1`: what was metered, per tenant, device,
//! window and meter, as integers in each meter's canonical unit.

use std::collections::BTreeMap;

use crate::warning::{NotMeterableCode, Warning, WarningCode};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Schema id written into every usage report.
pub const USAGE_SCHEMA: &str = "gpumeter.usage/v1";
/// Metering policy written into every usage report.
pub const METERING_POLICY: &str = "v1";

/// The format of a stream of CUPTI buffers metered one by one (the C ABI's meter) in a drained
/// report: the report holds windows no other report of the stream holds, so
/// [`crate::merge_reports`] merges the drained reports of one stream (same source SHA-256)
/// when their windows are disjoint.
pub const STREAM_FORMAT: &str = "cupti-stream";

/// The format of a stream's source in a snapshot ([`crate::Meter::snapshot`] of a meter still
/// running): its windows may be handed over again later, so a snapshot never merges with
/// another report of the same stream.
pub const STREAM_SNAPSHOT_FORMAT: &str = "cupti-stream-snapshot";

/// A non-negative integer quantity in a meter's canonical unit (ns, SM·ns, bytes, count),
/// written as a decimal string in JSON so no reader loses precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Quantity(pub u128);

impl Serialize for Quantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_string())
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(serde::de::Error::custom(format!(
                "quantity `{s}` is not a decimal string of digits"
            )));
        }
        s.parse::<u128>()
            .map(Quantity)
            .map_err(|_| serde::de::Error::custom(format!("quantity `{s}` exceeds u128")))
    }
}

impl std::fmt::Display for Quantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Declares the meter registry from one list: the [`MeterKind`] enum (a variant per entry, in
/// entry order, which is report order) and [`METERS`] (the entry's row, whose length the list
/// gives). A new meter is one entry here; nothing else in this file counts or names meters.
macro_rules! meter_registry {
    ($($(#[doc = $doc:literal])* $kind:ident => ($name:literal, $dim:path, $booking:ident, $split:ident, $needs:ident),)*) => {
        /// The meters of policy v1, with their canonical units.
        ///
        /// Each meter's facts (name, dimension, how it is booked and split, what it needs) are
        /// one row of [`METERS`], the meter registry; [`MeterKind::as_str`] and
        /// [`MeterKind::dimension`] read it. A new meter is an entry of the registry's one list
        /// (in `report.rs`, in report order) and its booking in one file of `meter/`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[repr(u8)]
        pub enum MeterKind {
            $($(#[doc = $doc])* $kind,)*
        }

        /// The meter registry: every meter of policy v1, in report order (row `i` is the meter
        /// whose discriminant is `i`, checked at compile time). Both JSON Schemas' meter lists
        /// are this list (a root test holds them to it).
        pub const METERS: [MeterSpec; [$(MeterKind::$kind),*].len()] = {
            use {Booking::*, Dimension as D, Needs::*, Split::*};
            [$(spec(MeterKind::$kind, $name, $dim, $booking, $split, $needs)),*]
        };
    };
}

#[rustfmt::skip]
meter_registry! {
    /// Union of work intervals, ns; divided equally among tenants with work at an instant.
    GpuBusyNs        => ("gpu_busy_ns",        D::Time,       Sweep,              EquallyAmongRunning, Records),
    /// Σ kernel (end − start), ns.
    KernelNs         => ("kernel_ns",          D::Time,       SplitAtWindowEdges, PerRecord,           Records),
    /// Number of kernel records, count.
    KernelLaunches   => ("kernel_launches",    D::Count,      AtStart,            PerRecord,           Records),
    /// Σ kernel duration × SMs held, capped at the device's SMs, SM·ns.
    SmNs             => ("sm_ns",              D::SmTime,     Sweep,              CappedShares,        SmCountAndGrids),
    /// Σ kernel SM·ns × resident warps per SM, warp·ns.
    WarpNs           => ("warp_ns",            D::WarpTime,   Sweep,              CappedShares,        Occupancy),
    /// Host-to-device bytes.
    MemcpyHtodBytes  => ("memcpy_htod_bytes",  D::Bytes,      AtStart,            PerRecord,           Records),
    /// Device-to-host bytes.
    MemcpyDtohBytes  => ("memcpy_dtoh_bytes",  D::Bytes,      AtStart,            PerRecord,           Records),
    /// Device-to-device bytes.
    MemcpyDtodBytes  => ("memcpy_dtod_bytes",  D::Bytes,      AtStart,            PerRecord,           Records),
    /// Peer bytes.
    MemcpyPeerBytes  => ("memcpy_peer_bytes",  D::Bytes,      AtStart,            PerRecord,           Records),
    /// Other copy bytes.
    MemcpyOtherBytes => ("memcpy_other_bytes", D::Bytes,      AtStart,            PerRecord,           Records),
    /// Bytes set by memsets.
    MemsetBytes      => ("memset_bytes",       D::Bytes,      AtStart,            PerRecord,           Records),
    /// Σ allocation bytes × time held, byte·ns.
    MemoryByteNs     => ("memory_byte_ns",     D::ByteTime,   WhileHeld,          PerRecord,           Records),
    /// Warp-level instructions executed, count.
    WarpInstructions => ("warp_instructions",  D::Count,      AtStart,            PerRecord,           EveryKernelCounted),
    /// Energy, mJ.
    EnergyMj         => ("energy_mj",          D::Energy,     Counter,            BySmNs,              EnergySamplesAndSmNs),
    /// SM activity the hardware measured (CUPTI PM sampling), SM·ns.
    SmActiveNs       => ("sm_active_ns",       D::SmTime,     Sampled,            BySmNsPerSample,     PmSamplesAndSmNs),
    /// Device-memory traffic the hardware measured (CUPTI PM sampling), bytes read + written.
    DramBytes        => ("dram_bytes",         D::Bytes,      Sampled,            BySmNsPerSample,     PmSamplesAndSmNs),
    /// Double-precision floating-point operations (SASS op counters: add, mul 1; FMA 2), FLOP.
    FlopsFp64        => ("flops_fp64",         D::Operations, AtStart,            PerRecord,           EveryKernelOpCounted),
    /// Single-precision floating-point operations (as `flops_fp64`), FLOP.
    FlopsFp32        => ("flops_fp32",         D::Operations, AtStart,            PerRecord,           EveryKernelOpCounted),
    /// Half-precision floating-point operations (as `flops_fp64`), FLOP.
    FlopsFp16        => ("flops_fp16",         D::Operations, AtStart,            PerRecord,           EveryKernelOpCounted),
    /// Tensor-core math operations (the tensor-path operation counters), operations.
    TensorOps        => ("tensor_ops",         D::Operations, AtStart,            PerRecord,           EveryKernelOpCounted),
}

/// The canonical unit's dimension of a meter, for price-book unit checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dimension {
    /// Time, canonical ns.
    Time,
    /// SM·time, canonical SM·ns.
    SmTime,
    /// Warp·time, canonical warp·ns.
    WarpTime,
    /// Bytes, canonical byte.
    Bytes,
    /// Byte·time, canonical byte·ns.
    ByteTime,
    /// A count, canonical 1.
    Count,
    /// Energy, canonical mJ.
    Energy,
    /// Arithmetic operations, canonical 1 operation (priced in `FLOP`, `GFLOP`, `TFLOP`,
    /// `PFLOP`).
    Operations,
}

/// When and where a meter's quantity is booked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Booking {
    /// Once per record, to the window of its start (counts and bytes).
    AtStart,
    /// Per record, its duration split at window edges (`kernel_ns`).
    SplitAtWindowEdges,
    /// Per elementary interval of the sweep, from the work running in it (`meter/sweep.rs`).
    Sweep,
    /// Per allocation, for as long as it is held, split at window edges (`meter/memory.rs`).
    WhileHeld,
    /// Per window, from a device counter interpolated between samples (`meter/energy.rs`).
    Counter,
    /// Per hardware sample interval (CUPTI PM sampling), split at window edges
    /// (`meter/pm.rs`).
    Sampled,
}

/// How a cell's quantity is split among tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// Each record's attribution key gets its own quantity (exact integers).
    PerRecord,
    /// Each elementary interval's length equally among the distinct tenants running, then
    /// largest remainder.
    EquallyAmongRunning,
    /// Each kernel's share, scaled by the partition and device cap factors, then largest
    /// remainder over the floored total.
    CappedShares,
    /// In proportion to the tenants' `sm_ns` in the window ([`crate::IDLE`] when none), then
    /// largest remainder.
    BySmNs,
    /// Each sample interval's quantity (per window it overlaps) in proportion to the modelled
    /// `sm_ns` in that interval ([`crate::IDLE`] when none), then largest remainder.
    BySmNsPerSample,
}

/// What a device must give for a meter to be meterable there (else `not_meterable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Needs {
    /// Nothing beyond the records.
    Records,
    /// The device's SM count and every kernel's grid.
    SmCountAndGrids,
    /// As [`Needs::SmCountAndGrids`], plus the compute capability and every kernel's launch
    /// configuration the occupancy calculator accepts.
    Occupancy,
    /// An instruction count on every kernel of the device (all or nothing).
    EveryKernelCounted,
    /// Energy-counter samples, and `sm_ns` meterable where there are kernels.
    EnergySamplesAndSmNs,
    /// PM samples carrying the meter's counters, and `sm_ns` meterable where there are
    /// kernels.
    PmSamplesAndSmNs,
    /// The meter's operation count on every kernel of the device (all or nothing,
    /// [`crate::OpCounts`]).
    EveryKernelOpCounted,
}

/// One row of the meter registry [`METERS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MeterSpec {
    /// The meter.
    pub kind: MeterKind,
    /// Its name in reports, schemas and price books.
    pub name: &'static str,
    /// Its canonical unit's dimension.
    pub dimension: Dimension,
    /// When it is booked.
    pub booking: Booking,
    /// How it is split among tenants.
    pub split: Split,
    /// What makes it meterable on a device.
    pub needs: Needs,
}

const fn spec(
    kind: MeterKind,
    name: &'static str,
    dimension: Dimension,
    booking: Booking,
    split: Split,
    needs: Needs,
) -> MeterSpec {
    MeterSpec {
        kind,
        name,
        dimension,
        booking,
        split,
        needs,
    }
}

// Row `i` of the registry is the meter with discriminant `i` (the macro writes them in one
// order; this holds it).
const _: () = {
    let mut i = 0;
    while i < METERS.len() {
        assert!(METERS[i].kind as usize == i);
        i += 1;
    }
};

impl MeterKind {
    /// Every meter, in report order (the registry's order).
    pub const ALL: [MeterKind; METERS.len()] = {
        let mut out = [MeterKind::GpuBusyNs; METERS.len()];
        let mut i = 0;
        while i < METERS.len() {
            out[i] = METERS[i].kind;
            i += 1;
        }
        out
    };

    /// The meter's row in the registry [`METERS`].
    pub fn spec(self) -> &'static MeterSpec {
        &METERS[self as usize]
    }

    /// The meter's name in reports and price books (`sm_ns`, …).
    pub fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// Parses a meter name.
    pub fn parse(name: &str) -> Option<MeterKind> {
        METERS.iter().find(|m| m.name == name).map(|m| m.kind)
    }

    /// The dimension of the meter's canonical unit (from the registry, where every meter's row
    /// must name one).
    pub fn dimension(self) -> Dimension {
        self.spec().dimension
    }

    /// The canonical unit's name (`ns`, `SM·ns`, `warp·ns`, `B`, `B·ns`, `1`, `mJ`, `FLOP`).
    pub fn canonical_unit(self) -> &'static str {
        match self.dimension() {
            Dimension::Time => "ns",
            Dimension::SmTime => "SM·ns",
            Dimension::WarpTime => "warp·ns",
            Dimension::Bytes => "B",
            Dimension::ByteTime => "B·ns",
            Dimension::Count => "1",
            Dimension::Energy => "mJ",
            Dimension::Operations => "FLOP",
        }
    }

    /// Whether the meter is split by time at window edges (time meters) rather than booked to
    /// the window in which its record starts (counts and bytes).
    pub fn is_time_meter(self) -> bool {
        matches!(
            self.dimension(),
            Dimension::Time | Dimension::SmTime | Dimension::WarpTime | Dimension::ByteTime
        )
    }
}

impl std::fmt::Display for MeterKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One input the report was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceEntry {
    /// File name (no directories).
    pub name: String,
    /// Format (`kineto`, `nsys`, `cupti`, `gmr`, `usage`).
    pub format: String,
    /// The source's identity, lowercase hex SHA-256: of its content, i.e. of its
    /// bytes after decompression for a gzip input (a re-compressed copy is the same source);
    /// of its bytes for a `.gmr` recording or a raw CUPTI buffer; a stream's instance id for
    /// a C ABI stream ([`crate::STREAM_FORMAT`]).
    pub sha256: String,
}

/// A meter that cannot be computed for a device, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotMeterable {
    /// The meter's name.
    pub meter: MeterKind,
    /// Why, as a code to act on; [`NotMeterableCode::Uncoded`] (no `code` in JSON) for an
    /// entry of a report written before codes.
    #[serde(default, skip_serializing_if = "NotMeterableCode::is_uncoded")]
    pub code: NotMeterableCode,
    /// Why, for people.
    pub reason: String,
}

/// A device with activity in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceEntry {
    /// Device id within its source.
    pub device: u32,
    /// Identity across sources: `GPU-<uuid>` (or `MIG-<uuid>`) when the source gives a UUID,
    /// else `<source label>#<id>` ([`crate::device::source_label`]: from the source's content
    /// identity, never its file name).
    pub device_key: String,
    /// Name, `null` when unknown.
    pub name: Option<String>,
    /// SM count, `null` when unknown.
    pub sm_count: Option<u32>,
    /// Compute capability `"9.0"`, `null` when unknown.
    pub compute_capability: Option<String>,
    /// Meters that could not be computed for this device.
    pub not_meterable: Vec<NotMeterable>,
}

/// Counts of records read, by kind, and of events skipped as not work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordCounts {
    /// Kernel records metered.
    pub kernel: u64,
    /// Memcpy records metered.
    pub memcpy: u64,
    /// Memset records metered.
    pub memset: u64,
    /// Events that are not work, by category (`gpu_user_annotation`, `cuda_sync`, …).
    pub skipped: BTreeMap<String, u64>,
}

/// An allocation still held when a report was built: billed as
/// `memory_byte_ns` up to `billed_to`; a later report bills it from there
/// ([`Meter::set_opening`](crate::Meter::set_opening)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAllocation {
    /// Device id within its source.
    pub device: u32,
    /// Identity of the device across sources.
    pub device_key: String,
    /// Virtual address, `0x…` hex (CUPTI MEMORY2 `address`).
    pub address: String,
    /// Bytes held.
    pub bytes: Quantity,
    /// Tenant the allocation was attributed to in this report.
    pub tenant: String,
    /// Process id of the allocating process, when known.
    pub process_id: Option<u32>,
    /// External correlation id, when known.
    pub external_id: Option<u64>,
    /// When the allocation was made, RFC 3339 UTC with ns.
    pub allocated_at: String,
    /// The report's end, up to which it is billed, RFC 3339 UTC with ns.
    pub billed_to: String,
}

/// Records lost on one device for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossEntry {
    /// Device id within its source; `null` when the source does not tell the device (a record
    /// whose device id cannot be represented, a damaged `.gmr` frame with no readable record).
    pub device: Option<u32>,
    /// Identity of the device across sources; for `device: null`, the source's label
    /// ([`crate::device::source_label`]: the first 16 hex digits of its identity).
    pub device_key: String,
    /// Reason (`zero_timestamp`, `end_before_start`, `late`, `invalid_field`, `torn_frame`,
    /// …: [`crate::LossReason::as_str`]).
    pub reason: String,
    /// Records lost (exactly, unless `lower_bound`).
    pub records: u64,
    /// `true` when the source cannot tell how many records were lost (a `.gmr` frame cut inside
    /// its buffer, a damaged frame): `records` is then the count that could be read, a lower
    /// bound. Omitted when `false`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub lower_bound: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Usage of one tenant on one device in one window for one meter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageRow {
    /// Tenant (`unattributed` when none matched).
    pub tenant: String,
    /// Device id within its source.
    pub device: u32,
    /// Identity of the device across sources.
    pub device_key: String,
    /// Start of the UTC window, RFC 3339.
    pub window_start: String,
    /// Meter.
    pub meter: MeterKind,
    /// Quantity in the meter's canonical unit.
    pub quantity: Quantity,
}

/// Usage of one tenant on one device for one meter over the whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TotalRow {
    /// Tenant.
    pub tenant: String,
    /// Device id within its source.
    pub device: u32,
    /// Identity of the device across sources.
    pub device_key: String,
    /// Meter.
    pub meter: MeterKind,
    /// Quantity in the meter's canonical unit.
    pub quantity: Quantity,
}

/// `gpumeter.usage/v1`.
///
/// `usage` has one row per (tenant, device, window, meter) with a non-zero quantity, sorted by
/// device key, window, meter, tenant; `totals` one per (tenant, device, meter), no aggregate
/// rows. `sha256` is the digest of the document without it ([`UsageReport::seal`]).
///
/// Reading refuses a key the schema does not define, here and in every entry (serde names it:
/// "unknown field `…`"): the digest is computed from these fields, so a key they do not hold
/// would be outside it. [`UsageReport::extensions`] is the one free-form place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageReport {
    /// Always [`USAGE_SCHEMA`].
    pub schema: String,
    /// Always [`METERING_POLICY`].
    pub metering_policy: String,
    /// Window size, seconds.
    pub window_seconds: u64,
    /// Whether every source of the report ended and the report is not a snapshot
    /// ([`UsageReport::is_complete`]): `false` for a snapshot of a meter still running
    /// ([`crate::Meter::snapshot`]) and for a report of a `.gmr` recording without its end
    /// frame, whose last windows may still grow. The meter and the merge always write it;
    /// `None` only for a report written before the field existed, which is then judged by
    /// [`UsageReport::derived_complete`] (omitted when `None`, so such a report's `sha256`
    /// still verifies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete: Option<bool>,
    /// Inputs.
    pub sources: Vec<SourceEntry>,
    /// Devices with activity.
    pub devices: Vec<DeviceEntry>,
    /// Records read.
    pub records: RecordCounts,
    /// Records lost, per device and reason.
    pub loss: Vec<LossEntry>,
    /// Usage per (tenant, device, window, meter).
    pub usage: Vec<UsageRow>,
    /// Usage per (tenant, device, meter).
    pub totals: Vec<TotalRow>,
    /// Allocations still held at the report's end, billed up to it; a
    /// later report takes them as opening state (`--opening`).
    pub open_allocations: Vec<OpenAllocation>,
    /// Warnings: a code and a message for people each (loss, duplicate sources, unmeterable
    /// meters, …; [`Warning`]).
    pub warnings: Vec<Warning>,
    /// What the report adds beyond the keys of `gpumeter.usage/v1` (`extensions`, the one place for them).
    /// Omitted when empty.
    #[serde(default, skip_serializing_if = "Extensions::is_empty")]
    pub extensions: Extensions,
    /// SHA-256 over the RFC 8785 canonical JSON of the report without this field.
    pub sha256: String,
}

/// The `extensions` of a usage report: gpumeter's own keys, and any other key read from a
/// report, kept as it was (so that its digest still verifies). What a later report that
/// continues this one (`--opening`, [`crate::Meter::continue_from`]) needs to bill nothing
/// twice. Omitted when empty: a report of traces without `--opening` has none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extensions {
    /// Per `.gmr` recording (a process's CUPTI session, which may grow between reports), where
    /// on each device the reports of this chain have read it: the latest time of anything it
    /// held there (work, memory events, energy samples). A later report does not bill again
    /// what the same recording holds at or before it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recordings: Vec<RecordingEnds>,
    /// The SHA-256 of every source the reports this one continues metered (its own are in
    /// `sources`), so that a chain never meters the same bytes twice.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_sources: Vec<String>,
    /// Keys gpumeter does not know, as read.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

impl Extensions {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.recordings.is_empty() && self.earlier_sources.is_empty() && self.other.is_empty()
    }
}

/// How far a chain of reports has read one `.gmr` recording ([`Extensions::recordings`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordingEnds {
    /// The recording's identity: `<host>/<process id>/<CUPTI clock at start>/<wall clock at
    /// start>` from its header (the same while the recording grows, and when it is rewritten
    /// at exit).
    pub recording: String,
    /// Per device, the latest time it held there.
    pub device_ends: Vec<DeviceEnd>,
}

/// A time per device ([`RecordingEnds::device_ends`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceEnd {
    /// Identity of the device.
    pub device_key: String,
    /// The time, RFC 3339 UTC with ns.
    pub end: String,
}

/// Errors computing a document digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// The document could not be serialized to canonical JSON.
    #[error("cannot serialize the document to canonical JSON: {0}")]
    Canonical(String),
}

/// The RFC 8785 (JCS) canonical JSON bytes of `value`: what every digest of a usage report or an invoice and the
/// credit bank's hash chain are computed over.
///
/// # Errors
/// [`DigestError::Canonical`] when the value cannot be canonicalized.
pub fn canonical_json(value: &serde_json::Value) -> Result<Vec<u8>, DigestError> {
    serde_json_canonicalizer::to_vec(value).map_err(|e| DigestError::Canonical(e.to_string()))
}

/// SHA-256 (lowercase hex) over the RFC 8785 (JCS) canonical JSON of `value` with the
/// top-level key `digest_field` removed.
///
/// # Errors
/// [`DigestError::Canonical`] when the value cannot be canonicalized.
pub fn document_sha256(
    value: &serde_json::Value,
    digest_field: &str,
) -> Result<String, DigestError> {
    let mut v = value.clone();
    if let serde_json::Value::Object(map) = &mut v {
        map.remove(digest_field);
    }
    let bytes = canonical_json(&v)?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// A usage report without its `sha256`, borrowed: what the digest is computed over, serialized
/// exactly as [`UsageReport`]'s fields are (same names, `extensions` omitted when empty).
#[derive(Serialize)]
struct Unsealed<'a> {
    schema: &'a str,
    metering_policy: &'a str,
    window_seconds: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    complete: Option<bool>,
    sources: &'a [SourceEntry],
    devices: &'a [DeviceEntry],
    records: &'a RecordCounts,
    loss: &'a [LossEntry],
    usage: &'a [UsageRow],
    totals: &'a [TotalRow],
    open_allocations: &'a [OpenAllocation],
    warnings: &'a [Warning],
    #[serde(skip_serializing_if = "no_extensions")]
    extensions: &'a Extensions,
}

fn no_extensions(e: &&Extensions) -> bool {
    e.is_empty()
}

/// An [`std::io::Write`] that feeds SHA-256.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl UsageReport {
    /// The digest of the report without its `sha256`: the same bytes as
    /// [`document_sha256`] over the report's JSON value, but canonicalized from the report
    /// itself, so no `serde_json::Value` tree of every usage row (about 1 KB a row, and a
    /// clone of it) is built: the canonical bytes are the only copy.
    fn digest(&self) -> Result<String, DigestError> {
        let unsealed = Unsealed {
            schema: &self.schema,
            metering_policy: &self.metering_policy,
            window_seconds: self.window_seconds,
            complete: self.complete,
            sources: &self.sources,
            devices: &self.devices,
            records: &self.records,
            loss: &self.loss,
            usage: &self.usage,
            totals: &self.totals,
            open_allocations: &self.open_allocations,
            warnings: &self.warnings,
            extensions: &self.extensions,
        };
        let mut w = HashWriter(Sha256::new());
        serde_json_canonicalizer::to_writer(&unsealed, &mut w)
            .map_err(|e| DigestError::Canonical(e.to_string()))?;
        Ok(hex::encode(w.0.finalize()))
    }

    /// Computes and stores `sha256`.
    ///
    /// # Errors
    /// [`DigestError`] when serialization fails.
    pub fn seal(&mut self) -> Result<(), DigestError> {
        self.sha256 = self.digest()?;
        Ok(())
    }

    /// Recomputes the digest and compares it with the stored one.
    pub fn verify_digest(&self) -> bool {
        self.digest().is_ok_and(|d| d == self.sha256)
    }

    /// Whether the report is complete: its `complete` field, or for a report written before
    /// the field, [`UsageReport::derived_complete`]. Usage events and finalization take only
    /// complete reports, unless told to allow an incomplete one.
    pub fn is_complete(&self) -> bool {
        self.complete.unwrap_or_else(|| self.derived_complete())
    }

    /// What the report's sources and warnings say of its completeness, the rule the meter
    /// writes `complete` by: incomplete when a source is a snapshot of a stream still running
    /// (format [`crate::STREAM_SNAPSHOT_FORMAT`]) or a warning says a `.gmr` recording has no
    /// end frame ([`WarningCode::UnfinishedRecording`], also as carried by a merge), else
    /// complete. Both facts were in reports before the `complete` field, so an old report is
    /// judged by the same rule as a new one.
    pub fn derived_complete(&self) -> bool {
        !self
            .sources
            .iter()
            .any(|s| s.format == STREAM_SNAPSHOT_FORMAT)
            && !self
                .warnings
                .iter()
                .any(|w| *w.code() == WarningCode::UnfinishedRecording)
    }

    /// Why the report is incomplete, for people; `None` when it is complete
    /// ([`UsageReport::is_complete`]).
    pub fn incomplete_because(&self) -> Option<&'static str> {
        if self.is_complete() {
            return None;
        }
        Some(
            if self
                .sources
                .iter()
                .any(|s| s.format == STREAM_SNAPSHOT_FORMAT)
            {
                "a source is a snapshot of a stream still running"
            } else if self
                .warnings
                .iter()
                .any(|w| *w.code() == WarningCode::UnfinishedRecording)
            {
                "a .gmr recording has no end frame (unfinished_recording)"
            } else {
                "it is a snapshot of a meter still running"
            },
        )
    }

    /// The device entry for `device_key`.
    pub fn device(&self, device_key: &str) -> Option<&DeviceEntry> {
        self.devices.iter().find(|d| d.device_key == device_key)
    }

    /// Σ of `meter` over tenants for one device (from `totals`).
    pub fn device_total(&self, device_key: &str, meter: MeterKind) -> u128 {
        self.totals
            .iter()
            .filter(|t| t.device_key == device_key && t.meter == meter)
            .map(|t| t.quantity.0)
            .sum()
    }

    /// Records lost on one device for one reason.
    pub fn lost(&self, device_key: &str, reason: &str) -> u64 {
        self.loss
            .iter()
            .filter(|l| l.device_key == device_key && l.reason == reason)
            .map(|l| l.records)
            .sum()
    }
}
