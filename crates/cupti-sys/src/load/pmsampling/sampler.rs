//! The target side of PM sampling (`cuptiPmSampling*`): a device's sampler enabled,
//! configured, started and stopped, its hardware buffer decoded into counter-data images and
//! their samples read. Needs a device; written from the headers only (see [`super`]).

use std::ffi::c_void;
use std::os::raw::c_char;

use super::{checked_size, pm_c_string, pm_field_size, pm_fn, Cupti};
use crate::error::CuptiError;
use crate::load::Table;

/// A PM sampling object (`CUpti_PmSampling_Object`) of one device, from
/// [`Cupti::pm_enable`]; ended by [`Cupti::pm_disable`].
#[derive(Debug)]
pub struct PmSampler {
    obj: *mut c_void,
    device: u32,
}

// SAFETY: as for `PmHost`: CUPTI-owned, reached only through CUPTI calls.
unsafe impl Send for PmSampler {}

impl PmSampler {
    /// The CUDA device ordinal it samples.
    pub fn device(&self) -> u32 {
        self.device
    }
}

/// How samples are triggered (`CUpti_PmSampling_TriggerMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TriggerMode {
    /// `CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_SYSCLK_INTERVAL`: the interval counts GPU system
    /// clock cycles (every GPU with PM sampling).
    SysClkInterval,
    /// `CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL`: the interval is nanoseconds (GA10x,
    /// Hopper and later; not GA100).
    GpuTimeInterval,
}

/// Why `cuptiPmSamplingDecodeData` stopped (`CUpti_PmSampling_DecodeStopReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DecodeStopReason {
    /// `..._OTHER`.
    Other,
    /// `..._COUNTER_DATA_FULL`: the counter-data image is full; decode again after reading it.
    CounterDataFull,
    /// `..._END_OF_RECORDS`: the hardware buffer has nothing more.
    EndOfRecords,
    /// A value the headers do not define.
    Unknown(u32),
}

/// What one [`Cupti::pm_decode`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeOutcome {
    /// Why it stopped.
    pub stop_reason: DecodeStopReason,
    /// The hardware buffer overflowed: samples were lost before this decode.
    pub overflow: bool,
}

/// Samples in a counter-data image (`cuptiPmSamplingGetCounterDataInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CounterDataInfo {
    /// Samples the image can hold.
    pub total: usize,
    /// Samples written into it.
    pub populated: usize,
    /// Of those, samples complete (the first `completed` indices may be read).
    pub completed: usize,
}

