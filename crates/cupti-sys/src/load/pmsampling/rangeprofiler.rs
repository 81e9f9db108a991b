//! CUPTI's range profiler (`cupti_range_profiler.h`, CUDA 12.6+): per-range hardware counters
//! of one CUDA context, here with auto ranges (one range per kernel launch) and kernel replay
//! (CUPTI runs each kernel once per counter pass, saving and restoring what it writes).
//! Configured and evaluated with the profiler host API of the parent module
//! ([`Cupti::range_host_initialize`], type `CUPTI_PROFILER_TYPE_RANGE_PROFILER`).
//!
//! Every call here needs a GPU and a CUDA context; they were written from the CUPTI 12.8
//! header's documentation only (the parameter structs are the same in 12.8 and 13.4 up to the
//! fields set here) and are exercised by `scripts/gpu-flops/` on a GPU. Without a GPU,
//! [`Cupti::range_profiler_available`] answers (it looks symbols up only).

use std::ffi::c_void;
use std::os::raw::c_char;

use super::{checked_size, pm_c_string, Cupti};
use crate::error::CuptiError;
use crate::load::{resolve, Table};

/// The range-profiler functions the FLOP collector needs, in the order
/// [`Cupti::range_profiler_available`] checks them (with the host side's, which
/// [`super::PM_SAMPLING_SYMBOLS`] lists first).
pub const RANGE_PROFILER_SYMBOLS: [&str; 13] = [
    "cuptiProfilerHostInitialize",
    "cuptiProfilerHostGetNumOfPasses",
    "cuptiProfilerHostEvaluateToGpuValues",
    "cuptiRangeProfilerEnable",
    "cuptiRangeProfilerDisable",
    "cuptiRangeProfilerSetConfig",
    "cuptiRangeProfilerStart",
    "cuptiRangeProfilerStop",
    "cuptiRangeProfilerDecodeData",
    "cuptiRangeProfilerGetCounterDataSize",
    "cuptiRangeProfilerCounterDataImageInitialize",
    "cuptiRangeProfilerGetCounterDataInfo",
    "cuptiRangeProfilerCounterDataGetRangeInfo",
];

fn range_fn<T: Copy>(
    field: &Result<T, libloading::Error>,
    name: &'static str,
) -> Result<T, CuptiError> {
    resolve(field, name).map_err(|_| CuptiError::NotSupported {
        api: "range profiler",
        missing: name.to_string(),
    })
}

/// `CUPTI_PROFILER_STRUCT_SIZE(type, field)`.
macro_rules! range_struct_size {
    ($t:ty, $field:ident) => {
        std::mem::offset_of!($t, $field) + super::pm_field_size(|s: &$t| &s.$field)
    };
}

/// `$func` with a parameter struct whose only input is the range-profiler object `$obj`:
/// `Result<(), CuptiError>`. The caller's `// SAFETY:` comment says why `$obj` is live.
macro_rules! range_one_object_call {
    ($self:expr, $func:ident, $params:ident, $obj:expr) => {{
        const F: &str = stringify!($func);
        with_api!($self, api, b => {
            let f = range_fn(&api.$func, F)?;
            let mut p = b::$params {
                structSize: range_struct_size!(b::$params, pRangeProfilerObject),
                pRangeProfilerObject: $obj.cast(),
                ..Default::default()
            };
            // SAFETY: `p` is a valid parameter struct with its header size; the object is
            // live for the call, as the caller's `SAFETY:` comment says.
            let rc = unsafe { f(&mut p) };
            $self.check(F, rc)
        })
    }};
}

/// A range-profiler object (`CUpti_RangeProfiler_Object`) of one CUDA context, from
/// [`Cupti::range_enable`]; ended by [`Cupti::range_disable`].
#[derive(Debug)]
pub struct RangeProfiler {
    obj: *mut c_void,
}

// SAFETY: CUPTI-owned, reached only through CUPTI calls taking `&RangeProfiler` /
// `RangeProfiler`; not `Sync`.
unsafe impl Send for RangeProfiler {}

