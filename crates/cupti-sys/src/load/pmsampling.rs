//! CUPTI's PM sampling API (`cupti_pmsampling.h`) and the profiler host API it is configured and
//! decoded with (`cupti_profiler_host.h`): hardware counters sampled at fixed intervals while
//! the program runs, without serializing its kernels. Both arrived in CUDA 12.6; a libcupti
//! without them has none of the symbols, and [`Cupti::pm_sampling_available`] says which is
//! missing.
//!
//! The wrappers below follow the headers' documentation (CUDA 12.6+, the same parameter structs
//! in the 12.8 and 13.4 bindings up to the fields set here). Offline, without a GPU, the host
//! side answers (chip names, metric lists, config images: tested against the 12.8 wheel); the
//! target side (`cuptiPmSampling*`) needs a device and was written from the headers only.
//!
//! The host side is implemented in `libnvperf_host.so`, which libcupti opens by its bare
//! name: a libcupti outside the linker's search path (a pip wheel) then answers
//! `CUPTI_ERROR_NOT_INITIALIZED`. [`Cupti::pm_host_initialize`] therefore loads the copy beside
//! the loaded libcupti first (once per directory), so that libcupti's own lookup finds it.

use std::collections::BTreeSet;
use std::ffi::{c_void, CStr, CString};
use std::os::raw::c_char;
use std::path::PathBuf;
use std::sync::Mutex;

use super::{resolve, Cupti, Table};
use crate::error::CuptiError;

/// `CUPTI_PROFILER_STRUCT_SIZE(type, field)`: offset of `field` plus its size.
macro_rules! pm_struct_size {
    ($t:ty, $field:ident) => {
        std::mem::offset_of!($t, $field) + pm_field_size(|s: &$t| &s.$field)
    };
}

/// `$func` (a table field named as the CUPTI function) with a parameter struct `$params` whose
/// only input is the object `$obj` in its field `$field`, the struct's size counted up to that
/// field: `Result<(), CuptiError>`, [`CuptiError::NotSupported`] when the symbol is missing,
/// [`CuptiError::Api`] when the call fails. The caller's `// SAFETY:` comment says why `$obj`
/// is live (or consumed) for the call.
macro_rules! pm_one_object_call {
    ($self:expr, $func:ident, $params:ident, $field:ident, $obj:expr) => {{
        const F: &str = stringify!($func);
        with_api!($self, api, b => {
            let f = pm_fn(&api.$func, F)?;
            let mut p = b::$params {
                structSize: pm_struct_size!(b::$params, $field),
                $field: $obj.cast(),
                ..Default::default()
            };
            // SAFETY: `p` is a valid parameter struct with its header size; `$obj` is live for
            // the call, as the caller's `SAFETY:` comment says.
            let rc = unsafe { f(&mut p) };
            $self.check(F, rc)
        })
    }};
}

