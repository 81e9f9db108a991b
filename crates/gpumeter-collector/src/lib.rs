//! # gpumeter-collector
//!
//! Live collection: CUPTI activity records of this process into a `.gmr`.
//!
//! A [`Collector`] loads libcupti, reads `cuptiGetVersion()` to pick the record layouts
//! ([`ApiVersion::from_cupti`]; an unsupported version is [`CollectorError::UnsupportedVersion`]),
//! subscribes to CUPTI (which detects another profiler holding it), registers its buffer
//! callbacks and enables [`DEFAULT_KINDS`] (CONCURRENT_KERNEL, never KERNEL, which serializes
//! kernels). Completed buffers go to a [`CompletionSink`], usually a [`GmrFileSink`].
//! [`Collector::stop`] disables the kinds, flushes with `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`,
//! books the last dropped-record count, and finishes the sink with the final header.
//!
//! ```
//! use gpumeter_collector::{Collector, CollectorConfig, CollectorError, GmrFileSink};
//!
//! let dir = std::env::temp_dir().join(format!("gpumeter-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let sink = GmrFileSink::create(dir.join("run.gmr"));
//! match Collector::start(CollectorConfig::default(), Box::new(sink)) {
//!     Ok(collector) => {
//!         // ... the process runs CUDA work ...
//!         let report = collector.stop();
//!         println!("{} kernel records, {} dropped", report.kernels, report.dropped_records);
//!     }
//!     // A machine without a GPU or CUDA driver (this documentation's build machine).
//!     Err(CollectorError::NoGpu { detail, .. }) => println!("nothing to meter here: {detail}"),
//!     Err(CollectorError::LibraryMissing(e)) => println!("{e}"),
//!     Err(e) => println!("cannot collect: {e}"),
//! }
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! # How buffers are handled
//!
//! CUPTI's buffer callbacks are plain C functions without user data, so the collector keeps
//! process-wide state: one libcupti (never unloaded), one buffer pool and at most one running
//! collector. The pool lends pre-zeroed, 8-byte aligned buffers (`Box<[u64]>`,
//! [`CollectorConfig::buffer_size`] bytes) and never hands CUPTI a NULL buffer (that crashes
//! CUPTI before API 27). On completion, the dropped-record count is read with
//! `cuptiActivityGetNumDroppedRecords` before any lock of the collector is taken (CUPTI resets
//! it when read: each count is a delta); kernel and device names are copied out of the live
//! buffer into string tables; then the raw bytes are handed to the sink and the buffer goes
//! back to the pool. Every callback catches panics; they are counted and listed in the
//! [`StopReport`] along with sink errors, so a recording that misses work says so.
//!
//! # Process-wide state
//!
//! The first successful [`Collector::start`] fixes the libcupti used by the process; a later
//! start naming a different file fails with [`CollectorError::LibraryConflict`]. One collector
//! runs at a time ([`CollectorError::AlreadyRunning`]); after [`Collector::stop`] another may
//! start.
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.
#![allow(unsafe_code)]
#![deny(missing_docs)]

mod callbacks;
mod completion;
mod config;
mod driver;
mod energy;
mod error;
mod event;
mod ffi;
mod flops;
pub mod labels;
mod live;
mod nvml;
mod pmsampling;
mod pool;
mod report;
mod sass;
mod sink;
mod start;
mod stop;
#[cfg(test)]
mod tests;

use std::path::Path;

use cupti_sys::Cupti;

