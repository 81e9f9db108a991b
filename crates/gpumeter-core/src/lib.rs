//! # gpumeter-core
//!
//! Records, devices, the streaming [`Meter`] and the [`UsageReport`] of gpumeter.
//! No I/O and no `unsafe`: importers and decoders in other crates turn
//! their sources into [`ActivityRecord`]s; this crate turns those into integer usage per tenant,
//! device, window and meter.
//!
//! ```
//! use gpumeter_core::{ActivityRecord, CopyDirection, DeviceInfo, Meter, MeterConfig, MeterKind, Work};
//! let alice = gpumeter_core::TenantName::parse("alice").expect("a tenant name");
//! let mut meter = Meter::new(MeterConfig { tenant: Some(alice), ..MeterConfig::default() });
//! let dev = meter.register_device(DeviceInfo::bare("trace.json#0", 0));
//! meter.push(ActivityRecord::new(
//!     dev,
//!     1_700_000_000_000_000_000,
//!     1_700_000_000_000_002_240,
//!     Work::Memcpy { bytes: 1, direction: CopyDirection::DeviceToHost },
//! ));
//! let report = meter.finish().expect("report");
//! assert_eq!(report.device_total("trace.json#0", MeterKind::GpuBusyNs), 2_240);
//! assert_eq!(report.totals[0].tenant, "alice");
//! ```
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod check;
pub mod device;
pub mod ingest;
pub mod merge;
pub mod meter;
pub mod occupancy;
pub mod ops;
pub mod record;
pub mod report;
pub mod tenant;
pub mod text;
pub mod time;
pub mod warning;

/// The meter before issue 13's rewrite: what the production meter is held to.
#[cfg(test)]
#[allow(dead_code)]
#[path = "../tests/reference/meter.rs"]
mod reference;
#[cfg(test)]
#[path = "../tests/reference/proptest.rs"]
mod reference_proptest;

pub use check::{check_report, ImpossibleUsage, ReportCheckError};
pub use device::{source_label, ComputeCapability, DeviceInfo, SmLimits};
pub use ingest::{identity_digest, push_batches, Batch, Continuation, REPEAT_PROBES};
pub use merge::{merge_reports, DeviceConflict, MergeError, MERGED_REPORTS_KEY};
pub use meter::{
    Meter, MeterConfig, MeterError, SourceInfo, TenantMap, DEFAULT_MAX_CELLS,
    DEFAULT_REORDER_HORIZON_NS, MAX_RESIDENT_GRIDS,
};
pub use ops::{OpCountError, OpCounter, OpCounts, OP_METERS};
pub use record::{
    invalid_field_warning, ActivityRecord, CopyDirection, DeviceSlot, Joined, KernelLaunch,
    LossReason, MemoryEvent, MemoryOp, PartitionId, PmSample, Work,
};
pub use report::{
    canonical_json, document_sha256, Booking, DeviceEnd, DeviceEntry, DigestError, Dimension,
    Extensions, LossEntry, MeterKind, MeterSpec, Needs, NotMeterable, OpenAllocation, Quantity,
    RecordCounts, RecordingEnds, SourceEntry, Split, TotalRow, UsageReport, UsageRow,
    METERING_POLICY, METERS, STREAM_FORMAT, STREAM_SNAPSHOT_FORMAT, USAGE_SCHEMA,
};
pub use tenant::{TenantName, TenantNameError, IDLE, RESERVED_TENANTS, UNATTRIBUTED};
pub use time::{Period, PeriodBound, PeriodError, WindowSize};
pub use warning::{NotMeterableCode, Warning, WarningCode};