/// The size of the field a projection returns (for [`pm_struct_size!`]).
fn pm_field_size<T, F>(_: impl Fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// The functions PM sampling needs, in the order [`Cupti::pm_sampling_available`] checks
/// them: the host side (the chip's metrics, the config image, evaluating counter values), then
/// the target side (set-up, start/stop, decoding the hardware buffer, the samples' times).
pub const PM_SAMPLING_SYMBOLS: [&str; 20] = [
    "cuptiProfilerHostInitialize",
    "cuptiProfilerHostDeinitialize",
    "cuptiProfilerHostGetBaseMetrics",
    "cuptiProfilerHostGetMetricProperties",
    "cuptiProfilerHostConfigAddMetrics",
    "cuptiProfilerHostGetConfigImageSize",
    "cuptiProfilerHostGetConfigImage",
    "cuptiProfilerHostEvaluateToGpuValues",
    "cuptiPmSamplingSetConfig",
    "cuptiPmSamplingEnable",
    "cuptiPmSamplingDisable",
    "cuptiPmSamplingStart",
    "cuptiPmSamplingStop",
    "cuptiPmSamplingDecodeData",
    "cuptiPmSamplingGetCounterAvailability",
    "cuptiPmSamplingGetCounterDataSize",
    "cuptiPmSamplingCounterDataImageInitialize",
    "cuptiPmSamplingGetCounterDataInfo",
    "cuptiPmSamplingCounterDataGetSampleInfo",
    "cuptiDeviceGetChipName",
];

fn pm_sym<T: Copy>(
    field: &Result<T, libloading::Error>,
    name: &'static str,
) -> Result<(), CuptiError> {
    resolve(field, name)
        .map(|_| ())
        .map_err(|_| CuptiError::NotSupported {
            api: "PM sampling",
            missing: name.to_string(),
        })
}

impl Cupti {
    /// Whether this libcupti has the PM sampling and profiler host APIs: `Ok` when every one of
    /// [`PM_SAMPLING_SYMBOLS`] is present. Looks symbols up only; calls nothing.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`] naming the first missing function (a libcupti older than
    /// CUDA 12.6).
    pub fn pm_sampling_available(&self) -> Result<(), CuptiError> {
        let s = PM_SAMPLING_SYMBOLS;
        with_api!(self, api, _b => {
            pm_sym(&api.cuptiProfilerHostInitialize, s[0])?;
            pm_sym(&api.cuptiProfilerHostDeinitialize, s[1])?;
            pm_sym(&api.cuptiProfilerHostGetBaseMetrics, s[2])?;
            pm_sym(&api.cuptiProfilerHostGetMetricProperties, s[3])?;
            pm_sym(&api.cuptiProfilerHostConfigAddMetrics, s[4])?;
            pm_sym(&api.cuptiProfilerHostGetConfigImageSize, s[5])?;
            pm_sym(&api.cuptiProfilerHostGetConfigImage, s[6])?;
            pm_sym(&api.cuptiProfilerHostEvaluateToGpuValues, s[7])?;
            pm_sym(&api.cuptiPmSamplingSetConfig, s[8])?;
            pm_sym(&api.cuptiPmSamplingEnable, s[9])?;
            pm_sym(&api.cuptiPmSamplingDisable, s[10])?;
            pm_sym(&api.cuptiPmSamplingStart, s[11])?;
            pm_sym(&api.cuptiPmSamplingStop, s[12])?;
            pm_sym(&api.cuptiPmSamplingDecodeData, s[13])?;
            pm_sym(&api.cuptiPmSamplingGetCounterAvailability, s[14])?;
            pm_sym(&api.cuptiPmSamplingGetCounterDataSize, s[15])?;
            pm_sym(&api.cuptiPmSamplingCounterDataImageInitialize, s[16])?;
            pm_sym(&api.cuptiPmSamplingGetCounterDataInfo, s[17])?;
            pm_sym(&api.cuptiPmSamplingCounterDataGetSampleInfo, s[18])?;
            pm_sym(&api.cuptiDeviceGetChipName, s[19])?;
            Ok(())
        })
    }
}

/// Most bytes of a config, counter-availability or counter-data image accepted from CUPTI's
/// size queries (1 GiB): a larger size is treated as corrupt rather than allocated.
const MAX_IMAGE_BYTES: usize = 1 << 30;

/// A profiler host object (`CUpti_Profiler_Host_Object`) for PM sampling
/// ([`Cupti::pm_host_initialize`]) or the range profiler ([`Cupti::range_host_initialize`]) on
/// one chip. Release it with [`Cupti::pm_host_deinitialize`] (dropping it without that leaks
/// CUPTI's allocation, nothing else).
#[derive(Debug)]
pub struct PmHost {
    obj: *mut c_void,
    chip: String,
}

// SAFETY: the host object is CUPTI-owned memory reached only through CUPTI calls; the
// wrappers take `&PmHost` / `PmHost` so calls on one object are never concurrent from Rust
// unless the caller shares it, which `Sync` is not implemented for.
unsafe impl Send for PmHost {}

impl PmHost {
    /// The chip name it was initialised for.
    pub fn chip(&self) -> &str {
        &self.chip
    }
}

/// The metric types of `cupti_profiler_host.h` (`CUpti_MetricType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricType {
    /// `CUPTI_METRIC_TYPE_COUNTER`: raw counts (cycles, bytes, sectors).
    Counter,
    /// `CUPTI_METRIC_TYPE_RATIO`.
    Ratio,
    /// `CUPTI_METRIC_TYPE_THROUGHPUT`: percentages of a peak.
    Throughput,
}

impl MetricType {
    fn raw(self) -> u32 {
        match self {
            MetricType::Counter => 0,
            MetricType::Ratio => 1,
            MetricType::Throughput => 2,
        }
    }
}

/// Serializes the profiler host calls of the whole process. Two `cuptiProfilerHostInitialize`
/// calls at once (the collector's context callbacks for two devices, or two tests) make one of
/// them fail with `CUPTI_ERROR_UNKNOWN` (seen with the CUDA 12.8 wheel); the host calls are
/// few (set-up per device, then one evaluation per sample on the single decode thread), so a
/// lock costs nothing measurable.
fn host_lock() -> std::sync::MutexGuard<'static, ()> {
    static HOST: Mutex<()> = Mutex::new(());
    HOST.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Loads `libnvperf_host.so` and `libnvperf_target.so` from beside `cupti_path` (when there)
