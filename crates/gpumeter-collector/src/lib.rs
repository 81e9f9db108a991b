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
#![allow(unsafe_code)]
#![deny(missing_docs)]

mod completion;
mod energy;
mod ffi;
mod flops;
mod nvml;
mod pmsampling;
mod pool;
mod sass;
mod sink;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cupti_sys::{Cupti, CuptiError, LoadError, SearchLocation, ENV_CUPTI_LIB};

use self::completion::{Core, Session};
pub use self::flops::{
    is_tensor_path_total, op_counters_frame, select_flops_metrics, DecodedRanges, FlopsConfig,
    FlopsError, FlopsSelection, FlopsTally, LaunchOrder, PassProbe, RangeHostProbe,
    DEFAULT_FLOPS_RANGES, FLOPS_RANGES_RANGE,
};
pub use self::pmsampling::{
    select_metrics, to_count, to_pm_sample, Decoded, HostProbe, MetricProbe, MetricSelection,
    PmSamplingConfig, PmSamplingError, PmSamplingTally, Pump, RawSample, SampleSource, Unusable,
    WriteSamples, DEFAULT_PM_DECODE_PERIOD, DEFAULT_PM_HW_BUFFER, DEFAULT_PM_INTERVAL,
    DRAM_READ_CANDIDATES, DRAM_WRITE_CANDIDATES, PM_DECODE_PERIOD_RANGE, PM_HW_BUFFER_RANGE,
    PM_INTERVAL_RANGE, SM_ACTIVE_CANDIDATES, SM_ELAPSED_CANDIDATES,
};
use gpumeter_cupti::kind::ActivityKind;
use gpumeter_cupti::layout::ApiVersion;
use gpumeter_recording::gmr::{
    AttributionEvent, AttributionKind, ClockPair, GmrDevice, GmrHeader, Producer,
};

pub use self::sink::{CompletionSink, GmrFileSink};

/// The activity kinds a collector enables by default, in the order enabled.
///
/// CONCURRENT_KERNEL is required (its failure fails [`Collector::start`]); a failure to enable
/// any other is a warning in [`Collector::warnings`]. RUNTIME and DRIVER records give the
/// process id of GPU records and let EXTERNAL_CORRELATION records (kinds CUSTOM0..2) attach
/// external ids; MEMORY2 records memory allocations; DEVICE and CONTEXT give the device
/// inventory and the context → device map.
pub const DEFAULT_KINDS: [ActivityKind; 10] = [
    ActivityKind::CONCURRENT_KERNEL,
    ActivityKind::DEVICE,
    ActivityKind::CONTEXT,
    ActivityKind::MEMCPY,
    ActivityKind::MEMCPY2,
    ActivityKind::MEMSET,
    ActivityKind::MEMORY2,
    ActivityKind::EXTERNAL_CORRELATION,
    ActivityKind::RUNTIME,
    ActivityKind::DRIVER,
];

/// Default activity buffer size: 8 MiB (about 40 000 kernel records).
pub const DEFAULT_BUFFER_SIZE: usize = 8 << 20;

/// Smallest accepted [`CollectorConfig::buffer_size`]: 64 KiB.
pub const MIN_BUFFER_SIZE: usize = 64 << 10;

/// Largest accepted [`CollectorConfig::buffer_size`]: 1 GiB.
pub const MAX_BUFFER_SIZE: usize = 1 << 30;

/// Default [`CollectorConfig::energy_interval`]: 1 s.
pub const DEFAULT_ENERGY_INTERVAL: Duration = Duration::from_secs(1);

/// Accepted [`CollectorConfig::energy_interval`]s: 10 ms to 1 hour.
pub const ENERGY_INTERVAL_RANGE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(10)..=Duration::from_secs(3600);

