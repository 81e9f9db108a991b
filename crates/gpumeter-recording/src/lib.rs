//! # gpumeter-recording
//!
//! The `.gmr` recording format and the file sources that meter raw CUPTI activity buffers and
//! recordings (built on `gpumeter-cupti`'s decoder and joins):
//!
//! * [`gmr`]: the `.gmr` recording format: a versioned header and checksummed frames (raw
//!   buffers, string tables, dropped counts, attribution events, energy samples), with a writer
//!   and a reader that keeps the complete frames of a torn file.
//! * [`meter_buffer`], [`meter_gmr`], [`meter_path`]: a raw buffer or a `.gmr` held in memory
//!   into a [`gpumeter_core::Meter`], with the process-id and external-id joins, devices from
//!   DEVICE records, and dropped counts as loss (formats `cupti` and `gmr` in usage reports).
//! * [`meter_buffer_file`], [`meter_gmr_file`], [`meter_files`]: the same read from files as
//!   streams, in memory flat in the files' sizes ([`BufferFile`]: a raw buffer file;
//!   `recording_file`: a `.gmr` file; `merge`: several files merged in time order).
//! * [`replay`]: a raw buffer or a recording as the items a CUPTI stream would have seen.
//!
//! ```
//! use gpumeter_core::{Meter, MeterConfig, MeterKind};
//! use gpumeter_cupti::{ActivityKind, ApiVersion};
//! use gpumeter_recording::gmr::{GmrHeader, GmrWriter};
//! use gpumeter_recording::{meter_gmr, CuptiOptions};
//!
//! // A 12.8 CONCURRENT_KERNEL record (`CUpti_ActivityKernel9`, 208 bytes): kind at 0,
//! // start at 16, end at 24, gridX..Z at 52..64.
//! let size = ApiVersion::Cupti12_8.record_size(ActivityKind::CONCURRENT_KERNEL);
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
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod buffer_file;
mod chunks;
pub mod gmr;
mod lookahead;
mod merge;
mod recording_file;
mod reorder;
pub mod replay;
mod scanned;
mod source;

pub use buffer_file::BufferFile;
pub use chunks::CHUNK_BYTES;
pub use gmr::{GmrError, TornFrame};
pub use merge::{meter_buffer_file, meter_files, meter_gmr_file};
pub use scanned::{SourceItem, SKETCH_DIGESTS};
pub use source::{
    announce_sources, meter_buffer, meter_gmr, meter_path, meter_sources, read_source, CuptiFormat,
    CuptiInput, CuptiOptions, CuptiSourceError, CuptiSummary, DeviceHook, FrameRef, WORK_KINDS,
};
