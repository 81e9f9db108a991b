//! PM sampling: hardware counters of each GPU the program uses, sampled at fixed GPU-time
//! intervals (CUPTI's PM sampling API, CUDA 12.6+), written as `.gmr` PM-sample frames
//! ([`CollectorConfig::pm_sampling`](crate::CollectorConfig::pm_sampling)).
//!
//! # Flow
//!
//! At [`Collector::start`](crate::Collector::start): the libcupti must have the API
//! ([`Cupti::pm_sampling_available`]), else the start fails
//! ([`PmSamplingError::NotAvailable`]); the collector then enables the callbacks of context
//! creation and of context destruction.
//!
//! On the **first context created on a device** (in CUPTI's callback, on the application's
//! thread): `cuptiProfilerInitialize` (once per process), `cuptiPmSamplingEnable`, the chip
//! name (`cuptiDeviceGetChipName`), the counter-availability image, a profiler host object of
//! type PM sampling for the chip, the metric selection ([`select_metrics`]: per role the first
//! candidate the chip can sample), the config image, `cuptiPmSamplingSetConfig` with the GPU
//! time-interval trigger (GA10x, Hopper and later; on Turing and GA100, which lack it, the
//! system-clock trigger with the interval taken as cycles of a 1 GHz clock, a warning), a
//! counter-data image, and `cuptiPmSamplingStart`. A failure is recorded for the stop report
//! as a typed [`PmSamplingError`] (insufficient privileges, unsupported GPU, no metric) and that
//! device is not sampled; collection goes on.
//!
//! A **decode thread** (`gpumeter-pm`) every [`PmSamplingConfig::decode_period`] decodes each
//! device's hardware buffer into its counter-data image (`cuptiPmSamplingDecodeData`), reads
//! the samples completed since the previous read (`cuptiPmSamplingGetCounterDataInfo`,
//! `cuptiPmSamplingCounterDataGetSampleInfo` for the start and end timestamps on CUPTI's
//! clock, `cuptiProfilerHostEvaluateToGpuValues` for the values), converts them
//! ([`to_count`]) and writes one frame per device and decode. When the image is full it is
//! re-initialised and the decode repeated.
//!
//! When a **context is destroyed**, or at **stop**, the device's remainder is decoded, then
//! `cuptiPmSamplingStop`, `cuptiPmSamplingDisable` and `cuptiProfilerHostDeinitialize`.
//!
//! # What is never silent
//!
//! * A hardware-buffer overflow (`overflow` of a decode: the buffer was full, newer samples
//!   were not kept) sets [`PmSample::overflow`](gpumeter_core::PmSample::overflow) on the next sample written for the device, or,
//!   when none follows, on a counter-free sample at the last sample's end; counted in
//!   [`PmSamplingTally::overflows`].
//! * A value CUPTI evaluates to NaN, ±∞, a negative number or more than `u64::MAX` leaves that
//!   counter `None` in its sample and is counted ([`PmSamplingTally::unusable_values`]).
//! * Setup failures and failed calls are errors of the stop report.

mod config;
mod pump;
mod sampler;
mod samples;
mod selection;

use std::collections::BTreeMap;
use std::sync::Mutex;

use cupti_sys::Cupti;

use crate::pool::lock;

pub use self::config::{
    PmSamplingConfig, PmSamplingError, DEFAULT_PM_DECODE_PERIOD, DEFAULT_PM_HW_BUFFER,
    DEFAULT_PM_INTERVAL, PM_DECODE_PERIOD_RANGE, PM_HW_BUFFER_RANGE, PM_INTERVAL_RANGE,
};
pub use self::pump::{PmSamplingTally, Pump, WriteSamples};
use self::sampler::CuptiSource;
pub use self::samples::{to_count, to_pm_sample, Decoded, RawSample, SampleSource, Unusable};
pub use self::selection::{
    select_metrics, HostProbe, MetricProbe, MetricSelection, DRAM_READ_CANDIDATES,
    DRAM_WRITE_CANDIDATES, SM_ACTIVE_CANDIDATES, SM_ELAPSED_CANDIDATES,
};

/// The process-wide PM sampling state behind the context callbacks.
struct Global {
    cupti: Option<&'static Cupti>,
    config: PmSamplingConfig,
    pump: Option<Pump>,
    /// `cuptiProfilerInitialize` done.
    profiler: bool,
    /// Devices whose setup failed (reported once).
    failed: BTreeMap<u32, ()>,
    /// Live contexts per device seen created during the session.
    contexts: BTreeMap<u32, u32>,
}

static GLOBAL: Mutex<Option<Global>> = Mutex::new(None);

/// Starts a session: the decode thread, writing through `write`.
///
/// # Errors
/// [`PmSamplingError::NotAvailable`] when the libcupti lacks the API;
/// [`PmSamplingError::Thread`] when the decode thread cannot be spawned.
pub(crate) fn begin(
    cupti: &'static Cupti,
    config: &PmSamplingConfig,
    write: WriteSamples,
) -> Result<(), PmSamplingError> {
    cupti
        .pm_sampling_available()
        .map_err(PmSamplingError::NotAvailable)?;
    let pump = Pump::start(config.decode_period, write).map_err(PmSamplingError::Thread)?;
    let mut g = lock(&GLOBAL);
    let profiler = g.as_ref().is_some_and(|g| g.profiler);
    *g = Some(Global {
        cupti: Some(cupti),
        config: config.clone(),
        pump: Some(pump),
        profiler,
        failed: BTreeMap::new(),
        contexts: BTreeMap::new(),
    });
    Ok(())
}

/// Ends the session: every device decoded a last time and released; the tally.
pub(crate) fn end() -> Option<PmSamplingTally> {
    let pump = {
        let mut g = lock(&GLOBAL);
        g.as_mut().and_then(|g| {
            g.cupti = None;
            g.pump.take()
        })
    };
    pump.map(Pump::stop)
}

/// A context was created (CUPTI callback): sets its device up once.
pub(crate) fn on_context_created(device: u32) {
    let mut g = lock(&GLOBAL);
    let Some(global) = g.as_mut() else {
        return;
    };
    let (Some(cupti), Some(pump)) = (global.cupti, global.pump.as_ref()) else {
        return;
    };
    *global.contexts.entry(device).or_insert(0) += 1;
    if pump.has(device) || global.failed.contains_key(&device) {
        return;
    }
    if !global.profiler {
        if let Err(e) = cupti.profiler_initialize() {
            let e = PmSamplingError::from_cupti(device, None, e);
            pump.note(Some(e.to_string()), None);
            global.failed.insert(device, ());
            return;
        }
        global.profiler = true;
    }
    match CuptiSource::start(cupti, device, &global.config) {
        Ok((source, description, warnings)) => {
            for w in warnings {
                pump.note(None, Some(w));
            }
            pump.add(Box::new(source), description);
        }
        Err(e) => {
            pump.note(Some(e.to_string()), None);
            global.failed.insert(device, ());
        }
    }
}

/// A context is being destroyed (CUPTI callback): when it is the last context of its device
/// created during the session, the device's samples are decoded and the device released (a
/// later context sets it up again).
pub(crate) fn on_context_destroying(device: u32) {
    let mut g = lock(&GLOBAL);
    let Some(global) = g.as_mut() else {
        return;
    };
    let left = global
        .contexts
        .get(&device)
        .map_or(0, |n| n.saturating_sub(1));
    global.contexts.insert(device, left);
    if left > 0 {
        return;
    }
    if let Some(pump) = global.pump.as_ref() {
        if pump.has(device) {
            pump.retire(device);
        }
    }
}