/// How a [`Collector`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CollectorConfig {
    /// The libcupti file to load. `None`: `GPUMETER_CUPTI_LIB` when set; else a libcupti this
    /// process has already loaded (`libcupti.so.13`, `.12`, by soname: the copy the
    /// application itself uses, e.g. PyTorch's); else `cupti_sys::search_locations`.
    pub cupti_lib: Option<PathBuf>,
    /// Whether the search may ask `python3` for its `sys.path` (pip wheels). An injection
    /// library running inside someone else's program sets this to `false`.
    pub search_python: bool,
    /// Bytes per activity buffer (a multiple of 8 is used, rounded up), from
    /// [`MIN_BUFFER_SIZE`] to [`MAX_BUFFER_SIZE`]; default [`DEFAULT_BUFFER_SIZE`]. Fixed by
    /// the first start of the process for buffers already lent.
    pub buffer_size: usize,
    /// Free buffers kept for reuse (others are freed when CUPTI returns them); default 4.
    /// Fixed by the first start of the process.
    pub pooled_buffers: usize,
    /// Activity kinds to enable, in order; must contain CONCURRENT_KERNEL and not KERNEL.
    /// Default [`DEFAULT_KINDS`].
    pub kinds: Vec<ActivityKind>,
    /// `cuptiActivityFlushPeriod` in ms: CUPTI then completes buffers at least this often, so
    /// a process killed without running its exit handlers loses at most about that much
    /// work. 0 (default): CUPTI's own policy (buffers complete when full, or at flush).
    pub flush_period_ms: u32,
    /// Whether [`Collector::stop`] asks the CUDA driver (already loaded and initialised by
    /// the process; never loaded by the collector) for device names, UUIDs, SM counts and
    /// compute capabilities that DEVICE records did not give. Default `true`.
    pub driver_inventory: bool,
    /// Whether [`Collector::stop`] then asks NVML (`libnvidia-ml.so.1`, loaded at run time
    /// when present) for the names and UUIDs still unknown. It only fills missing fields of
    /// devices already listed (DEVICE records win, then the driver, then NVML), matched by
    /// UUID, or by index when that is the CUDA ordinal; failures are skipped (a warning only
    /// with `GPUMETER_VERBOSE`), and NVML is given at most a few seconds. Default `true`.
    pub nvml_inventory: bool,
    /// Whether to record each GPU's cumulative NVML energy counter
    /// (`nvmlDeviceGetTotalEnergyConsumption`, mJ; Volta and newer) as energy frames: at
    /// start, every [`CollectorConfig::energy_interval`] and at stop after the final flush, on
    /// a helper thread (never blocking the application; the stop waits for NVML a few
    /// seconds at most). Frames carry the CUDA ordinal of the matched inventory entry and
    /// CUPTI-clock timestamps ([`gpumeter_recording::gmr::EnergySample`]). A GPU without the counter, or no
    /// NVML, gives warnings in the [`StopReport`], never an error. Default `true`.
    pub energy: bool,
    /// How often energy is sampled, from 10 ms to 1 hour ([`ENERGY_INTERVAL_RANGE`]);
    /// default [`DEFAULT_ENERGY_INTERVAL`] (1 s).
    pub energy_interval: Duration,
    /// Who writes the recording (the header's `producer`); default `gpumeter-cupti` and this
    /// crate's version.
    pub producer: Producer,
    /// Instrumented mode: record the warp-level instructions each kernel launch executed
    /// (CUPTI's SASS metrics API, CUDA 12.4+, metric `smsp__sass_inst_executed`) as
    /// instruction-count frames, and mark the header `instrumented`. Every launch then waits
    /// for its kernels to finish and patched kernels run slower: time meters of such a
    /// recording carry an instrumentation warning. A libcupti without the API
    /// fails the start ([`CollectorError::InstructionsNotSupported`]); a device or context
    /// that cannot be instrumented is a warning. Kernels are then recorded with the KERNEL
    /// activity kind instead of CONCURRENT_KERNEL (with CONCURRENT_KERNEL enabled, CUPTI 13.0
    /// reports every SASS metric value as 0 on an H200). Default `false`.
    pub instructions: bool,
    /// PM sampling (docs/COLLECTION.md, "PM sampling"): hardware counters of SM activity and DRAM traffic of every
    /// device the program creates a context on, sampled every
    /// [`PmSamplingConfig::interval`] and written as PM-sample frames. A libcupti without the
    /// API (before CUDA 12.6) fails the start ([`CollectorError::PmSampling`]); a device that
    /// cannot be sampled (permissions, unsupported GPU) is an error of the stop report, and
    /// collection goes on. Default `None` (off).
    pub pm_sampling: Option<PmSamplingConfig>,
    /// FLOP counters (docs/COLLECTION.md, "FLOP counters (range profiler)"): per kernel
    /// launch, the SASS op counters and tensor-path operation counters of CUPTI's range
    /// profiler (CUDA 12.6+; auto range, kernel replay: kernels are serialized and each runs
    /// once per counter pass, 1 for the SASS counters alone, 8 to 10 with the tensor-path
    /// totals on GA100, GH100, AD102), written as operation-counters frames joined by
    /// correlation id. A libcupti without the API fails the start
    /// ([`CollectorError::Flops`]); a context that cannot be profiled (permissions,
    /// unsupported GPU) is an error of the stop report, and collection goes on. Default
    /// `None` (off).
    pub flops: Option<FlopsConfig>,
}