/// What [`Cupti::range_stop`] reports of the pass that ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeStop {
    /// The pass index (`passIndex`).
    pub pass_index: usize,
    /// The nesting level profiled (`targetNestingLevel`).
    pub target_nesting_level: usize,
    /// Every pass of the configuration was submitted (`isAllPassSubmitted`): with kernel
    /// replay, after the first stop.
    pub all_passes_submitted: bool,
}

impl Cupti {
    /// Whether this libcupti has the range profiler and the profiler host calls it needs:
    /// `Ok` when every one of [`RANGE_PROFILER_SYMBOLS`] is present. Looks symbols up only.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`] naming the first missing function (a libcupti older than
    /// CUDA 12.6).
    pub fn range_profiler_available(&self) -> Result<(), CuptiError> {
        let s = RANGE_PROFILER_SYMBOLS;
        with_api!(self, api, _b => {
            range_fn(&api.cuptiProfilerHostInitialize, s[0])?;
            range_fn(&api.cuptiProfilerHostGetNumOfPasses, s[1])?;
            range_fn(&api.cuptiProfilerHostEvaluateToGpuValues, s[2])?;
            range_fn(&api.cuptiRangeProfilerEnable, s[3])?;
            range_fn(&api.cuptiRangeProfilerDisable, s[4])?;
            range_fn(&api.cuptiRangeProfilerSetConfig, s[5])?;
            range_fn(&api.cuptiRangeProfilerStart, s[6])?;
            range_fn(&api.cuptiRangeProfilerStop, s[7])?;
            range_fn(&api.cuptiRangeProfilerDecodeData, s[8])?;
            range_fn(&api.cuptiRangeProfilerGetCounterDataSize, s[9])?;
            range_fn(&api.cuptiRangeProfilerCounterDataImageInitialize, s[10])?;
            range_fn(&api.cuptiRangeProfilerGetCounterDataInfo, s[11])?;
            range_fn(&api.cuptiRangeProfilerCounterDataGetRangeInfo, s[12])?;
            Ok(())
        })
    }