/// once per directory and keeps them loaded, so that libcupti's own `dlopen` by bare name
/// finds them (glibc matches already-loaded objects by soname).
fn preload_nvperf(cupti_path: &std::path::Path) {
    static DONE: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
    let Some(dir) = cupti_path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return;
    };
    let mut done = DONE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !done.insert(dir.to_path_buf()) {
        return;
    }
    for name in ["libnvperf_host.so", "libnvperf_target.so"] {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        // SAFETY: loading NVIDIA's profiler libraries shipped beside libcupti runs their
        // initialisers, which need nothing from this process; they are never unloaded
        // (libcupti keeps calling into them).
        if let Ok(lib) = unsafe { libloading::Library::new(&path) } {
            std::mem::forget(lib);
        }
    }
}

/// The `CString` of a name given to CUPTI, or an error naming the function.
fn pm_c_string(function: &'static str, s: &str) -> Result<CString, CuptiError> {
    CString::new(s).map_err(|_| CuptiError::Api {
        function,
        code: crate::v13_4::CUPTI_ERROR_INVALID_PARAMETER,
        name: "CUPTI_ERROR_INVALID_PARAMETER",
        message: format!("the name {s:?} contains a NUL byte"),
    })
}

/// A size CUPTI announced, checked against [`MAX_IMAGE_BYTES`].
fn checked_size(function: &'static str, size: usize) -> Result<usize, CuptiError> {
    if size == 0 || size > MAX_IMAGE_BYTES {
        return Err(CuptiError::InvalidBuffer {
            reason: format!("{function} announced {size} bytes (expected 1 to {MAX_IMAGE_BYTES})"),
        });
    }
    Ok(size)
}

impl Cupti {
    /// Creates a profiler host object for PM sampling on chip `chip` (e.g. `"GH100"`, as
    /// [`Cupti::device_chip_name`] gives it), with the device's counter-availability image
    /// when there is one ([`Cupti::pm_counter_availability`]; `None` offline). Loads
    /// `libnvperf_host.so` from beside libcupti first (see the module docs).
    ///
    /// Offline with the CUDA 12.8 wheel: `"GA100"`, `"GH100"`, `"AD102"`, `"GB100"` succeed;
    /// an unknown chip (or a lower-case name) is `CUPTI_ERROR_INVALID_PARAMETER`; CUPTI 13.4
    /// answers `CUPTI_ERROR_UNKNOWN` without a GPU.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiProfilerHostInitialize")]
    pub fn pm_host_initialize(
        &self,
        chip: &str,
        counter_availability: Option<&[u8]>,
    ) -> Result<PmHost, CuptiError> {
        self.host_initialize(chip, counter_availability, false)
    }

    /// Creates a profiler host object for CUPTI's range profiler (`cupti_range_profiler.h`,
    /// `CUPTI_PROFILER_TYPE_RANGE_PROFILER`) on chip `chip`, as [`Cupti::pm_host_initialize`]
    /// does for PM sampling: its metric lists, config images and evaluations are the range
    /// profiler's (per-range counters, collected over as many replay passes as
    /// [`Cupti::profiler_host_num_passes`] says).
    ///
    /// Offline with the CUDA 12.8 wheel: `"GA100"`, `"GH100"`, `"AD102"` succeed (tested);
    /// CUPTI 13.4 answers `CUPTI_ERROR_UNKNOWN` without a GPU.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiProfilerHostInitialize")]
    pub fn range_host_initialize(
        &self,
        chip: &str,
        counter_availability: Option<&[u8]>,
    ) -> Result<PmHost, CuptiError> {
        self.host_initialize(chip, counter_availability, true)
    }

