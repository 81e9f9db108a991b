//! CUPTI's PM sampling API (`cupti_pmsampling.h`) and the profiler host API it is configured and
//! decoded with (`cupti_profiler_host.h`): hardware counters sampled at fixed intervals while
//! the program runs, without serializing its kernels. Both arrived in CUDA 12.6; a libcupti
//! without them has none of the symbols, and [`Cupti::pm_sampling_available`] says which is
//! missing. The calls themselves are reached through [`Cupti::bindings`] until the collector
//! wraps them (issue 16).

use super::{resolve, Cupti, Table};
use crate::error::CuptiError;

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