pub use self::config::{
    CollectorConfig, DEFAULT_BUFFER_SIZE, DEFAULT_ENERGY_INTERVAL, DEFAULT_KINDS,
    ENERGY_INTERVAL_RANGE, MAX_BUFFER_SIZE, MIN_BUFFER_SIZE,
};
pub use self::error::CollectorError;
pub use self::flops::{
    is_tensor_path_total, op_counters_frame, select_flops_metrics, DecodedRanges, FlopsConfig,
    FlopsError, FlopsSelection, FlopsTally, LaunchOrder, PassProbe, RangeHostProbe,
    DEFAULT_FLOPS_RANGES, FLOPS_RANGES_RANGE,
};
use self::live::LIVE;
pub use self::pmsampling::{
    select_metrics, to_count, to_pm_sample, Decoded, HostProbe, MetricProbe, MetricSelection,
    PmSamplingConfig, PmSamplingError, PmSamplingTally, Pump, RawSample, SampleSource, Unusable,
    WriteSamples, DEFAULT_PM_DECODE_PERIOD, DEFAULT_PM_HW_BUFFER, DEFAULT_PM_INTERVAL,
    DRAM_READ_CANDIDATES, DRAM_WRITE_CANDIDATES, PM_DECODE_PERIOD_RANGE, PM_HW_BUFFER_RANGE,
    PM_INTERVAL_RANGE, SM_ACTIVE_CANDIDATES, SM_ELAPSED_CANDIDATES,
};
pub use self::report::StopReport;
use gpumeter_cupti::kind::ActivityKind;
use gpumeter_cupti::layout::ApiVersion;
use gpumeter_recording::gmr::{AttributionEvent, AttributionKind, GmrHeader};

pub use self::sink::{CompletionSink, GmrFileSink};

/// External correlation kinds an agent may push (`CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0..2`);
/// a usage report attributes by them through the tenant map's `[external]` table, CUSTOM0
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExternalKind {
    /// `CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0` (3).
    Custom0,
    /// `CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1` (4).
    Custom1,
    /// `CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2` (5).
    Custom2,
}

impl ExternalKind {
    /// The `CUpti_ExternalCorrelationKind` value.
    pub fn raw(self) -> u32 {
        match self {
            ExternalKind::Custom0 => 3,
            ExternalKind::Custom1 => 4,
            ExternalKind::Custom2 => 5,
        }
    }
}

/// Collects CUPTI activity records of this process into a [`CompletionSink`] (see the module
/// docs). Stop it with [`Collector::stop`]; dropping a running collector stops it and
/// discards the report.
#[derive(Debug)]
pub struct Collector {
    cupti: &'static Cupti,
    api: ApiVersion,
    header: GmrHeader,
    enabled: Vec<ActivityKind>,
    subscriber: Option<usize>,
    warnings: Vec<String>,
    driver_inventory: bool,
    nvml_inventory: bool,
    energy: Option<energy::EnergySampler>,
    /// Instrumented mode is on ([`sass`]).
    instructions: bool,
    /// PM sampling is on ([`pmsampling`]).
    pm_sampling: bool,
    /// FLOP counting is on ([`flops`]).
    flops: bool,
    running: bool,
}

impl Collector {
    /// Starts collecting into `sink` (see the module docs for the steps).
    ///
    /// The sink's [`CompletionSink::begin`] gets the start header: the CUPTI API version, the
    /// host name, a clock pair (`cuptiGetTimestamp` and the wall clock), this process's id
    /// and the producer. If a later step fails, the sink's [`CompletionSink::abort`] is
    /// called and everything enabled is disabled again.
    ///
    /// # Errors
    /// [`CollectorError::Config`]; [`CollectorError::AlreadyRunning`];
    /// [`CollectorError::LibraryMissing`] (no libcupti: every path tried);
    /// [`CollectorError::LibraryConflict`]; [`CollectorError::UnsupportedVersion`];
    /// [`CollectorError::NoGpu`] on a machine without a GPU or CUDA driver (returned at once:
    /// CUPTI answers `CUPTI_ERROR_NOT_INITIALIZED` without waiting);
    /// [`CollectorError::AnotherProfiler`] when another tool holds CUPTI;
    /// [`CollectorError::Sink`] when the sink cannot begin; [`CollectorError::Cupti`] for any
    /// other CUPTI failure.
    pub fn start(
        config: CollectorConfig,
        sink: Box<dyn CompletionSink>,
    ) -> Result<Collector, CollectorError> {
        start::start(config, sink)
    }

