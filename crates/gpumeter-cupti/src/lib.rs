//! # gpumeter-cupti
//!
//! CUPTI activity buffers for gpumeter:
//!
//! * [`decode()`]: a pure-Rust walk of a CUPTI activity buffer with the record
//!   layouts of the *producer's* CUPTI API version ([`ApiVersion`]: CUDA 12.8 = API 26, CUDA 13.0
//!   = API 130001, CUDA 13.4 = API 130401), into typed [`Record`]s. Safe code only; any
//!   alignment; no pointer read from the bytes is ever dereferenced; no panic on any input
//!   (fuzzed, `fuzz/`).
//! * [`gmr`]: the `.gmr` recording format: a versioned header and checksummed frames (raw
//!   buffers, string tables, dropped counts, attribution events, energy samples), with a writer
//!   and a reader that keeps the complete frames of a torn file.
//! * [`meter_buffer`], [`meter_gmr`], [`meter_path`]: a raw buffer or a `.gmr` into a
//!   [`gpumeter_core::Meter`], with the process-id and external-id joins, devices from DEVICE
//!   records, and dropped counts as loss (formats `cupti` and `gmr` in usage reports).
//! * [`collector`]: live collection in this process: a [`Collector`] loads libcupti, lends
//!   CUPTI pre-zeroed buffers, copies names while buffers are live, and streams a `.gmr`
//!   ([`collector::GmrFileSink`]); the injection library (`gpumeter-inject`) runs one inside
//!   any CUDA program.
//!
//! ```
//! use gpumeter_core::{Meter, MeterConfig, MeterKind};
//! use gpumeter_cupti::gmr::{GmrHeader, GmrWriter};
//! use gpumeter_cupti::{meter_gmr, ApiVersion, CuptiOptions};
//!
//! // A 12.8 CONCURRENT_KERNEL record (`CUpti_ActivityKernel9`, 208 bytes): kind at 0,
//! // start at 16, end at 24, gridX..Z at 52..64.
//! let size = ApiVersion::Cupti12_8.record_size(gpumeter_cupti::ActivityKind::CONCURRENT_KERNEL);
//! let mut k = vec![0u8; size.unwrap_or(208)];
//! k[0..4].copy_from_slice(&10u32.to_le_bytes());
//! k[16..24].copy_from_slice(&1_752_826_085_000_000_000u64.to_le_bytes());
//! k[24..32].copy_from_slice(&1_752_826_085_000_001_000u64.to_le_bytes());
//! for (i, g) in [264i32, 1, 1].iter().enumerate() {
//!     k[52 + 4 * i..56 + 4 * i].copy_from_slice(&g.to_le_bytes());
//! }
//!
//! // Record it as a producer would, then meter the recording.
//! let header = GmrHeader { cupti_api_version: 26, process_id: 4242, ..GmrHeader::default() };
//! let mut w = GmrWriter::new(Vec::<u8>::new(), &header)?;
//! w.write_buffer(&k)?;
//! let bytes = w.finish()?;
//!
//! let mut meter = Meter::new(MeterConfig::default());
//! let summary = meter_gmr(&mut meter, "run.gmr", &bytes, &CuptiOptions::default())?;
//! assert_eq!(summary.records, 1);
//! let report = meter.finish().expect("report");
//! assert_eq!(report.device_total(&summary.device_keys[0], MeterKind::KernelNs), 1_000);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
// `deny`, not `forbid`: the live collector (`collector`, and only it) calls into libcupti and
// allows `unsafe_code` for its module, with a `// SAFETY:` comment on every block. The decoder,
// the `.gmr` format and the sources stay safe code.
#![deny(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "collector")]
pub mod collector;
pub mod decode;
mod file;
pub mod gmr;
mod gmr_file;
mod join;
pub mod kind;
pub mod layout;
mod lookahead;
pub mod replay;
mod source;
pub mod stream;
mod streams;

#[cfg(feature = "collector")]
pub use collector::{Collector, CollectorConfig, CollectorError};
pub use decode::{
    decode, decode_prefix, format_uuid, ApiRecord, ContextRecord, DecodeError, Decoded,
    DeviceRecord, ExternalCorrelationRecord, GraphTraceRecord, InstructionExecutionRecord,
    KernelRecord, LocatedRecord, MemcpyRecord, MemoryOperation, MemoryRecord, MemsetRecord,
    OverheadRecord, PeerCopyRecord, Record, Walk,
};
pub use file::{meter_buffer_file, BufferFile, SourceItem, CHUNK_BYTES};
pub use gmr::{GmrError, StringTable, TornFrame};
pub use gmr_file::meter_gmr_file;
pub use kind::ActivityKind;
pub use layout::{ApiVersion, FieldInfo, KindLayout};
pub use source::{
    announce_sources, meter_buffer, meter_gmr, meter_path, meter_sources, read_source, CuptiFormat,
    CuptiInput, CuptiOptions, CuptiSourceError, CuptiSummary, DeviceHook, FrameRef, WORK_KINDS,
};
pub use streams::{meter_files, SKETCH_DIGESTS};