impl Cupti {
    /// The counter-availability image of CUDA device `device` (two calls: size, then data).
    /// Needs a device (offline, CUPTI 12.8 answers `CUPTI_ERROR_INVALID_PARAMETER`).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`]; [`CuptiError::InvalidBuffer`].
    #[doc(alias = "cuptiPmSamplingGetCounterAvailability")]
    pub fn pm_counter_availability(&self, device: u32) -> Result<Vec<u8>, CuptiError> {
        const F: &str = "cuptiPmSamplingGetCounterAvailability";
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiPmSamplingGetCounterAvailability, F)?;
            let mut p = b::CUpti_PmSampling_GetCounterAvailability_Params {
                structSize: pm_struct_size!(b::CUpti_PmSampling_GetCounterAvailability_Params, pCounterAvailabilityImage),
                deviceIndex: device as usize,
                ..Default::default()
            };
            // SAFETY: valid parameter struct; a NULL image asks for the size only.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            let size = checked_size(F, p.counterAvailabilityImageSize)?;
            let mut image = vec![0u8; size];
            p.pCounterAvailabilityImage = image.as_mut_ptr();
            p.counterAvailabilityImageSize = image.len();
            // SAFETY: `image` is writable for the announced size during the call.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            Ok(image)
        })
    }

    /// Enables PM sampling on CUDA device `device` (a context must exist on it).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`] (`CUPTI_ERROR_INSUFFICIENT_PRIVILEGES`
    /// when profiling is restricted to administrators, `CUPTI_ERROR_NOT_SUPPORTED` on a GPU
    /// without PM sampling).
    #[doc(alias = "cuptiPmSamplingEnable")]
    pub fn pm_enable(&self, device: u32) -> Result<PmSampler, CuptiError> {
        const F: &str = "cuptiPmSamplingEnable";
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiPmSamplingEnable, F)?;
            let mut p = b::CUpti_PmSampling_Enable_Params {
                structSize: pm_struct_size!(b::CUpti_PmSampling_Enable_Params, pPmSamplingObject),
                deviceIndex: device as usize,
                ..Default::default()
            };
            // SAFETY: valid parameter struct with its header size.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            if p.pPmSamplingObject.is_null() {
                return Err(self.api_error(F, b::CUPTI_ERROR_UNKNOWN));
            }
            Ok(PmSampler { obj: p.pPmSamplingObject.cast(), device })
        })
    }

    /// Configures a sampler: the config image, the hardware buffer's bytes, the interval (ns
    /// for [`TriggerMode::GpuTimeInterval`], cycles for [`TriggerMode::SysClkInterval`]);
    /// the hardware buffer keeps the oldest records when full (an overflow is then reported by
    /// [`Cupti::pm_decode`]).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`] (`CUPTI_ERROR_NOT_SUPPORTED` for a
    /// trigger mode the GPU lacks).
    #[doc(alias = "cuptiPmSamplingSetConfig")]
    pub fn pm_set_config(
        &self,
        sampler: &PmSampler,
        config: &[u8],
        hw_buffer_bytes: usize,
        interval: u64,
        trigger: TriggerMode,
    ) -> Result<(), CuptiError> {
        const F: &str = "cuptiPmSamplingSetConfig";
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiPmSamplingSetConfig, F)?;
            let mut p = b::CUpti_PmSampling_SetConfig_Params {
                structSize: pm_struct_size!(b::CUpti_PmSampling_SetConfig_Params, hwBufferAppendMode),
                pPmSamplingObject: sampler.obj.cast(),
                configSize: config.len(),
                pConfig: config.as_ptr(),
                hardwareBufferSize: hw_buffer_bytes,
                samplingInterval: interval,
                triggerMode: match trigger {
                    TriggerMode::SysClkInterval => b::CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_SYSCLK_INTERVAL,
                    TriggerMode::GpuTimeInterval => b::CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL,
                },
                hwBufferAppendMode: b::CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST,
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the sampler is live and the config image
            // outlives the call.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)
        })
    }

    /// Starts sampling.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiPmSamplingStart")]
    pub fn pm_start(&self, sampler: &PmSampler) -> Result<(), CuptiError> {
        // SAFETY: valid parameter struct; the sampler is live.
        pm_one_object_call!(
            self,
            cuptiPmSamplingStart,
            CUpti_PmSampling_Start_Params,
            pPmSamplingObject,
            sampler.obj
        )
    }

    /// Stops sampling (what the hardware buffer holds can still be decoded).
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiPmSamplingStop")]
    pub fn pm_stop(&self, sampler: &PmSampler) -> Result<(), CuptiError> {
        // SAFETY: valid parameter struct; the sampler is live.
        pm_one_object_call!(
            self,
            cuptiPmSamplingStop,
            CUpti_PmSampling_Stop_Params,
            pPmSamplingObject,
            sampler.obj
        )
    }

    /// Disables PM sampling and frees the sampler.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiPmSamplingDisable")]
    pub fn pm_disable(&self, sampler: PmSampler) -> Result<(), CuptiError> {
        // SAFETY: valid parameter struct; the sampler is consumed here.
        pm_one_object_call!(
            self,
            cuptiPmSamplingDisable,
            CUpti_PmSampling_Disable_Params,
            pPmSamplingObject,
            sampler.obj
        )
    }

    /// The bytes of a counter-data image holding `max_samples` samples of `metrics`.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`]; [`CuptiError::InvalidBuffer`].
    #[doc(alias = "cuptiPmSamplingGetCounterDataSize")]
    pub fn pm_counter_data_size(
        &self,
        sampler: &PmSampler,
        metrics: &[&str],
        max_samples: u32,
    ) -> Result<usize, CuptiError> {
        const F: &str = "cuptiPmSamplingGetCounterDataSize";
        let owned = metrics
            .iter()
            .map(|m| pm_c_string(F, m))
            .collect::<Result<Vec<_>, _>>()?;
        let mut ptrs: Vec<*const c_char> = owned.iter().map(|c| c.as_ptr()).collect();
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiPmSamplingGetCounterDataSize, F)?;
            let mut p = b::CUpti_PmSampling_GetCounterDataSize_Params {
                structSize: pm_struct_size!(b::CUpti_PmSampling_GetCounterDataSize_Params, counterDataSize),
                pPmSamplingObject: sampler.obj.cast(),
                pMetricNames: ptrs.as_mut_ptr(),
                numMetrics: ptrs.len(),
                maxSamples: max_samples,
                ..Default::default()
            };
            // SAFETY: valid parameter struct; the names outlive the call.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            checked_size(F, p.counterDataSize)
        })
    }

    /// Initialises a counter-data image (sized by [`Cupti::pm_counter_data_size`]); also
    /// empties it for reuse after its samples were read.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiPmSamplingCounterDataImageInitialize")]
    pub fn pm_counter_data_initialize(
        &self,
        sampler: &PmSampler,
        image: &mut [u8],
    ) -> Result<(), CuptiError> {
        const F: &str = "cuptiPmSamplingCounterDataImageInitialize";
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiPmSamplingCounterDataImageInitialize, F)?;
            let mut p = b::CUpti_PmSampling_CounterDataImage_Initialize_Params {
                structSize: pm_struct_size!(b::CUpti_PmSampling_CounterDataImage_Initialize_Params, pCounterData),
                pPmSamplingObject: sampler.obj.cast(),
                counterDataSize: image.len(),
                pCounterData: image.as_mut_ptr(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; `image` is writable for its length.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)
        })
    }

    /// Decodes what the hardware buffer holds into `image`.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiPmSamplingDecodeData")]
    pub fn pm_decode(
        &self,
        sampler: &PmSampler,
        image: &mut [u8],
    ) -> Result<DecodeOutcome, CuptiError> {
        const F: &str = "cuptiPmSamplingDecodeData";
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiPmSamplingDecodeData, F)?;
            let mut p = b::CUpti_PmSampling_DecodeData_Params {
                structSize: pm_struct_size!(b::CUpti_PmSampling_DecodeData_Params, overflow),
                pPmSamplingObject: sampler.obj.cast(),
                pCounterDataImage: image.as_mut_ptr(),
                counterDataImageSize: image.len(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; `image` is writable for its length.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            let stop_reason = match p.decodeStopReason {
                b::CUPTI_PM_SAMPLING_DECODE_STOP_REASON_OTHER => DecodeStopReason::Other,
                b::CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL => DecodeStopReason::CounterDataFull,
                b::CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS => DecodeStopReason::EndOfRecords,
                o => DecodeStopReason::Unknown(o),
            };
            Ok(DecodeOutcome { stop_reason, overflow: p.overflow != 0 })
        })
    }

    /// How many samples a counter-data image holds.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiPmSamplingGetCounterDataInfo")]
    pub fn pm_counter_data_info(&self, image: &[u8]) -> Result<CounterDataInfo, CuptiError> {
        const F: &str = "cuptiPmSamplingGetCounterDataInfo";
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiPmSamplingGetCounterDataInfo, F)?;
            let mut p = b::CUpti_PmSampling_GetCounterDataInfo_Params {
                structSize: pm_struct_size!(b::CUpti_PmSampling_GetCounterDataInfo_Params, numCompletedSamples),
                pCounterDataImage: image.as_ptr(),
                counterDataImageSize: image.len(),
                ..Default::default()
            };
            // SAFETY: valid parameter struct; `image` is readable for its length.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            Ok(CounterDataInfo {
                total: p.numTotalSamples,
                populated: p.numPopulatedSamples,
                completed: p.numCompletedSamples,
            })
        })
    }

    /// Start and end timestamps (CUPTI's clock, ns) of sample `index` of a counter-data image.
    ///
    /// # Errors
    /// [`CuptiError::NotSupported`]; [`CuptiError::Api`].
    #[doc(alias = "cuptiPmSamplingCounterDataGetSampleInfo")]
    pub fn pm_sample_info(
        &self,
        sampler: &PmSampler,
        image: &[u8],
        index: usize,
    ) -> Result<(u64, u64), CuptiError> {
        const F: &str = "cuptiPmSamplingCounterDataGetSampleInfo";
        with_api!(self, api, b => {
            let f = pm_fn(&api.cuptiPmSamplingCounterDataGetSampleInfo, F)?;
            let mut p = b::CUpti_PmSampling_CounterData_GetSampleInfo_Params {
                structSize: pm_struct_size!(b::CUpti_PmSampling_CounterData_GetSampleInfo_Params, endTimestamp),
                pPmSamplingObject: sampler.obj.cast(),
                pCounterDataImage: image.as_ptr(),
                counterDataImageSize: image.len(),
                sampleIndex: index,
                ..Default::default()
            };
            // SAFETY: valid parameter struct; `image` is readable for its length.
            let rc = unsafe { f(&mut p) };
            self.check(F, rc)?;
            Ok((p.startTimestamp, p.endTimestamp))
        })
    }
}
