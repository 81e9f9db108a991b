//! Safe-signature wrappers of CUPTI's SASS metrics API (`cupti_sass_metrics.h`) and the three
//! profiler calls it needs (`cuptiProfilerInitialize`, `cuptiProfilerDeviceSupported`,
//! `cuptiDeviceGetChipName`).
//!
//! The API arrived in CUDA 12.3 or 12.4 (see `bindings/cupti/README.md`); the header is the
//! same in the CUPTI 12.8, 13.0 and 13.4 releases the bindings are made from. A libcupti without it has
//! none of the symbols: every wrapper then returns [`CuptiError::NotSupported`], never panics.
//!
//! CUPTI's parameter structs start with `structSize`, which must be the header's
//! `CUPTI_PROFILER_STRUCT_SIZE(type, last field)`: the offset of the struct's last *declared
//! input/output* field plus that field's size ([`struct_size!`]), not `size_of` (for
//! `CUpti_SassMetricsFlushData_Params` the header stops at `numOfInstances`, before
//! `pMetricsData`).

use std::ffi::{c_void, CStr, CString};
use std::os::raw::c_char;

use super::{resolve, Cupti, Table};
use crate::error::CuptiError;

/// The metric gpumeter's instrumented mode collects: warp-level SASS instructions executed.
pub const SASS_INST_EXECUTED: &str = "smsp__sass_inst_executed";

/// The functions the SASS metrics support needs, in the order [`Cupti::sass_metrics_available`]
/// checks them.
pub const SASS_METRICS_SYMBOLS: [&str; 10] = [
    "cuptiProfilerInitialize",
    "cuptiProfilerDeviceSupported",
    "cuptiDeviceGetChipName",
    "cuptiSassMetricsGetProperties",
    "cuptiSassMetricsSetConfig",
    "cuptiSassMetricsUnsetConfig",
    "cuptiSassMetricsEnable",
    "cuptiSassMetricsDisable",
    "cuptiSassMetricsGetDataProperties",
    "cuptiSassMetricsFlushData",
];

/// Most `records × instances` values one [`Cupti::sass_flush`] accepts (2^28, 4 GiB of
/// values): a larger count from CUPTI is treated as corrupt rather than allocated.
const MAX_FLUSH_VALUES: usize = 1 << 28;

/// `CUPTI_PROFILER_STRUCT_SIZE(type, field)`: offset of `field` plus its size.
macro_rules! struct_size {
    ($t:ty, $field:ident) => {
        std::mem::offset_of!($t, $field) + field_size(|s: &$t| &s.$field)
    };
}

/// The size of the field a projection returns (for [`struct_size!`]).
fn field_size<T, F>(_: impl Fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// How finely CUPTI reports each SASS metric (`CUpti_SassMetrics_OutputGranularity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SassGranularity {
    /// One value per instruction for the whole GPU (`numOfInstances` = 1).
    Gpu,
    /// One value per SM.
    Sm,
    /// One value per SM sub-partition.
    Smsp,
}

impl SassGranularity {
    fn raw(self) -> u8 {
        match self {
            SassGranularity::Gpu => 0,
            SassGranularity::Sm => 1,
            SassGranularity::Smsp => 2,
        }
    }
}

/// A support level of `cuptiProfilerDeviceSupported` (`CUpti_Profiler_Support_Level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SupportLevel {
    /// `CUPTI_PROFILER_CONFIGURATION_UNKNOWN`.
    Unknown,
    /// `..._UNSUPPORTED`: profiling does not work in this configuration.
    Unsupported,
    /// `..._DISABLED`: it would, but the system disabled it (e.g. a vGPU without profiling).
    Disabled,
    /// `..._SUPPORTED`.
    Supported,
    /// A value the headers do not define.
    Other(u32),
}

impl SupportLevel {
    fn from_raw(v: u32) -> SupportLevel {
        match v {
            0 => SupportLevel::Unknown,
            1 => SupportLevel::Unsupported,
            2 => SupportLevel::Disabled,
            3 => SupportLevel::Supported,
            o => SupportLevel::Other(o),
        }
    }
}

