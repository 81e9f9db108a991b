//! # gpumeter-cupti
//!
//! CUPTI activity buffers for gpumeter:
//!
//! * [`decode()`]: a pure-Rust walk of a CUPTI activity buffer with the record
//!   layouts of the *producer's* CUPTI API version ([`ApiVersion`]: CUDA 12.8 = API 26, CUDA 13.0
//!   = API 130001, CUDA 13.4 = API 130401), into typed [`Record`]s. Safe code only; any
//!   alignment; no pointer read from the bytes is ever dereferenced; no panic on any input
//!   (fuzzed, `fuzz/`).
//! * [`columns`]: the same walk writing only the records the meter reads (kernels, copies,
//!   memsets, API and external-correlation records), only the fields it reads, into reusable
//!   columns ([`KernelColumns`], [`decode_kernel_columns`]; [`BufferColumns`],
//!   [`decode_buffer_columns`]): no record built, nothing allocated per record.
//! * [`join`]: what one record becomes for the meter, and the process-id and external-id joins
//!   that attribute it; [`StringTable`]: the names the producer's pointers stood for.
//! * [`stream`]: CUPTI buffers as they arrive from a live process, into a
//!   [`gpumeter_core::Meter`].
//!
//! The `.gmr` recording format and the sources that meter raw buffers and recordings
//! (`meter_buffer`, `meter_gmr`, `meter_path`, the file streams) are `gpumeter-recording`;
//! live collection in a CUDA process is `gpumeter-collector`.
//!
//! ```
//! use gpumeter_cupti::{decode, ActivityKind, ApiVersion, Record};
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
//! let decoded = decode(&k, ApiVersion::Cupti12_8)?;
//! assert_eq!(decoded.records.len(), 1);
//! assert!(matches!(decoded.records[0].record, Record::Kernel(_)));
//! # Ok::<(), gpumeter_cupti::DecodeError>(())
//! ```
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod columns;
pub mod corrmap;
pub mod decode;
pub mod join;
pub mod kind;
pub mod layout;
pub mod stream;
pub mod strings;

pub use columns::{
    decode_buffer_columns, decode_kernel_columns, ApiColumns, ApiRow, BufferColumns, BufferCounts,
    CopyColumns, CopyRow, ExternalColumns, ExternalRow, KernelColumns, KernelRow, KindCounts,
    SetColumns, SetRow,
};
pub use decode::{
    decode, decode_prefix, format_uuid, ApiRecord, ContextRecord, DecodeError, Decoded,
    DeviceRecord, ExternalCorrelationRecord, GraphTraceRecord, InstructionExecutionRecord,
    KernelRecord, LocatedRecord, MemcpyRecord, MemoryOperation, MemoryRecord, MemsetRecord,
    OverheadRecord, PeerCopyRecord, Record, Walk,
};
pub use kind::ActivityKind;
pub use layout::{ApiVersion, FieldInfo, KindLayout};
pub use strings::StringTable;
