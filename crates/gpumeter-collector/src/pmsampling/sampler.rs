//! A device sampled through CUPTI ([`CuptiSource`]): its setup (profiler host, metric
//! selection, config image, trigger, counter-data image, `cuptiPmSamplingStart`), its decodes
//! and its release.

use cupti_sys::{Cupti, CuptiError, DecodeStopReason, PmHost, PmSampler, TriggerMode};

use super::config::{PmSamplingConfig, PmSamplingError};
use super::samples::{Decoded, RawSample, SampleSource};
use super::selection::{select_metrics, HostProbe, MetricSelection};

/// Decodes in a row when the counter-data image keeps filling up, before waiting for the next
/// period.
const MAX_DECODES_PER_ROUND: usize = 64;

/// A device sampled through CUPTI.
pub(crate) struct CuptiSource {
    cupti: &'static Cupti,
    sampler: Option<PmSampler>,
    host: Option<PmHost>,
    selection: MetricSelection,
    metrics: Vec<&'static str>,
    image: Vec<u8>,
    /// Samples of the current image already read.
    consumed: usize,
}

impl CuptiSource {
    /// Sets device `device` up and starts sampling (see the module docs); returns the source
    /// and a description and warnings for the report.
    pub(crate) fn start(
        cupti: &'static Cupti,
        device: u32,
        config: &PmSamplingConfig,
    ) -> Result<(CuptiSource, String, Vec<String>), PmSamplingError> {
        let mut warnings = Vec::new();
        let sampler = cupti
            .pm_enable(device)
            .map_err(|e| PmSamplingError::from_cupti(device, None, e))?;
        let mut partial = CuptiSource {
            cupti,
            sampler: Some(sampler),
            host: None,
            selection: MetricSelection::default(),
            metrics: Vec::new(),
            image: Vec::new(),
            consumed: 0,
        };
        match partial.configure(device, config, &mut warnings) {
            Ok(description) => Ok((partial, description, warnings)),
            Err(e) => {
                let _ = Box::new(partial).finish();
                Err(e)
            }
        }
    }

    fn configure(
        &mut self,
        device: u32,
        config: &PmSamplingConfig,
        warnings: &mut Vec<String>,
    ) -> Result<String, PmSamplingError> {
        let cupti = self.cupti;
        let chip = cupti
            .device_chip_name(device)
            .map_err(|e| PmSamplingError::from_cupti(device, None, e))?;
        let err = |e: CuptiError| PmSamplingError::from_cupti(device, Some(&chip), e);
        let availability = match cupti.pm_counter_availability(device) {
            Ok(a) => Some(a),
            Err(e) => {
                warnings.push(format!(
                    "device {device} ({chip}): no counter-availability image ({e}); metrics are \
                     chosen from the chip's full list"
                ));
                None
            }
        };
        let selection = select_metrics(&mut HostProbe::new(cupti, &chip, availability.clone()))
            .map_err(&err)?;
        let metrics = selection.metrics();
        if metrics.is_empty() {
            return Err(PmSamplingError::NoMetrics { device, chip });
        }
        if let Some(gap) = selection.missing() {
            warnings.push(format!("device {device} ({chip}): PM sampling lacks {gap}"));
        }
        let host = cupti
            .pm_host_initialize(&chip, availability.as_deref())
            .map_err(&err)?;
        let host = self.host.insert(host);
        cupti.pm_host_add_metrics(host, &metrics).map_err(&err)?;
        let image = cupti.pm_host_config_image(host).map_err(&err)?;
        let Some(sampler) = self.sampler.as_ref() else {
            return Err(PmSamplingError::NoGpu {
                detail: "the sampler is gone".into(),
            });
        };
        let ns = u64::try_from(config.interval.as_nanos()).unwrap_or(u64::MAX);
        let trigger = match cupti.pm_set_config(
            sampler,
            &image,
            config.hw_buffer_bytes,
            ns,
            TriggerMode::GpuTimeInterval,
        ) {
            Ok(()) => "GPU time interval",
            Err(e) if e.code() == Some(cupti_sys::v13_4::CUPTI_ERROR_NOT_SUPPORTED) => {
                cupti
                    .pm_set_config(
                        sampler,
                        &image,
                        config.hw_buffer_bytes,
                        ns,
                        TriggerMode::SysClkInterval,
                    )
                    .map_err(&err)?;
                warnings.push(format!(
                    "device {device} ({chip}): no GPU-time trigger; sampling every {ns} \
                     system-clock cycles instead (about {:?} at 1 GHz)",
                    config.interval
                ));
                "system-clock interval"
            }
            Err(e) => return Err(err(e)),
        };
        let size = cupti
            .pm_counter_data_size(sampler, &metrics, config.image_samples())
            .map_err(&err)?;
        let mut data = vec![0u8; size];
        cupti
            .pm_counter_data_initialize(sampler, &mut data)
            .map_err(&err)?;
        cupti.pm_start(sampler).map_err(&err)?;
        self.image = data;
        self.selection = selection;
        self.metrics = metrics.clone();
        Ok(format!(
            "{chip}: {} every {:?} ({trigger})",
            metrics.join(", "),
            config.interval
        ))
    }

    fn decode_inner(&mut self) -> Result<Decoded, CuptiError> {
        let cupti = self.cupti;
        let (Some(sampler), Some(host)) = (self.sampler.as_ref(), self.host.as_ref()) else {
            return Ok(Decoded::default());
        };
        let mut out = Decoded::default();
        for _ in 0..MAX_DECODES_PER_ROUND {
            let outcome = cupti.pm_decode(sampler, &mut self.image)?;
            out.overflow |= outcome.overflow;
            let info = cupti.pm_counter_data_info(&self.image)?;
            for i in self.consumed..info.completed {
                let (start_ns, end_ns) = cupti.pm_sample_info(sampler, &self.image, i)?;
                let values = cupti.pm_host_evaluate(host, &self.image, i, &self.metrics)?;
                out.samples.push(RawSample {
                    start_ns,
                    end_ns,
                    values,
                });
            }
            self.consumed = self.consumed.max(info.completed);
            if outcome.stop_reason != DecodeStopReason::CounterDataFull {
                break;
            }
            cupti.pm_counter_data_initialize(sampler, &mut self.image)?;
            self.consumed = 0;
        }
        Ok(out)
    }
}

impl SampleSource for CuptiSource {
    fn device(&self) -> u32 {
        self.sampler.as_ref().map_or(u32::MAX, PmSampler::device)
    }

    fn selection(&self) -> &MetricSelection {
        &self.selection
    }

    fn decode(&mut self) -> Result<Decoded, String> {
        self.decode_inner().map_err(|e| e.to_string())
    }

    fn finish(mut self: Box<Self>) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(sampler) = self.sampler.take() {
            if !self.image.is_empty() {
                if let Err(e) = self.cupti.pm_stop(&sampler) {
                    problems.push(format!("PM sampling not stopped: {e}"));
                }
            }
            if let Err(e) = self.cupti.pm_disable(sampler) {
                problems.push(format!("PM sampling not disabled: {e}"));
            }
        }
        if let Some(host) = self.host.take() {
            if let Err(e) = self.cupti.pm_host_deinitialize(host) {
                problems.push(format!("profiler host object not released: {e}"));
            }
        }
        problems
    }
}