/// What `cuptiProfilerDeviceSupported` says of a device for one profiler API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProfilerSupport {
    /// Overall: `Supported` only when every field below is.
    pub overall: SupportLevel,
    /// The architecture (compute capability 7.0 and up for the profiling APIs).
    pub architecture: SupportLevel,
    /// SLI (unsupported when enabled).
    pub sli: SupportLevel,
    /// vGPU (`Disabled` when the hypervisor did not enable profiling).
    pub vgpu: SupportLevel,
    /// Confidential compute (unsupported when enabled).
    pub confidential_compute: SupportLevel,
    /// Crypto mining processors (unsupported).
    pub cmp: SupportLevel,
    /// WSL.
    pub wsl: SupportLevel,
}

impl ProfilerSupport {
    /// `true` when profiling works on the device.
    pub fn is_supported(&self) -> bool {
        self.overall == SupportLevel::Supported
    }

    /// The names of the fields that are not `Supported` (empty when supported), e.g.
    /// `["architecture"]`.
    pub fn reasons(&self) -> Vec<&'static str> {
        [
            ("architecture", self.architecture),
            ("SLI", self.sli),
            ("vGPU", self.vgpu),
            ("confidential compute", self.confidential_compute),
            ("CMP", self.cmp),
            ("WSL", self.wsl),
        ]
        .into_iter()
        .filter(|(_, l)| *l != SupportLevel::Supported)
        .map(|(n, _)| n)
        .collect()
    }
}

/// A SASS metric as `cuptiSassMetricsGetProperties` describes it for a chip.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SassMetricDetails {
    /// CUPTI's id of the metric (what configs and values carry).
    pub id: u64,
    /// CUPTI's description of it.
    pub description: String,
}

/// One patched instruction's values from [`Cupti::sass_flush`] (`CUpti_SassMetrics_Data`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SassRecord {
    /// CRC of the cubin (module) the function is in.
    pub cubin_crc: u32,
    /// The function's symbol index in its module.
    pub function_index: u32,
    /// The function's (mangled) name; empty when CUPTI gave none.
    pub function_name: String,
    /// The instruction's offset in the function, bytes.
    pub pc_offset: u32,
    /// `(metric id, value)` per instance (one instance at [`SassGranularity::Gpu`]), summed over
    /// the executions since the previous flush (or the enable).
    pub values: Vec<(u64, u64)>,
}

/// The `CString` of a name given to CUPTI, or an error naming the function.
fn c_string(function: &'static str, what: &str, s: &str) -> Result<CString, CuptiError> {
    CString::new(s).map_err(|_| CuptiError::Api {
        function,
        code: crate::v13_4::CUPTI_ERROR_INVALID_PARAMETER,
        name: "CUPTI_ERROR_INVALID_PARAMETER",
        message: format!("the {what} {s:?} contains a NUL byte"),
    })
}

/// Resolves a SASS-metrics-API function: a missing symbol is [`CuptiError::NotSupported`].
fn sass_sym<T: Copy>(
    field: &Result<T, libloading::Error>,
    name: &'static str,
) -> Result<T, CuptiError> {
    resolve(field, name).map_err(|_| CuptiError::NotSupported {
        api: "SASS metrics",
        missing: name.to_string(),
    })
}