impl Default for CollectorConfig {
    fn default() -> Self {
        CollectorConfig {
            cupti_lib: None,
            search_python: true,
            buffer_size: DEFAULT_BUFFER_SIZE,
            pooled_buffers: 4,
            kinds: DEFAULT_KINDS.to_vec(),
            flush_period_ms: 0,
            driver_inventory: true,
            nvml_inventory: true,
            energy: true,
            energy_interval: DEFAULT_ENERGY_INTERVAL,
            producer: Producer {
                name: "gpumeter-cupti".to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
            },
            instructions: false,
            pm_sampling: None,
            flops: None,
        }
    }
}

/// Why a [`Collector`] could not start (or a CUPTI call failed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectorError {
    /// No libcupti could be loaded: every path tried, and why.
    #[error(transparent)]
    LibraryMissing(LoadError),
    /// No CUDA driver or GPU: CUPTI answered `CUPTI_ERROR_NOT_INITIALIZED`, or
    /// `cuptiGetVersion` failed and the CUDA driver library cannot be loaded.
    #[error("no CUDA driver or GPU to collect from: {detail}")]
    NoGpu {
        /// The CUPTI function that failed.
        function: &'static str,
        /// CUPTI's result and message.
        detail: String,
    },
    /// Another profiler or NVIDIA tool holds CUPTI in this process
    /// (`CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`): e.g. Nsight Systems, Nsight
    /// Compute, or a framework profiler that subscribed first.
    #[error(
        "another profiler holds CUPTI in this process ({function}: {detail}); \
         gpumeter cannot collect alongside it"
    )]
    AnotherProfiler {
        /// The CUPTI function that failed.
        function: &'static str,
        /// CUPTI's result and message.
        detail: String,
    },
    /// The loaded libcupti reports a CUPTI API version whose record layouts this build does
    /// not know.
    #[error(
        "{}: CUPTI API version {api_version} is not supported by this build of gpumeter \
         (it decodes {}); use a supported libcupti (GPUMETER_CUPTI_LIB)",
        path.display(),
        ApiVersion::ALL.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
    )]
    UnsupportedVersion {
        /// The library's path.
        path: PathBuf,
        /// What `cuptiGetVersion()` returned.
        api_version: u32,
    },
    /// A collector is already running in this process.
    #[error("a gpumeter collector is already running in this process")]
    AlreadyRunning,
    /// The process already uses another libcupti file.
    #[error(
        "this process already collects with {}; cannot switch to {} (libcupti is never \
         unloaded)",
        loaded.display(),
        requested.display()
    )]
    LibraryConflict {
        /// The library in use.
        loaded: PathBuf,
        /// The library asked for.
        requested: PathBuf,
    },
    /// The configuration is invalid (the message names the field).
    #[error("invalid collector configuration: {0}")]
    Config(String),
    /// Instrumented mode was asked for ([`CollectorConfig::instructions`]) but the libcupti in
    /// use has no SASS metrics API (CUDA 12.4 and newer have it), or the launch callbacks could
    /// not be enabled.
    #[error(
        "instruction counts (instrumented mode) need CUPTI's SASS metrics API (CUDA 12.4 and \
         newer have it): {0}"
    )]
    InstructionsNotSupported(#[source] CuptiError),
    /// PM sampling ([`CollectorConfig::pm_sampling`]) cannot run: the libcupti lacks the API
    /// (before CUDA 12.6), or its decode thread cannot be started.
    #[error(transparent)]
    PmSampling(#[from] PmSamplingError),
    /// FLOP counters ([`CollectorConfig::flops`]) cannot run: the libcupti lacks the range
    /// profiler (before CUDA 12.6).
    #[error(transparent)]
    Flops(#[from] FlopsError),
    /// A CUPTI call failed otherwise.
    #[error(transparent)]
    Cupti(CuptiError),
    /// The sink could not begin the recording.
    #[error("cannot begin the recording: {0}")]
    Sink(#[source] gpumeter_recording::gmr::GmrError),
}

impl CollectorError {
    /// The typed error for a failed CUPTI call: NOT_INITIALIZED → [`CollectorError::NoGpu`],
    /// MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED → [`CollectorError::AnotherProfiler`], else
    /// [`CollectorError::Cupti`].
    pub fn from_cupti(e: CuptiError) -> CollectorError {
        const NOT_INITIALIZED: u32 = cupti_sys::v13_4::CUPTI_ERROR_NOT_INITIALIZED;
        const MULTIPLE: u32 = cupti_sys::v13_4::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
        match (&e, e.code()) {
            (CuptiError::Api { function, .. }, Some(NOT_INITIALIZED)) => CollectorError::NoGpu {
                function,
                detail: e.to_string(),
            },
            (CuptiError::Api { function, .. }, Some(MULTIPLE)) => CollectorError::AnotherProfiler {
                function,
                detail: e.to_string(),
            },
            _ => CollectorError::Cupti(e),
        }
    }
}

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

/// What a collection did, from [`Collector::stop`]. A recording misses work when
/// [`StopReport::is_complete`] is `false`; the counts say how much.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StopReport {
    /// The final header given to the sink (the start header plus the device inventory).
    pub header: GmrHeader,
    /// Activity buffers the sink accepted.
    pub buffers: u64,
    /// Their valid bytes.
    pub bytes: u64,
    /// Records in them.
    pub records: u64,
    /// KERNEL and CONCURRENT_KERNEL records among them.
    pub kernels: u64,
    /// Records CUPTI reported dropped (its buffers were full or late): in the recording as
    /// dropped-count frames, booked as loss `dropped` by a usage report.
    pub dropped_records: u64,
    /// Buffers whose delivery failed (a panic or a sink error): their records are missing.
    pub failed_buffers: u64,
    /// Buffers CUPTI completed after the session ended: not recorded.
    pub discarded_buffers: u64,
    /// Completions of buffers the pool had not lent (or had already got back): ignored.
    pub unknown_buffers: u64,
    /// Buffers that did not walk to their end with the session's layouts (recorded whole).
    pub decode_errors: u64,
    /// Buffers CUPTI still held after the forced flush (empty ones it had not used yet).
    pub outstanding_buffers: u64,
    /// Panics caught in callbacks (messages; at most 32, then a count).
    pub panics: Vec<String>,
    /// Errors: sink failures, failed CUPTI calls at stop (at most 32, then a count).
    pub errors: Vec<String>,
    /// Instruction-count frames handed to the sink ([`CollectorConfig::instructions`]): one
    /// per instrumented kernel-launch call.
    pub instruction_frames: u64,
    /// Warnings: kinds that could not be enabled, inventory or energy that could not be read.
    pub warnings: Vec<String>,
    /// Energy frames handed to the sink ([`CollectorConfig::energy`]).
    pub energy_samples: u64,
    /// PM samples handed to the sink ([`CollectorConfig::pm_sampling`]).
    pub pm_samples: u64,
    /// PM-sample frames handed to the sink.
    pub pm_frames: u64,
    /// Hardware-buffer overflows of PM sampling (samples were lost; each is flagged in the
    /// recording and booked as loss `pm_sample_overflow` by a usage report).
    pub pm_overflows: u64,
    /// PM sample values that were not usable counts (NaN, infinite, negative, too large):
    /// those counters are absent from their samples.
    pub pm_unusable_values: u64,
    /// PM samples decoded but not written (the sink refused them).
    pub pm_unwritten_samples: u64,
    /// Devices PM-sampled, with the chip, metrics and trigger.
    pub pm_devices: Vec<(u32, String)>,
    /// Operation-counters frames handed to the sink ([`CollectorConfig::flops`]).
    pub flops_frames: u64,
    /// Kernel launches written with FLOP counters.
    pub flops_launches: u64,
    /// Kernel launches left without FLOP counters (ranges dropped or missing, or frames the
    /// sink refused): their device's FLOP meters are not meterable in a usage report.
    pub flops_launches_without_counts: u64,
    /// FLOP counter values that were not usable counts (left out of their launch).
    pub flops_unusable_values: u64,
    /// Contexts profiled: (CUDA ordinal, metrics and replay passes per kernel).
    pub flops_contexts: Vec<(u32, String)>,
}

impl StopReport {
    /// `true` when nothing was lost: no dropped records, no failed, discarded or unknown
    /// buffers, no PM-sampling overflow or unwritten samples, no panics and no errors.
    pub fn is_complete(&self) -> bool {
        self.dropped_records == 0
            && self.failed_buffers == 0
            && self.discarded_buffers == 0
            && self.unknown_buffers == 0
            && self.panics.is_empty()
            && self.errors.is_empty()
            && self.pm_overflows == 0
            && self.pm_unwritten_samples == 0
            && self.flops_launches_without_counts == 0
    }
}

/// The process-wide state behind the C callbacks.
struct Live {
    cupti: &'static Cupti,
    core: Core,
}

static LIVE: OnceLock<Live> = OnceLock::new();
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Releases [`RUNNING`] on drop unless defused.
struct RunningGuard(bool);

impl RunningGuard {
    fn claim() -> Result<RunningGuard, CollectorError> {
        RUNNING
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .map(|_| RunningGuard(true))
            .map_err(|_| CollectorError::AlreadyRunning)
    }
    fn defuse(mut self) {
        self.0 = false;
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        if self.0 {
            RUNNING.store(false, Ordering::SeqCst);
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

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Where to look for libcupti for `config`.
fn locations(config: &CollectorConfig) -> Vec<SearchLocation> {
    if let Some(p) = &config.cupti_lib {
        return vec![SearchLocation::File(p.clone())];
    }
    let env_set = std::env::var_os(ENV_CUPTI_LIB).is_some_and(|v| !v.is_empty());
    let mut out = Vec::new();
    if !env_set {
        for soname in ["libcupti.so.13", "libcupti.so.12"] {
            if ffi::already_loaded(soname) {
                out.push(SearchLocation::LinkerSearch(soname));
            }
        }
    }
    if config.search_python {
        out.extend(cupti_sys::search_locations());
    } else {
        out.extend(cupti_sys::search_locations_with(
            |k| std::env::var_os(k),
            Vec::new,
        ));
    }
    out
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The process's libcupti and its layouts: loaded on first use, then always the same.
fn live(config: &CollectorConfig) -> Result<(&'static Live, ApiVersion), CollectorError> {
    if let Some(live) = LIVE.get() {
        if let Some(p) = &config.cupti_lib {
            if !same_file(p, live.cupti.path()) {
                return Err(CollectorError::LibraryConflict {
                    loaded: live.cupti.path().to_path_buf(),
                    requested: p.clone(),
                });
            }
        }
        return Ok((live, api_version(live.cupti)?));
    }
    let cupti =
        Cupti::load_from_locations(&locations(config)).map_err(CollectorError::LibraryMissing)?;
    // Never unloaded (see `cupti_sys::Cupti`): the callbacks may run until the process ends.
    let cupti: &'static Cupti = Box::leak(Box::new(cupti));
    let api = api_version(cupti)?;
    let live = LIVE.get_or_init(|| Live {
        cupti,
        core: Core::new(config.buffer_size, config.pooled_buffers),
    });
    Ok((live, api))
}

/// The layouts of `cupti`'s buffers, from `cuptiGetVersion()`.
fn api_version(cupti: &Cupti) -> Result<ApiVersion, CollectorError> {
    match cupti.version() {
        Ok(v) => ApiVersion::from_cupti(v).map_err(|_| CollectorError::UnsupportedVersion {
            path: cupti.path().to_path_buf(),
            api_version: v,
        }),
        Err(e) if e.is_not_initialized() => Err(CollectorError::from_cupti(e)),
        // CUPTI 13.x answers CUPTI_ERROR_UNKNOWN to everything without a driver.
        Err(e) if !ffi::driver_loadable() => Err(CollectorError::NoGpu {
            function: "cuptiGetVersion",
            detail: format!("{e}; the CUDA driver library (libcuda.so.1) cannot be loaded"),
        }),
        Err(e) => Err(CollectorError::Cupti(e)),
    }
}

fn validate(config: &CollectorConfig) -> Result<(), CollectorError> {
    let bad = |m: String| Err(CollectorError::Config(m));
    if !(MIN_BUFFER_SIZE..=MAX_BUFFER_SIZE).contains(&config.buffer_size) {
        return bad(format!(
            "buffer_size {} is outside {MIN_BUFFER_SIZE}..={MAX_BUFFER_SIZE} bytes",
            config.buffer_size
        ));
    }
    if config.kinds.contains(&ActivityKind::KERNEL) {
        return bad(
            "kinds contains KERNEL, which serializes kernel execution; use CONCURRENT_KERNEL"
                .into(),
        );
    }
    if !config.kinds.contains(&ActivityKind::CONCURRENT_KERNEL) {
        return bad("kinds must contain CONCURRENT_KERNEL".into());
    }
    if let Some(pm) = &config.pm_sampling {
        pm.validate().map_err(CollectorError::Config)?;
    }
    if let Some(f) = &config.flops {
        f.validate().map_err(CollectorError::Config)?;
    }
    if config.energy && !ENERGY_INTERVAL_RANGE.contains(&config.energy_interval) {
        return bad(format!(
            "energy_interval {:?} is outside {:?}..={:?}",
            config.energy_interval,
            ENERGY_INTERVAL_RANGE.start(),
            ENERGY_INTERVAL_RANGE.end()
        ));
    }
    Ok(())
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
        validate(&config)?;
        let guard = RunningGuard::claim()?;
        let (live, api) = live(&config)?;
        let cupti = live.cupti;
        if config.instructions {
            cupti
                .sass_metrics_available()
                .map_err(CollectorError::InstructionsNotSupported)?;
        }
        if config.pm_sampling.is_some() {
            cupti
                .pm_sampling_available()
                .map_err(|e| CollectorError::PmSampling(PmSamplingError::NotAvailable(e)))?;
        }
        if config.flops.is_some() {
            cupti
                .range_profiler_available()
                .map_err(|e| CollectorError::Flops(FlopsError::NotAvailable(e)))?;
        }
        live.core.pool().set_size(config.buffer_size);
        let subscriber = ffi::subscribe(cupti).map_err(CollectorError::from_cupti)?;
        let clock = ClockPair {
            cupti_timestamp_ns: cupti.timestamp().unwrap_or(0),
            unix_time_ns: now_unix_ns(),
        };
        let header = GmrHeader {
            cupti_api_version: api.cupti_api_version(),
            host: ffi::host_name(),
            clock,
            process_id: std::process::id(),
            devices: Vec::new(),
            producer: config.producer.clone(),
            instrumented: config.instructions,
        };
        let mut collector = Collector {
            cupti,
            api,
            header: header.clone(),
            enabled: Vec::new(),
            subscriber: Some(subscriber),
            warnings: Vec::new(),
            driver_inventory: config.driver_inventory,
            nvml_inventory: config.nvml_inventory,
            energy: None,
            instructions: false,
            pm_sampling: false,
            flops: false,
            running: false,
        };
        if let Err(e) = live.core.begin(Session::new(api, header, sink)) {
            collector.undo();
            return Err(CollectorError::Sink(e));
        }
        if let Err(e) = ffi::register_callbacks(cupti) {
            collector.undo();
            return Err(CollectorError::from_cupti(e));
        }
        for &configured in &config.kinds {
            // Instrumented mode records kernels with KERNEL, not CONCURRENT_KERNEL: measured
            // on an H200 with CUPTI 13.0 (scripts/gpu-smoke.sh, docs/COLLECTION.md), SASS
            // metric values are all zero while CONCURRENT_KERNEL is enabled and right with
            // KERNEL. KERNEL serializes kernels, which instrumented mode does anyway.
            let kind = if config.instructions && configured == ActivityKind::CONCURRENT_KERNEL {
                ActivityKind::KERNEL
            } else {
                configured
            };
            match cupti.activity_enable(kind.0) {
                Ok(()) => collector.enabled.push(kind),
                Err(e) if configured == ActivityKind::CONCURRENT_KERNEL => {
                    collector.undo();
                    return Err(CollectorError::from_cupti(e));
                }
                Err(e) => collector
                    .warnings
                    .push(format!("activity kind {kind} not enabled: {e}")),
            }
        }
        if config.flush_period_ms > 0 {
            if let Err(e) = ffi::flush_period(cupti, config.flush_period_ms) {
                collector.warnings.push(format!(
                    "flush period of {} ms not set: {e}",
                    config.flush_period_ms
                ));
            }
        }
        if config.instructions {
            if let Err(e) = collector.start_instructions() {
                collector.undo();
                return Err(CollectorError::InstructionsNotSupported(e));
            }
        }
        if let Some(pm) = &config.pm_sampling {
            if let Err(e) = collector.start_pm_sampling(live, pm) {
                collector.undo();
                return Err(e);
            }
        }
        if let Some(f) = &config.flops {
            if let Err(e) = collector.start_flops(live, f) {
                collector.undo();
                return Err(e);
            }
        }
        if config.energy {
            collector.start_energy(live, config.energy_interval);
        }
        collector.running = true;
        guard.defuse();
        Ok(collector)
    }

    /// Starts the energy sampler ([`CollectorConfig::energy`]); a failure is a warning.
    fn start_energy(&mut self, live: &'static Live, interval: Duration) {
        let cupti = self.cupti;
        let driver_inventory = self.driver_inventory;
        let sources = energy::Sources {
            open: Box::new(|| {
                gpumeter_nvml::Nvml::init()
                    .map(|n| Box::new(n) as Box<dyn gpumeter_nvml::Telemetry>)
            }),
            clock: Box::new(move || cupti.timestamp().ok()),
            clock_pair: self.header.clock.clone(),
            // The CUDA driver's devices, once the program has initialised it (never loads it).
            inventory: Box::new(move || {
                driver_inventory
                    .then(ffi::driver_inventory)
                    .and_then(Result::ok)
            }),
            by_index: nvml::index_is_ordinal,
            write: Box::new(move |s| live.core.energy(s)),
        };
        match energy::EnergySampler::start(sources, interval) {
            Ok(s) => self.energy = Some(s),
            Err(e) => self.warnings.push(e),
        }
    }

    /// Turns PM sampling on ([`pmsampling`]): the decode thread, then the context creation and
    /// destruction callbacks that set devices up and release them.
    fn start_pm_sampling(
        &mut self,
        live: &'static Live,
        config: &PmSamplingConfig,
    ) -> Result<(), CollectorError> {
        let Some(subscriber) = self.subscriber else {
            return Ok(());
        };
        pmsampling::begin(
            self.cupti,
            config,
            Box::new(move |frame| live.core.pm_samples(frame)),
        )?;
        self.pm_sampling = true;
        for cbid in [
            ffi::CBID_CONTEXT_CREATED,
            ffi::CBID_CONTEXT_DESTROY_STARTING,
        ] {
            ffi::enable_callback(self.cupti, subscriber, true, ffi::DOMAIN_RESOURCE, cbid)
                .map_err(CollectorError::from_cupti)?;
        }
        Ok(())
    }

    /// Turns FLOP counting on ([`flops`]): the launch callbacks (which note launches in
    /// order) and the context creation and destruction callbacks (which set the range
    /// profiler up and decode it). The launch callbacks also track nesting ([`sass`]), whether
    /// or not instrumented mode is on.
    fn start_flops(
        &mut self,
        live: &'static Live,
        config: &FlopsConfig,
    ) -> Result<(), CollectorError> {
        let Some(subscriber) = self.subscriber else {
            return Ok(());
        };
        flops::begin(
            self.cupti,
            config,
            ffi::graph_launch_callback_ids(self.cupti),
            Box::new(move |frame| live.core.op_counts(frame)),
        )?;
        self.flops = true;
        let mut ids = ffi::launch_callback_ids(self.cupti);
        ids.push((ffi::DOMAIN_RESOURCE, ffi::CBID_CONTEXT_CREATED));
        ids.push((ffi::DOMAIN_RESOURCE, ffi::CBID_CONTEXT_DESTROY_STARTING));
        for (domain, cbid) in ids {
            ffi::enable_callback(self.cupti, subscriber, true, domain, cbid)
                .map_err(CollectorError::from_cupti)?;
        }
        Ok(())
    }

    /// Turns instrumented mode on ([`sass`]): the launch and context-destruction callbacks.
    fn start_instructions(&mut self) -> Result<(), CuptiError> {
        let Some(subscriber) = self.subscriber else {
            return Ok(());
        };
        sass::begin();
        self.instructions = true;
        let mut ids = ffi::launch_callback_ids(self.cupti);
        ids.push((ffi::DOMAIN_RESOURCE, ffi::CBID_CONTEXT_DESTROY_STARTING));
        for (domain, cbid) in ids {
            ffi::enable_callback(self.cupti, subscriber, true, domain, cbid)?;
        }
        Ok(())
    }

    /// Undoes a partial start: disables what was enabled, aborts the sink, unsubscribes.
    fn undo(&mut self) {
        if std::mem::take(&mut self.flops) {
            let _ = flops::end();
        }
        if std::mem::take(&mut self.pm_sampling) {
            let _ = pmsampling::end();
        }
        if std::mem::take(&mut self.instructions) {
            let _ = sass::end(self.cupti);
        }
        for kind in std::mem::take(&mut self.enabled) {
            let _ = self.cupti.activity_disable(kind.0);
        }
        if let Some(live) = LIVE.get() {
            if let Some(mut s) = live.core.end() {
                s.sink.abort();
            }
        }
        if let Some(h) = self.subscriber.take() {
            let _ = ffi::unsubscribe(self.cupti, h);
        }
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

    fn stop_inner(&mut self) -> StopReport {
        let mut report = StopReport {
            warnings: std::mem::take(&mut self.warnings),
            ..StopReport::default()
        };
        if !self.running {
            return report;
        }
        self.running = false;
        let _release = RunningGuard(true);
        let cupti = self.cupti;
        let mut errors = Vec::new();
        if std::mem::take(&mut self.instructions) {
            let ended = sass::end(cupti);
            report.warnings.extend(ended.warnings);
            report.instruction_frames = ended.frames;
        }
        for kind in std::mem::take(&mut self.enabled) {
            if let Err(e) = cupti.activity_disable(kind.0) {
                report
                    .warnings
                    .push(format!("activity kind {kind} not disabled: {e}"));
            }
        }
        if let Err(e) = cupti.activity_flush_all(ffi::FLUSH_FORCED) {
            errors.push(format!("forced flush failed (buffers may be missing): {e}"));
        }
        // The last energy reading, after the final flush; nothing is written by the sampler
        // after this.
        let energy_left = self.energy.take().map(|s| s.stop(nvml::NVML_TIMEOUT));
        // The FLOP counters of the launches not yet decoded, while the recording is open.
        if std::mem::take(&mut self.flops) {
            if let Some(f) = flops::end() {
                report.flops_frames = f.frames;
                report.flops_launches = f.tally.launches_with_counts;
                report.flops_launches_without_counts =
                    f.tally.launches_without_counts + f.unwritten_launches;
                report.flops_unusable_values = f.tally.unusable_values;
                report.flops_contexts = f.contexts;
                report.warnings.extend(f.warnings);
                errors.extend(f.errors);
            }
        }
        // The PM samples left in the hardware buffers, while the recording is still open.
        if std::mem::take(&mut self.pm_sampling) {
            if let Some(t) = pmsampling::end() {
                add_pm_tally(&mut report, &mut errors, t);
            }
        }
        let Some(live) = LIVE.get() else {
            return report;
        };
        match ffi::read_dropped(cupti) {
            Ok(Some(d)) => live.core.dropped(d),
            Ok(None) => {}
            Err(e) => errors.push(format!("dropped-record count not read at stop: {e}")),
        }
        if let Some(h) = self.subscriber.take() {
            if let Err(e) = ffi::unsubscribe(cupti, h) {
                report.warnings.push(e.to_string());
            }
        }
        let mut header = self.header.clone();
        if let Some(mut session) = live.core.end() {
            let mut devices: Vec<GmrDevice> = session.devices().values().cloned().collect();
            if self.driver_inventory {
                match ffi::driver_inventory() {
                    Ok(found) => merge_inventory(&mut devices, found),
                    Err(e) => report
                        .warnings
                        .push(format!("no device inventory from the CUDA driver: {e}")),
                }
            }
            if self.nvml_inventory {
                nvml::nvml_inventory(
                    &mut devices,
                    &mut report.warnings,
                    nvml::verbose(),
                    nvml::NVML_TIMEOUT,
                );
            }
            header.devices = devices;
            if let Some(left) = energy_left {
                let resolved = left.resolve(&header.devices);
                report.energy_samples = resolved.written;
                report.warnings.extend(resolved.warnings);
                for s in &resolved.samples {
                    let sink = &mut session.sink;
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.energy(s)))
                    {
                        Ok(Ok(())) => report.energy_samples += 1,
                        Ok(Err(e)) => {
                            errors.push(format!("could not record an energy sample: {e}"))
                        }
                        Err(p) => errors.push(format!(
                            "panic while recording an energy sample: {}",
                            self::completion::panic_message(p.as_ref())
                        )),
                    }
                }
            }
            let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                session.sink.finish(&header)
            }));
            match finished {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(format!("could not finish the recording: {e}")),
                Err(p) => errors.push(format!(
                    "panic while finishing the recording: {}",
                    self::completion::panic_message(p.as_ref())
                )),
            }
        }
        let t = live.core.tally();
        report.header = header;
        report.buffers = t.written;
        report.bytes = t.bytes;
        report.records = t.records;
        report.kernels = t.kernels;
        report.dropped_records = t.dropped;
        report.failed_buffers = t.failed;
        report.discarded_buffers = t.discarded;
        report.unknown_buffers = t.unknown;
        report.decode_errors = t.decode_errors;
        report.outstanding_buffers = t.pool.outstanding;
        report.panics = t.panics;
        report.errors = t.errors;
        report.errors.extend(errors);
        report
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

/// Puts a PM sampling tally into the stop report: counts, devices, warnings (including one
/// for overflows and unusable values, which are never silent) and errors.
fn add_pm_tally(report: &mut StopReport, errors: &mut Vec<String>, t: PmSamplingTally) {
    report.pm_samples = t.samples;
    report.pm_frames = t.frames;
    report.pm_overflows = t.overflows;
    report.pm_unusable_values = t.unusable_values;
    report.pm_unwritten_samples = t.unwritten_samples;
    report.pm_devices = t.devices;
    report.warnings.extend(t.warnings);
    if t.overflows > 0 {
        report.warnings.push(format!(
            "PM sampling: the hardware buffer overflowed {} time(s); samples were lost (flagged \
             in the recording; a larger hw_buffer_bytes, a shorter decode_period or a longer \
             interval avoids it)",
            t.overflows
        ));
    }
    if t.unusable_values > 0 {
        report.warnings.push(format!(
            "PM sampling: {} counter value(s) were NaN, infinite, negative or too large and \
             are absent from their samples",
            t.unusable_values
        ));
    }
    errors.extend(t.errors);
}

/// Adds the driver's view of each device to the DEVICE-record inventory: a device the records
/// did not name is added; known fields stay.
fn merge_inventory(devices: &mut Vec<GmrDevice>, from_driver: Vec<GmrDevice>) {
    for d in from_driver {
        match devices.iter_mut().find(|x| x.id == d.id) {
            Some(x) => {
                if x.name.is_none() {
                    x.name = d.name;
                }
                if x.uuid.is_none() {
                    x.uuid = d.uuid;
                }
                if x.sm_count.is_none() {
                    x.sm_count = d.sm_count;
                }
                if x.compute_capability.is_none() {
                    x.compute_capability = d.compute_capability;
                }
            }
            None => devices.push(d),
        }
    }
    devices.sort_by_key(|d| d.id);
}