    /// Enables the range profiler on CUDA context `ctx` (a `CUcontext` as an integer).
    /// `cuptiProfilerInitialize` must have been called ([`Cupti::profiler_initialize`]).
    ///
    /// # Safety
    /// `ctx` must be a live CUDA context of this process.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`] (e.g.
    /// `CUPTI_ERROR_INSUFFICIENT_PRIVILEGES`, `CUPTI_ERROR_NOT_SUPPORTED`).
    #[doc(alias = "cuptiRangeProfilerEnable")]
    pub unsafe fn range_enable(&self, ctx: usize) -> Result<RangeProfiler, CuptiError> {
        const F: &str = "cuptiRangeProfilerEnable";
        with_api!(self, api, b => {
            let f = range_fn(&api.cuptiRangeProfilerEnable, F)?;
            let mut p = b::CUpti_RangeProfiler_Enable_Params {
                structSize: range_struct_size!(b::CUpti_RangeProfiler_Enable_Params, pRangeProfilerObject),
                ctx: ctx as b::CUcontext,
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the caller guarantees `ctx` is live.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            if p.pRangeProfilerObject.is_null() {
                return Err(self.api_error(F, b::CUPTI_ERROR_UNKNOWN));
            }
            Ok(RangeProfiler { obj: p.pRangeProfilerObject.cast() })
        })
    }

    /// Disables the range profiler of a context (consumes the object).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiRangeProfilerDisable")]
    pub fn range_disable(&self, profiler: RangeProfiler) -> Result<(), CuptiError> {
        // SAFETY: the object came from `cuptiRangeProfilerEnable` and is consumed here.
        range_one_object_call!(
            self,
            cuptiRangeProfilerDisable,
            CUpti_RangeProfiler_Disable_Params,
            profiler.obj
        )
    }

    /// Bytes of a counter-data image for `metrics` over `max_ranges` ranges (one nesting
    /// level: as many range-tree nodes as ranges).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`]; [`CuptiError::InvalidBuffer`] for a
    /// size of 0 or over 1 GiB.
    #[doc(alias = "cuptiRangeProfilerGetCounterDataSize")]
    pub fn range_counter_data_size(
        &self,
        profiler: &RangeProfiler,
        metrics: &[&str],
        max_ranges: usize,
    ) -> Result<usize, CuptiError> {
        const F: &str = "cuptiRangeProfilerGetCounterDataSize";
        let owned = metrics
            .iter()
            .map(|m| pm_c_string(F, m))
            .collect::<Result<Vec<_>, _>>()?;
        let mut ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        let nodes = u32::try_from(max_ranges).map_err(|_| CuptiError::InvalidBuffer {
            reason: format!("{max_ranges} ranges do not fit maxNumRangeTreeNodes (u32)"),
        })?;
        with_api!(self, api, b => {
            let f = range_fn(&api.cuptiRangeProfilerGetCounterDataSize, F)?;
            let mut p = b::CUpti_RangeProfiler_GetCounterDataSize_Params {
                structSize: range_struct_size!(b::CUpti_RangeProfiler_GetCounterDataSize_Params, counterDataSize),
                pRangeProfilerObject: profiler.obj.cast(),
                pMetricNames: ptrs.as_mut_ptr(),
                numMetrics: ptrs.len(),
                maxNumOfRanges: max_ranges,
                maxNumRangeTreeNodes: nodes,
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the object is live (`&RangeProfiler`) and the
            // names outlive the call.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            checked_size(F, p.counterDataSize)
        })
    }

    /// Initializes a counter-data image of [`Cupti::range_counter_data_size`] bytes (again
    /// after each decode, to reuse it).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiRangeProfilerCounterDataImageInitialize")]
    pub fn range_counter_data_initialize(
        &self,
        profiler: &RangeProfiler,
        image: &mut [u8],
    ) -> Result<(), CuptiError> {
        const F: &str = "cuptiRangeProfilerCounterDataImageInitialize";
        with_api!(self, api, b => {
            let f = range_fn(&api.cuptiRangeProfilerCounterDataImageInitialize, F)?;
            let mut p = b::CUpti_RangeProfiler_CounterDataImage_Initialize_Params {
                structSize: range_struct_size!(b::CUpti_RangeProfiler_CounterDataImage_Initialize_Params, pCounterData),
                pRangeProfilerObject: profiler.obj.cast(),
                counterDataSize: image.len(),
                pCounterData: image.as_mut_ptr(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; `image` is writable for its length.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)
        })
    }

    /// Configures the profiler: `config` (a range-profiler host object's config image),
    /// `counter_data` (an initialized image, which must stay at this address until the
    /// profiler is stopped and decoded), **auto range** (`CUPTI_AutoRange`: one range per
    /// kernel launch), **kernel replay** (`CUPTI_KernelReplay`), `max_ranges` ranges per pass,
    /// one nesting level.
    ///
    /// # Safety
    /// CUPTI keeps `counter_data`'s address and writes to it at [`Cupti::range_decode`]: the
    /// buffer must not move or be freed until then.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiRangeProfilerSetConfig")]
    pub unsafe fn range_set_config(
        &self,
        profiler: &RangeProfiler,
        config: &[u8],
        counter_data: &mut [u8],
        max_ranges: usize,
    ) -> Result<(), CuptiError> {
        const F: &str = "cuptiRangeProfilerSetConfig";
        with_api!(self, api, b => {
            let f = range_fn(&api.cuptiRangeProfilerSetConfig, F)?;
            let mut p = b::CUpti_RangeProfiler_SetConfig_Params {
                structSize: range_struct_size!(b::CUpti_RangeProfiler_SetConfig_Params, targetNestingLevel),
                pRangeProfilerObject: profiler.obj.cast(),
                configSize: config.len(),
                pConfig: config.as_ptr(),
                counterDataImageSize: counter_data.len(),
                pCounterDataImage: counter_data.as_mut_ptr(),
                range: b::CUPTI_AutoRange,
                replayMode: b::CUPTI_KernelReplay,
                maxRangesPerPass: max_ranges,
                numNestingLevels: 1,
                minNestingLevel: 1,
                passIndex: 0,
                targetNestingLevel: 1,
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the config image outlives the call, and the
            // caller keeps the counter-data image in place until it is decoded.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)
        })
    }

    /// Starts profiling: kernels launched on the context from now on are ranges.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiRangeProfilerStart")]
    pub fn range_start(&self, profiler: &RangeProfiler) -> Result<(), CuptiError> {
        // SAFETY: the object is live (`&RangeProfiler`).
        range_one_object_call!(
            self,
            cuptiRangeProfilerStart,
            CUpti_RangeProfiler_Start_Params,
            profiler.obj
        )
    }

    /// Stops profiling (the ranges so far can then be decoded).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiRangeProfilerStop")]
    pub fn range_stop(&self, profiler: &RangeProfiler) -> Result<RangeStop, CuptiError> {
        const F: &str = "cuptiRangeProfilerStop";
        with_api!(self, api, b => {
            let f = range_fn(&api.cuptiRangeProfilerStop, F)?;
            let mut p = b::CUpti_RangeProfiler_Stop_Params {
                structSize: range_struct_size!(b::CUpti_RangeProfiler_Stop_Params, isAllPassSubmitted),
                pRangeProfilerObject: profiler.obj.cast(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the object is live.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            Ok(RangeStop {
                pass_index: p.passIndex,
                target_nesting_level: p.targetNestingLevel,
                all_passes_submitted: p.isAllPassSubmitted != 0,
            })
        })
    }

    /// Decodes the profiled ranges into the counter-data image given to
    /// [`Cupti::range_set_config`]: returns how many ranges CUPTI dropped
    /// (`numOfRangeDropped`, more ranges than the image holds).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiRangeProfilerDecodeData")]
    pub fn range_decode(&self, profiler: &RangeProfiler) -> Result<usize, CuptiError> {
        const F: &str = "cuptiRangeProfilerDecodeData";
        with_api!(self, api, b => {
            let f = range_fn(&api.cuptiRangeProfilerDecodeData, F)?;
            let mut p = b::CUpti_RangeProfiler_DecodeData_Params {
                structSize: range_struct_size!(b::CUpti_RangeProfiler_DecodeData_Params, numOfRangeDropped),
                pRangeProfilerObject: profiler.obj.cast(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the object and its counter-data image are live.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            Ok(p.numOfRangeDropped)
        })
    }

    /// Ranges in a decoded counter-data image (`numTotalRanges`).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiRangeProfilerGetCounterDataInfo")]
    pub fn range_count(&self, image: &[u8]) -> Result<usize, CuptiError> {
        const F: &str = "cuptiRangeProfilerGetCounterDataInfo";
        with_api!(self, api, b => {
            let f = range_fn(&api.cuptiRangeProfilerGetCounterDataInfo, F)?;
            let mut p = b::CUpti_RangeProfiler_GetCounterDataInfo_Params {
                structSize: range_struct_size!(b::CUpti_RangeProfiler_GetCounterDataInfo_Params, numTotalRanges),
                pCounterDataImage: image.as_ptr(),
                counterDataImageSize: image.len(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the image outlives the call.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            Ok(p.numTotalRanges)
        })
    }

    /// The name of range `index` of a decoded counter-data image (for auto ranges, CUPTI's
    /// name of the kernel launch), its levels joined by `/`.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiRangeProfilerCounterDataGetRangeInfo")]
    pub fn range_name(&self, image: &[u8], index: usize) -> Result<String, CuptiError> {
        const F: &str = "cuptiRangeProfilerCounterDataGetRangeInfo";
        let delimiter = pm_c_string(F, "/")?;
        with_api!(self, api, b => {
            let f = range_fn(&api.cuptiRangeProfilerCounterDataGetRangeInfo, F)?;
            let mut p = b::CUpti_RangeProfiler_CounterData_GetRangeInfo_Params {
                structSize: range_struct_size!(b::CUpti_RangeProfiler_CounterData_GetRangeInfo_Params, rangeName),
                pCounterDataImage: image.as_ptr(),
                counterDataImageSize: image.len(),
                rangeIndex: index,
                rangeDelimiter: delimiter.as_ptr(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the image and delimiter outlive the call.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            if p.rangeName.is_null() {
                return Ok(String::new());
            }
            // SAFETY: on success CUPTI points `rangeName` at a NUL-terminated string it owns.
            Ok(unsafe { std::ffi::CStr::from_ptr(p.rangeName) }
                .to_string_lossy()
                .into_owned())
        })
    }
}