/// Copies a C string CUPTI returned.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string valid for the duration of the call.
unsafe fn copy_c_str(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: not NULL, NUL-terminated and live by the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

impl Cupti {
    /// Whether this libcupti has the SASS metrics API (and the profiler calls it needs):
    /// `Ok` when every one of [`SASS_METRICS_SYMBOLS`] is present. Looks symbols up only;
    /// calls nothing.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`] naming the first missing function (a libcupti older than
    /// CUDA 12.4).
    pub fn sass_metrics_available(&self) -> Result<(), CuptiError> {
        with_api!(self, api, _b => {
            sass_sym(&api.cuptiProfilerInitialize, SASS_METRICS_SYMBOLS[0])?;
            sass_sym(&api.cuptiProfilerDeviceSupported, SASS_METRICS_SYMBOLS[1])?;
            sass_sym(&api.cuptiDeviceGetChipName, SASS_METRICS_SYMBOLS[2])?;
            sass_sym(&api.cuptiSassMetricsGetProperties, SASS_METRICS_SYMBOLS[3])?;
            sass_sym(&api.cuptiSassMetricsSetConfig, SASS_METRICS_SYMBOLS[4])?;
            sass_sym(&api.cuptiSassMetricsUnsetConfig, SASS_METRICS_SYMBOLS[5])?;
            sass_sym(&api.cuptiSassMetricsEnable, SASS_METRICS_SYMBOLS[6])?;
            sass_sym(&api.cuptiSassMetricsDisable, SASS_METRICS_SYMBOLS[7])?;
            sass_sym(&api.cuptiSassMetricsGetDataProperties, SASS_METRICS_SYMBOLS[8])?;
            sass_sym(&api.cuptiSassMetricsFlushData, SASS_METRICS_SYMBOLS[9])?;
            Ok(())
        })
    }

    /// Initialises CUPTI's profiler (needed before the SASS metrics calls). CUPTI 13.x fails
    /// with `CUPTI_ERROR_NOT_INITIALIZED` when it cannot load `libnvperf_host.so` /
    /// `libnvperf_target.so` (shipped beside libcupti).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiProfilerInitialize")]
    pub fn profiler_initialize(&self) -> Result<(), CuptiError> {
        with_api!(self, api, b => {
            let f = sass_sym(&api.cuptiProfilerInitialize, "cuptiProfilerInitialize")?;
            let mut p = b::CUpti_Profiler_Initialize_Params {
                structSize: struct_size!(b::CUpti_Profiler_Initialize_Params, pPriv),
                ..Default::default()
            };
            // SAFETY: `p` is a valid, initialised parameter struct with its header size.
            let rc = unsafe { f(&mut p) };
            self.check("cuptiProfilerInitialize", rc)
        })
    }

    /// Whether CUDA device `device` (an ordinal) supports the SASS metrics API
    /// (`cuptiProfilerDeviceSupported` with `CUPTI_PROFILER_SASS_METRICS`).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`] (e.g. an invalid device, or the
    /// profiler not initialised).
    #[doc(alias = "cuptiProfilerDeviceSupported")]
    pub fn sass_device_supported(&self, device: u32) -> Result<ProfilerSupport, CuptiError> {
        with_api!(self, api, b => {
            let f = sass_sym(&api.cuptiProfilerDeviceSupported, "cuptiProfilerDeviceSupported")?;
            let Ok(cu_device) = b::CUdevice::try_from(device) else {
                return Err(self.api_error("cuptiProfilerDeviceSupported", b::CUPTI_ERROR_INVALID_DEVICE));
            };
            let mut p = b::CUpti_Profiler_DeviceSupported_Params {
                structSize: struct_size!(b::CUpti_Profiler_DeviceSupported_Params, api),
                cuDevice: cu_device,
                api: b::CUPTI_PROFILER_SASS_METRICS,
                ..Default::default()
            };
            // SAFETY: `p` is a valid, initialised parameter struct with its header size.
            let rc = unsafe { f(&mut p) };
            self.check("cuptiProfilerDeviceSupported", rc)?;
            Ok(ProfilerSupport {
                overall: SupportLevel::from_raw(p.isSupported),
                architecture: SupportLevel::from_raw(p.architecture),
                sli: SupportLevel::from_raw(p.sli),
                vgpu: SupportLevel::from_raw(p.vGpu),
                confidential_compute: SupportLevel::from_raw(p.confidentialCompute),
                cmp: SupportLevel::from_raw(p.cmp),
                wsl: SupportLevel::from_raw(p.wsl),
            })
        })
    }

    /// The chip name of CUDA device `device` (e.g. `"gh100"`), which the metric queries take.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiDeviceGetChipName")]
    pub fn device_chip_name(&self, device: u32) -> Result<String, CuptiError> {
        with_api!(self, api, b => {
            let f = sass_sym(&api.cuptiDeviceGetChipName, "cuptiDeviceGetChipName")?;
            let mut p = b::CUpti_Device_GetChipName_Params {
                structSize: struct_size!(b::CUpti_Device_GetChipName_Params, pChipName),
                deviceIndex: device as usize,
                ..Default::default()
            };
            // SAFETY: `p` is a valid, initialised parameter struct with its header size.
            let rc = unsafe { f(&mut p) };
            self.check("cuptiDeviceGetChipName", rc)?;
            // SAFETY: on success `pChipName` is a NUL-terminated string CUPTI owns (or NULL).
            Ok(unsafe { copy_c_str(p.pChipName) })
        })
    }

    /// The id and description of SASS metric `metric` (e.g. [`SASS_INST_EXECUTED`]) on chip
    /// `chip` ([`Cupti::device_chip_name`]).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`] (an unknown metric or chip, a name
    /// with a NUL byte).
    #[doc(alias = "cuptiSassMetricsGetProperties")]
    pub fn sass_metric_properties(
        &self,
        chip: &str,
        metric: &str,
    ) -> Result<SassMetricDetails, CuptiError> {
        let name = "cuptiSassMetricsGetProperties";
        let c_chip = c_string(name, "chip name", chip)?;
        let c_metric = c_string(name, "metric name", metric)?;
        with_api!(self, api, b => {
            let f = sass_sym(&api.cuptiSassMetricsGetProperties, name)?;
            let mut p = b::CUpti_SassMetrics_GetProperties_Params {
                structSize: struct_size!(b::CUpti_SassMetrics_GetProperties_Params, metric),
                pChipName: c_chip.as_ptr(),
                pMetricName: c_metric.as_ptr(),
                ..Default::default()
            };
            // SAFETY: `p` is a valid parameter struct; the two names outlive the call.
            let rc = unsafe { f(&mut p) };
            self.check(name, rc)?;
            Ok(SassMetricDetails {
                id: p.metric.metricId,
                // SAFETY: on success CUPTI sets a NUL-terminated description it owns (or NULL).
                description: unsafe { copy_c_str(p.metric.pMetricDescription) },
            })
        })
    }

    /// Configures SASS metric collection on CUDA device `device`: every metric of
    /// `metric_ids` at `granularity`. Needs a CUDA context to exist; one configuration per
    /// device until [`Cupti::sass_unset_config`].
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`] (`CUPTI_ERROR_INVALID_OPERATION`
    /// when already configured, `CUPTI_ERROR_INVALID_CONTEXT` before any context exists,
    /// `CUPTI_ERROR_NOT_SUPPORTED` on a device without SASS metrics).
    #[doc(alias = "cuptiSassMetricsSetConfig")]
    pub fn sass_set_config(
        &self,
        device: u32,
        metric_ids: &[u64],
        granularity: SassGranularity,
    ) -> Result<(), CuptiError> {
        with_api!(self, api, b => {
            let f = sass_sym(&api.cuptiSassMetricsSetConfig, "cuptiSassMetricsSetConfig")?;
            let mut configs: Vec<b::CUpti_SassMetrics_Config> = metric_ids
                .iter()
                .map(|&id| b::CUpti_SassMetrics_Config {
                    metricId: id,
                    outputGranularity: granularity.raw(),
                })
                .collect();
            let mut p = b::CUpti_SassMetricsSetConfig_Params {
                structSize: struct_size!(b::CUpti_SassMetricsSetConfig_Params, deviceIndex),
                numOfMetricConfig: configs.len(),
                pConfigs: configs.as_mut_ptr(),
                deviceIndex: device,
                ..Default::default()
            };
            // SAFETY: `p` is a valid parameter struct; `configs` holds `numOfMetricConfig`
            // initialised configs and outlives the call.
            let rc = unsafe { f(&mut p) };
            self.check("cuptiSassMetricsSetConfig", rc)
        })
    }

    /// Removes the SASS metric configuration of CUDA device `device`.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiSassMetricsUnsetConfig")]
    pub fn sass_unset_config(&self, device: u32) -> Result<(), CuptiError> {
        with_api!(self, api, b => {
            let f = sass_sym(&api.cuptiSassMetricsUnsetConfig, "cuptiSassMetricsUnsetConfig")?;
            let mut p = b::CUpti_SassMetricsUnsetConfig_Params {
                structSize: struct_size!(b::CUpti_SassMetricsUnsetConfig_Params, deviceIndex),
                deviceIndex: device,
                ..Default::default()
            };
            // SAFETY: `p` is a valid, initialised parameter struct with its header size.
            let rc = unsafe { f(&mut p) };
            self.check("cuptiSassMetricsUnsetConfig", rc)
        })
    }

    /// Starts SASS metric collection in CUDA context `ctx` (NULL: the current one). With
    /// `lazy_patching`, a function is patched at its first launch in the range rather than
    /// every loaded function at once.
    ///
    /// # Safety
    /// `ctx` is NULL or a live `CUcontext` of this process.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`] (`CUPTI_ERROR_INVALID_OPERATION`
    /// when already enabled, or before [`Cupti::sass_set_config`]).
    #[doc(alias = "cuptiSassMetricsEnable")]
    pub unsafe fn sass_enable(
        &self,
        ctx: *mut c_void,
        lazy_patching: bool,
    ) -> Result<(), CuptiError> {
        with_api!(self, api, b => {
            let f = sass_sym(&api.cuptiSassMetricsEnable, "cuptiSassMetricsEnable")?;
            let mut p = b::CUpti_SassMetricsEnable_Params {
                structSize: struct_size!(b::CUpti_SassMetricsEnable_Params, enableLazyPatching),
                ctx: ctx.cast(),
                enableLazyPatching: u8::from(lazy_patching),
                ..Default::default()
            };
            // SAFETY: `p` is a valid parameter struct; `ctx` is NULL or live (caller).
            let rc = unsafe { f(&mut p) };
            self.check("cuptiSassMetricsEnable", rc)
        })
    }

    /// Ends SASS metric collection in `ctx`; returns the records dropped because they were
    /// not flushed first (patched instructions × instances).
    ///
    /// # Safety
    /// As [`Cupti::sass_enable`].
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiSassMetricsDisable")]
    pub unsafe fn sass_disable(&self, ctx: *mut c_void) -> Result<u64, CuptiError> {
        with_api!(self, api, b => {
            let f = sass_sym(&api.cuptiSassMetricsDisable, "cuptiSassMetricsDisable")?;
            let mut p = b::CUpti_SassMetricsDisable_Params {
                structSize: struct_size!(b::CUpti_SassMetricsDisable_Params, numOfDroppedRecords),
                ctx: ctx.cast(),
                ..Default::default()
            };
            // SAFETY: `p` is a valid parameter struct; `ctx` is NULL or live (caller).
            let rc = unsafe { f(&mut p) };
            self.check("cuptiSassMetricsDisable", rc)
                .map(|()| p.numOfDroppedRecords as u64)
        })
    }

    /// Takes the SASS metric values CUPTI collected in `ctx` since the enable or the previous
    /// flush (`cuptiSassMetricsGetDataProperties`, then `cuptiSassMetricsFlushData`); CUPTI
    /// resets them. Values are complete only for work that has finished: synchronize the
    /// context first. Empty when nothing ran.
    ///
    /// The function names CUPTI allocates for each record are copied and freed here.
    ///
    /// # Safety
    /// As [`Cupti::sass_enable`].
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`]; [`CuptiError::InvalidBuffer`] when
    /// CUPTI announces more than 2^28 values.
    #[doc(alias = "cuptiSassMetricsFlushData")]
    #[doc(alias = "cuptiSassMetricsGetDataProperties")]
    pub unsafe fn sass_flush(&self, ctx: *mut c_void) -> Result<Vec<SassRecord>, CuptiError> {
        with_api!(self, api, b => {
            let props_fn = sass_sym(
                &api.cuptiSassMetricsGetDataProperties,
                "cuptiSassMetricsGetDataProperties",
            )?;
            let flush_fn = sass_sym(&api.cuptiSassMetricsFlushData, "cuptiSassMetricsFlushData")?;
            let mut props = b::CUpti_SassMetricsGetDataProperties_Params {
                structSize: struct_size!(b::CUpti_SassMetricsGetDataProperties_Params, numOfInstances),
                ctx: ctx.cast(),
                ..Default::default()
            };
            // SAFETY: `props` is a valid parameter struct; `ctx` is NULL or live (caller).
            let rc = unsafe { props_fn(&mut props) };
            self.check("cuptiSassMetricsGetDataProperties", rc)?;
            let records = props.numOfPatchedInstructionRecords;
            let instances = props.numOfInstances;
            if records == 0 || instances == 0 {
                return Ok(Vec::new());
            }
            let total = records
                .checked_mul(instances)
                .filter(|&n| n <= MAX_FLUSH_VALUES)
                .ok_or_else(|| CuptiError::InvalidBuffer {
                    reason: format!(
                        "cuptiSassMetricsGetDataProperties announced {records} records × \
                         {instances} instances, over the {MAX_FLUSH_VALUES} values accepted"
                    ),
                })?;
            let mut values = vec![b::CUpti_SassMetrics_InstanceValue::default(); total];
            let base = values.as_mut_ptr();
            let mut data: Vec<b::CUpti_SassMetrics_Data> = (0..records)
                .map(|i| b::CUpti_SassMetrics_Data {
                    structSize: std::mem::size_of::<b::CUpti_SassMetrics_Data>(),
                    // In bounds: i < records, so i * instances < total.
                    pInstanceValues: base.wrapping_add(i * instances),
                    ..Default::default()
                })
                .collect();
            let mut p = b::CUpti_SassMetricsFlushData_Params {
                structSize: struct_size!(b::CUpti_SassMetricsFlushData_Params, numOfInstances),
                ctx: ctx.cast(),
                numOfPatchedInstructionRecords: records,
                numOfInstances: instances,
                pMetricsData: data.as_mut_ptr(),
                ..Default::default()
            };
            // SAFETY: `data` holds `records` initialised records, each pointing at its own
            // `instances` values inside `values`; both vectors outlive the call and are not
            // otherwise borrowed; `ctx` is NULL or live (caller).
            let rc = unsafe { flush_fn(&mut p) };
            let result = self.check("cuptiSassMetricsFlushData", rc);
            let mut out = Vec::with_capacity(if result.is_ok() { records } else { 0 });
            for (i, d) in data.iter().enumerate() {
                let name = d.functionName;
                if result.is_ok() {
                    let start = i * instances;
                    out.push(SassRecord {
                        cubin_crc: d.cubinCrc,
                        function_index: d.functionIndex,
                        // SAFETY: CUPTI set `functionName` to a NUL-terminated string (or left
                        // it NULL), freed just below and not before.
                        function_name: unsafe { copy_c_str(name) },
                        pc_offset: d.pcOffset,
                        values: values
                            .get(start..start + instances)
                            .unwrap_or(&[])
                            .iter()
                            .map(|v| (v.metricId, v.value))
                            .collect(),
                    });
                }
                if !name.is_null() {
                    // SAFETY: CUPTI allocates each record's function name with malloc and
                    // hands it to the caller, who frees it (NVIDIA's `sass_metrics` sample
                    // does the same); the records started with NULL names, so a non-NULL one
                    // was set by this flush, and it is freed once.
                    unsafe { libc::free(name.cast_mut().cast::<c_void>()) };
                }
            }
            result.map(|()| out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v12_8 as b12;
    use crate::v13_4 as b13;

    /// `structSize` values as the C macro computes them for x86_64 Linux (8-byte size_t and
    /// pointers), in both bindings.
    #[test]
    fn struct_sizes_follow_the_header_macro() {
        assert_eq!(
            struct_size!(b12::CUpti_SassMetricsFlushData_Params, numOfInstances),
            40
        );
        assert_eq!(
            struct_size!(b13::CUpti_SassMetricsFlushData_Params, numOfInstances),
            40
        );
        assert_eq!(
            struct_size!(b12::CUpti_SassMetricsSetConfig_Params, deviceIndex),
            36
        );
        assert_eq!(
            struct_size!(b13::CUpti_SassMetricsEnable_Params, enableLazyPatching),
            25
        );
        assert_eq!(
            struct_size!(b13::CUpti_SassMetricsDisable_Params, numOfDroppedRecords),
            32
        );
        assert_eq!(
            struct_size!(b13::CUpti_Profiler_Initialize_Params, pPriv),
            16
        );
        // 52, not size_of (56): the macro stops at the last field, before tail padding.
        assert_eq!(
            struct_size!(b12::CUpti_Profiler_DeviceSupported_Params, api),
            52
        );
        assert_eq!(
            struct_size!(b13::CUpti_SassMetrics_GetProperties_Params, metric),
            56
        );
    }

    #[test]
    fn a_missing_symbol_is_not_supported() {
        let field: Result<unsafe extern "C" fn() -> u32, libloading::Error> =
            Err(libloading::Error::DlOpenUnknown);
        let e = sass_sym(&field, "cuptiSassMetricsEnable").expect_err("missing");
        assert!(
            matches!(&e, CuptiError::NotSupported { api: "SASS metrics", missing } if missing == "cuptiSassMetricsEnable"),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("not supported by this libcupti"),
            "{e}"
        );
    }

    #[test]
    fn support_reasons_name_what_is_not_supported() {
        let s = ProfilerSupport {
            overall: SupportLevel::from_raw(1),
            architecture: SupportLevel::from_raw(1),
            sli: SupportLevel::Supported,
            vgpu: SupportLevel::from_raw(2),
            confidential_compute: SupportLevel::Supported,
            cmp: SupportLevel::Supported,
            wsl: SupportLevel::Supported,
        };
        assert!(!s.is_supported());
        assert_eq!(s.reasons(), ["architecture", "vGPU"]);
        assert_eq!(SupportLevel::from_raw(9), SupportLevel::Other(9));
        assert_eq!(SassGranularity::Smsp.raw(), 2);
    }
}