    /// Replay passes the range profiler needs to collect the metrics of `config_image`
    /// ([`Cupti::pm_host_config_image`] of a range-profiler host object): with kernel replay,
    /// each profiled kernel runs this many times.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiProfilerHostGetNumOfPasses")]
    pub fn profiler_host_num_passes(&self, config_image: &[u8]) -> Result<usize, CuptiError> {
        const F: &str = "cuptiProfilerHostGetNumOfPasses";
        let _serial = host_lock();
        // CUPTI's parameter is not const; it only reads the image: a copy keeps the caller's.
        let mut image = config_image.to_vec();
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiProfilerHostGetNumOfPasses, F)?;
            let mut p = b::CUpti_Profiler_Host_GetNumOfPasses_Params {
                structSize: pm_struct_size!(b::CUpti_Profiler_Host_GetNumOfPasses_Params, numOfPasses),
                configImageSize: image.len(),
                pConfigImage: image.as_mut_ptr(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; `image` is live and `configImageSize` bytes long
            // for the call.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            Ok(p.numOfPasses)
        })
    }

    /// [`Cupti::pm_host_initialize`] / [`Cupti::range_host_initialize`].
    fn host_initialize(
        &self,
        chip: &str,
        counter_availability: Option<&[u8]>,
        range_profiler: bool,
    ) -> Result<PmHost, CuptiError> {
        const F: &str = "cuptiProfilerHostInitialize";
        let _serial = host_lock();
        preload_nvperf(self.path());
        let c_chip = pm_c_string(F, chip)?;
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiProfilerHostInitialize, F)?;
            let mut p = b::CUpti_Profiler_Host_Initialize_Params {
                structSize: pm_struct_size!(b::CUpti_Profiler_Host_Initialize_Params, pHostObject),
                profilerType: if range_profiler {
                    b::CUPTI_PROFILER_TYPE_RANGE_PROFILER
                } else {
                    b::CUPTI_PROFILER_TYPE_PM_SAMPLING
                },
                pChipName: c_chip.as_ptr(),
                pCounterAvailabilityImage: counter_availability
                    .map_or(std::ptr::null(), <[u8]>::as_ptr),
                ..Default::default()
            };
            // SAFETY: `p` is a valid parameter struct with its header size; the chip name and
            // the availability image outlive the call.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            if p.pHostObject.is_null() {
                return Err(self.api_error(F, b::CUPTI_ERROR_UNKNOWN));
            }
            Ok(PmHost { obj: p.pHostObject.cast(), chip: chip.to_string() })
        })
    }

    /// Destroys a host object.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiProfilerHostDeinitialize")]
    pub fn pm_host_deinitialize(&self, host: PmHost) -> Result<(), CuptiError> {
        let _serial = host_lock();
        // SAFETY: `host.obj` came from `cuptiProfilerHostInitialize` and is consumed here.
        pm_one_object_call!(
            self,
            cuptiProfilerHostDeinitialize,
            CUpti_Profiler_Host_Deinitialize_Params,
            pHostObject,
            host.obj
        )
    }

    /// The base metrics of type `kind` the host object's chip has for PM sampling (e.g.
    /// `"sm__cycles_active"`: add a rollup such as `.sum` to name a metric).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`]; [`CuptiError::InvalidBuffer`] for
    /// a NULL list with a non-zero count.
    #[doc(alias = "cuptiProfilerHostGetBaseMetrics")]
    pub fn pm_host_base_metrics(
        &self,
        host: &PmHost,
        kind: MetricType,
    ) -> Result<Vec<String>, CuptiError> {
        const F: &str = "cuptiProfilerHostGetBaseMetrics";
        let _serial = host_lock();
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiProfilerHostGetBaseMetrics, F)?;
            let mut p = b::CUpti_Profiler_Host_GetBaseMetrics_Params {
                structSize: pm_struct_size!(b::CUpti_Profiler_Host_GetBaseMetrics_Params, numMetrics),
                pHostObject: host.obj.cast(),
                metricType: kind.raw(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the host object is live (`&PmHost`).
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            if p.numMetrics == 0 {
                return Ok(Vec::new());
            }
            if p.ppMetricNames.is_null() || p.numMetrics > 1 << 20 {
                return Err(CuptiError::InvalidBuffer {
                    reason: format!("{F} gave {} names at {:p}", p.numMetrics, p.ppMetricNames),
                });
            }
            // SAFETY: on success CUPTI points `ppMetricNames` at `numMetrics` string pointers
            // owned by the host object, which outlives this copy.
            let names = unsafe { std::slice::from_raw_parts(p.ppMetricNames, p.numMetrics) };
            Ok(names
                .iter()
                .filter(|n| !n.is_null())
                // SAFETY: each non-NULL entry is a NUL-terminated string CUPTI owns.
                .map(|&n| unsafe { CStr::from_ptr(n) }.to_string_lossy().into_owned())
                .collect())
        })
    }

    /// Adds `metrics` (full names, e.g. `"sm__cycles_active.sum"`) to the host object's
    /// configuration. A metric the chip cannot sample is `CUPTI_ERROR_INVALID_PARAMETER`
    /// (CUPTI 12.8: `dram__bytes_read.sum` on GH100 offline).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiProfilerHostConfigAddMetrics")]
    pub fn pm_host_add_metrics(&self, host: &PmHost, metrics: &[&str]) -> Result<(), CuptiError> {
        const F: &str = "cuptiProfilerHostConfigAddMetrics";
        let _serial = host_lock();
        let owned = metrics
            .iter()
            .map(|m| pm_c_string(F, m))
            .collect::<Result<Vec<_>, _>>()?;
        let mut ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiProfilerHostConfigAddMetrics, F)?;
            let mut p = b::CUpti_Profiler_Host_ConfigAddMetrics_Params {
                structSize: pm_struct_size!(b::CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics),
                pHostObject: host.obj.cast(),
                ppMetricNames: ptrs.as_mut_ptr(),
                numMetrics: ptrs.len(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the name array and its strings outlive the call.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)
        })
    }

    /// The config image of the metrics added so far ([`Cupti::pm_host_add_metrics`]), for
    /// [`Cupti::pm_set_config`].
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`] (`CUPTI_ERROR_UNKNOWN` when no metric
    /// was added); [`CuptiError::InvalidBuffer`] for a size of 0 or over 1 GiB.
    #[doc(alias = "cuptiProfilerHostGetConfigImage")]
    pub fn pm_host_config_image(&self, host: &PmHost) -> Result<Vec<u8>, CuptiError> {
        const FS: &str = "cuptiProfilerHostGetConfigImageSize";
        const F: &str = "cuptiProfilerHostGetConfigImage";
        let _serial = host_lock();
        with_api!(self, api, b => {
            let fs = pm_fn(&api.cuptiProfilerHostGetConfigImageSize, FS)?;
            let f = pm_fn(&api.cuptiProfilerHostGetConfigImage, F)?;
            let mut ps = b::CUpti_Profiler_Host_GetConfigImageSize_Params {
                structSize: pm_struct_size!(b::CUpti_Profiler_Host_GetConfigImageSize_Params, configImageSize),
                pHostObject: host.obj.cast(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the host object is live.
            let rc = unsafe { fs(&mut ps) };
            self.check(FS, rc)?;
            let size = checked_size(FS, ps.configImageSize)?;
            let mut image = vec![0u8; size];
            let mut p = b::CUpti_Profiler_Host_GetConfigImage_Params {
                structSize: pm_struct_size!(b::CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage),
                pHostObject: host.obj.cast(),
                configImageSize: image.len(),
                pConfigImage: image.as_mut_ptr(),
                ..Default::default()
            };
            // SAFETY: `image` is writable for `configImageSize` bytes during the call.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            Ok(image)
        })
    }

    /// Evaluates `metrics` for sample `index` of a decoded counter-data image: one `f64` per
    /// metric, in order.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiProfilerHostEvaluateToGpuValues")]
    pub fn pm_host_evaluate(
        &self,
        host: &PmHost,
        counter_data: &[u8],
        index: usize,
        metrics: &[&str],
    ) -> Result<Vec<f64>, CuptiError> {
        const F: &str = "cuptiProfilerHostEvaluateToGpuValues";
        let _serial = host_lock();
        let owned = metrics
            .iter()
            .map(|m| pm_c_string(F, m))
            .collect::<Result<Vec<_>, _>>()?;
        let mut ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        let mut values = vec![0f64; ptrs.len()];
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiProfilerHostEvaluateToGpuValues, F)?;
            let mut p = b::CUpti_Profiler_Host_EvaluateToGpuValues_Params {
                structSize: pm_struct_size!(b::CUpti_Profiler_Host_EvaluateToGpuValues_Params, pMetricValues),
                pHostObject: host.obj.cast(),
                pCounterDataImage: counter_data.as_ptr(),
                counterDataImageSize: counter_data.len(),
                rangeIndex: index,
                ppMetricNames: ptrs.as_mut_ptr(),
                numMetrics: ptrs.len(),
                pMetricValues: values.as_mut_ptr(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the image, names and the `numMetrics` values
            // outlive the call, and `values` has room for `numMetrics` doubles.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            Ok(values)
        })
    }
}

/// Resolves a PM sampling function: a missing symbol is [`CuptiError::NotSupported`].
fn pm_fn<T: Copy>(
    field: &Result<T, libloading::Error>,
    name: &'static str,
) -> Result<T, CuptiError> {
    resolve(field, name).map_err(|_| CuptiError::NotSupported {
        api: "PM sampling",
        missing: name.to_string(),
    })
}

mod rangeprofiler;
mod sampler;
pub use rangeprofiler::{RangeProfiler, RangeStop, RANGE_PROFILER_SYMBOLS};
pub use sampler::{CounterDataInfo, DecodeOutcome, DecodeStopReason, PmSampler, TriggerMode};