    /// The record layouts of this collector's buffers (from `cuptiGetVersion()`).
    pub fn api_version(&self) -> ApiVersion {
        self.api
    }

    /// The libcupti in use.
    pub fn library_path(&self) -> &Path {
        self.cupti.path()
    }

    /// The header given to the sink at the start.
    pub fn header(&self) -> &GmrHeader {
        &self.header
    }

    /// Activity kinds enabled, in order.
    pub fn enabled_kinds(&self) -> &[ActivityKind] {
        &self.enabled
    }

    /// Problems at start that did not stop it (kinds not enabled, flush period not set).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Asks CUPTI to complete the buffers that hold finished records now
    /// (`cuptiActivityFlushAll(0)`); they reach the sink before this returns.
    ///
    /// # Errors
    /// [`CollectorError::Cupti`] when the call fails.
    #[doc(alias = "cuptiActivityFlushAll")]
    pub fn flush(&self) -> Result<(), CollectorError> {
        self.cupti
            .activity_flush_all(0)
            .map_err(CollectorError::from_cupti)
    }

    /// Pushes an external correlation id for the calling thread
    /// (`cuptiActivityPushExternalCorrelationId`): CUDA API calls this thread makes until the
    /// matching pop produce EXTERNAL_CORRELATION records tying their GPU work to `id`, which a
    /// tenant map's `[external]` table attributes. Pushes nest per thread and kind.
    ///
    /// # Errors
    /// [`CollectorError::Cupti`] when CUPTI refuses.
    #[doc(alias = "cuptiActivityPushExternalCorrelationId")]
    pub fn push_external_id(&self, kind: ExternalKind, id: u64) -> Result<(), CollectorError> {
        ffi::push_external(self.cupti, kind.raw(), id).map_err(CollectorError::from_cupti)
    }

    /// Pops the calling thread's innermost external correlation id of `kind` and returns it
    /// (`cuptiActivityPopExternalCorrelationId`).
    ///
    /// # Errors
    /// [`CollectorError::Cupti`] when CUPTI refuses (e.g. nothing was pushed:
    /// `CUPTI_ERROR_QUEUE_EMPTY`).
    #[doc(alias = "cuptiActivityPopExternalCorrelationId")]
    pub fn pop_external_id(&self, kind: ExternalKind) -> Result<u64, CollectorError> {
        ffi::pop_external(self.cupti, kind.raw()).map_err(CollectorError::from_cupti)
    }

    /// Records a hint that `external_id` (0: none) or `process_id` (0: none) belongs to
    /// `tenant`, as an attribution event in the recording. Informational: the tenant map
    /// decides attribution. A failure to write it is reported at
    /// stop.
    pub fn tenant_hint(&self, external_id: u64, process_id: u32, tenant: &str) {
        if let Some(live) = LIVE.get() {
            live.core.attribution(&AttributionEvent {
                kind: AttributionKind::TenantHint,
                process_id,
                external_id,
                timestamp_ns: self.cupti.timestamp().unwrap_or(0),
                label: tenant.to_string(),
            });
        }
    }

    /// Stops collecting: disables the kinds, flushes with `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`
    /// (records of work still running are flushed incomplete, and a usage report counts
    /// them as loss), books the last dropped-record count, unsubscribes, and finishes the
    /// sink with the final header, whose devices come from DEVICE records and, for what those
    /// did not give, from the CUDA driver ([`CollectorConfig::driver_inventory`]), then from
    /// NVML ([`CollectorConfig::nvml_inventory`]). Energy ([`CollectorConfig::energy`]) is read
    /// a last time after the forced flush (waiting for NVML at most a few seconds), and
    /// readings held back until the inventory was known are written before the sink finishes.
    /// Never fails: what went wrong is in the report.
    pub fn stop(mut self) -> StopReport {
        self.stop_inner()
    }
}

impl Drop for Collector {
    /// Stops a collector that was not stopped (the report is discarded). Never panics.
    fn drop(&mut self) {
        if self.running {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.stop_inner()));
        }
    }
}
