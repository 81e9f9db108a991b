//! How a [`Collector`](crate::Collector) runs: [`CollectorConfig`], its defaults and accepted ranges, and the
//! check made before CUPTI is touched.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use gpumeter_cupti::kind::ActivityKind;
use gpumeter_recording::gmr::Producer;

use crate::error::CollectorError;
use crate::flops::FlopsConfig;
use crate::pmsampling::PmSamplingConfig;

/// The activity kinds a collector enables by default, in the order enabled.
///
/// CONCURRENT_KERNEL is required (its failure fails [`Collector::start`](crate::Collector::start)); a failure to enable
/// any other is a warning in [`Collector::warnings`](crate::Collector::warnings). RUNTIME and DRIVER records give the
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

/// How a [`Collector`](crate::Collector) runs.
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
    /// Whether [`Collector::stop`](crate::Collector::stop) asks the CUDA driver (already loaded and initialised by
    /// the process; never loaded by the collector) for device names, UUIDs, SM counts and
    /// compute capabilities that DEVICE records did not give. Default `true`.
    pub driver_inventory: bool,
    /// Whether [`Collector::stop`](crate::Collector::stop) then asks NVML (`libnvidia-ml.so.1`, loaded at run time
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
    /// NVML, gives warnings in the [`StopReport`](crate::StopReport), never an error. Default `true`.
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
    /// Labels of the process for the header's
    /// [`labels`](gpumeter_recording::gmr::GmrHeader::labels) (key → value), copied as given;
    /// [`labels::process_labels`](crate::labels::process_labels) gives the ones the injection
    /// library records. Default empty (no `labels` key in the header).
    pub labels: BTreeMap<String, String>,
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
            labels: BTreeMap::new(),
        }
    }
}

pub(crate) fn validate(config: &CollectorConfig) -> Result<(), CollectorError> {
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
