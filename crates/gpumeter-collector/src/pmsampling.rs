//! PM sampling: hardware counters of each GPU the program uses, sampled at fixed GPU-time
//! intervals (CUPTI's PM sampling API, CUDA 12.6+), written as `.gmr` PM-sample frames
//! ([`CollectorConfig::pm_sampling`](super::CollectorConfig::pm_sampling)).
//!
//! # Flow
//!
//! At [`Collector::start`](super::Collector::start): the libcupti must have the API
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
//!   were not kept) sets [`PmSample::overflow`] on the next sample written for the device, or,
//!   when none follows, on a counter-free sample at the last sample's end; counted in
//!   [`PmSamplingTally::overflows`].
//! * A value CUPTI evaluates to NaN, ±∞, a negative number or more than `u64::MAX` leaves that
//!   counter `None` in its sample and is counted ([`PmSamplingTally::unusable_values`]).
//! * Setup failures and failed calls are errors of the stop report.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use cupti_sys::{Cupti, CuptiError, DecodeStopReason, MetricType, PmHost, PmSampler, TriggerMode};
use gpumeter_core::PmSample;

use super::completion::panic_message;
use super::pool::lock;
use gpumeter_recording::gmr::PmSamples;

/// Candidates for Σ over SMs of active cycles, in order of preference.
pub const SM_ACTIVE_CANDIDATES: &[&str] = &["sm__cycles_active.sum"];
/// Candidates for the cycles elapsed on one SM over a sample. `gpc__cycles_elapsed.max` counts
/// the GPC clock, which is the SM clock on every chip PM sampling supports.
pub const SM_ELAPSED_CANDIDATES: &[&str] = &["sm__cycles_elapsed.max", "gpc__cycles_elapsed.max"];
/// Candidates for bytes read from device memory. CUPTI 12.8 offers none of them for PM
/// sampling on GA100, GA102, GH100, AD102 or GB100 (only DRAM throughput percentages), so
/// `dram_bytes` is then not sampled (a warning).
pub const DRAM_READ_CANDIDATES: &[&str] = &["dram__bytes_read.sum", "fbpa__dram_read_bytes.sum"];
/// Candidates for bytes written to device memory (see [`DRAM_READ_CANDIDATES`]).
pub const DRAM_WRITE_CANDIDATES: &[&str] = &["dram__bytes_write.sum", "fbpa__dram_write_bytes.sum"];

/// Allowed [`PmSamplingConfig::interval`]: 1 µs to 1 s.
pub const PM_INTERVAL_RANGE: RangeInclusive<Duration> =
    Duration::from_micros(1)..=Duration::from_secs(1);
/// Default [`PmSamplingConfig::interval`]: 100 µs (10,000 samples a second per GPU).
pub const DEFAULT_PM_INTERVAL: Duration = Duration::from_micros(100);
/// Allowed [`PmSamplingConfig::hw_buffer_bytes`]: 1 MiB to 4 GiB.
pub const PM_HW_BUFFER_RANGE: RangeInclusive<usize> = (1 << 20)..=(1 << 32);
/// Default [`PmSamplingConfig::hw_buffer_bytes`]: 512 MiB (CUPTI's own default).
pub const DEFAULT_PM_HW_BUFFER: usize = 512 << 20;
/// Allowed [`PmSamplingConfig::decode_period`]: 1 ms to 10 s.
pub const PM_DECODE_PERIOD_RANGE: RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(10);
/// Default [`PmSamplingConfig::decode_period`]: 100 ms.
pub const DEFAULT_PM_DECODE_PERIOD: Duration = Duration::from_millis(100);

/// Decodes in a row when the counter-data image keeps filling up, before waiting for the next
/// period.
const MAX_DECODES_PER_ROUND: usize = 64;
/// Fewest and most samples one counter-data image holds.
const MIN_IMAGE_SAMPLES: u64 = 256;
const MAX_IMAGE_SAMPLES: u64 = 1 << 20;
/// Error messages kept for the stop report; later ones are counted.
const KEEP_ERRORS: usize = 32;

/// PM sampling settings ([`CollectorConfig::pm_sampling`](super::CollectorConfig::pm_sampling)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmSamplingConfig {
    /// Time between samples, [`PM_INTERVAL_RANGE`]; default [`DEFAULT_PM_INTERVAL`]. On GPUs
    /// without the GPU-time trigger (Turing, GA100) it becomes a count of system-clock cycles
    /// (nanoseconds × 1 GHz, approximate).
    pub interval: Duration,
    /// Bytes of the hardware buffer the GPU writes samples into, [`PM_HW_BUFFER_RANGE`];
    /// default [`DEFAULT_PM_HW_BUFFER`]. When it fills before a decode, newer samples are lost
    /// (an overflow, never silent).
    pub hw_buffer_bytes: usize,
    /// How often the decode thread empties the hardware buffers,
    /// [`PM_DECODE_PERIOD_RANGE`]; default [`DEFAULT_PM_DECODE_PERIOD`].
    pub decode_period: Duration,
}

impl Default for PmSamplingConfig {
    fn default() -> Self {
        PmSamplingConfig {
            interval: DEFAULT_PM_INTERVAL,
            hw_buffer_bytes: DEFAULT_PM_HW_BUFFER,
            decode_period: DEFAULT_PM_DECODE_PERIOD,
        }
    }
}

impl PmSamplingConfig {
    /// Checks every field against its range.
    ///
    /// # Errors
    /// A message naming the field, its value and the allowed range.
    pub fn validate(&self) -> Result<(), String> {
        if !PM_INTERVAL_RANGE.contains(&self.interval) {
            return Err(format!(
                "pm_sampling.interval {:?} is outside {:?}..={:?}",
                self.interval,
                PM_INTERVAL_RANGE.start(),
                PM_INTERVAL_RANGE.end()
            ));
        }
        if !PM_HW_BUFFER_RANGE.contains(&self.hw_buffer_bytes) {
            return Err(format!(
                "pm_sampling.hw_buffer_bytes {} is outside {}..={} bytes",
                self.hw_buffer_bytes,
                PM_HW_BUFFER_RANGE.start(),
                PM_HW_BUFFER_RANGE.end()
            ));
        }
        if !PM_DECODE_PERIOD_RANGE.contains(&self.decode_period) {
            return Err(format!(
                "pm_sampling.decode_period {:?} is outside {:?}..={:?}",
                self.decode_period,
                PM_DECODE_PERIOD_RANGE.start(),
                PM_DECODE_PERIOD_RANGE.end()
            ));
        }
        Ok(())
    }

    /// Samples one counter-data image holds: twice the samples of a decode period, within
    /// 256..=2^20.
    fn image_samples(&self) -> u32 {
        let per_period = self.decode_period.as_nanos() / self.interval.as_nanos().max(1);
        let n = u64::try_from(per_period.saturating_mul(2)).unwrap_or(MAX_IMAGE_SAMPLES);
        let n = n.clamp(MIN_IMAGE_SAMPLES, MAX_IMAGE_SAMPLES);
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

/// Why PM sampling could not be set up (at start, or for one device).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmSamplingError {
    /// The libcupti has no PM sampling API (CUDA 12.6 and newer have it).
    #[error(
        "PM sampling needs CUPTI's PM sampling and profiler host APIs (CUDA 12.6 and newer): \
         {0}"
    )]
    NotAvailable(#[source] CuptiError),
    /// CUPTI refused for lack of permission (`CUPTI_ERROR_INSUFFICIENT_PRIVILEGES`).
    #[error(
        "device {device}: GPU performance counters are restricted to administrators \
         ({detail}); run as root, or allow all users by loading the nvidia module with \
         NVreg_RestrictProfilingToAdminUsers=0 (e.g. `options nvidia \
         NVreg_RestrictProfilingToAdminUsers=0` in /etc/modprobe.d/, then reload the driver)"
    )]
    InsufficientPrivileges {
        /// The CUDA ordinal.
        device: u32,
        /// CUPTI's function, result and message.
        detail: String,
    },
    /// The GPU or its configuration cannot be PM-sampled (`CUPTI_ERROR_NOT_SUPPORTED`, or a
    /// chip the host API does not know).
    #[error("device {device} ({chip}): PM sampling is not supported: {detail}")]
    Unsupported {
        /// The CUDA ordinal.
        device: u32,
        /// The chip name, or `?` when not known yet.
        chip: String,
        /// CUPTI's function, result and message.
        detail: String,
    },
    /// The chip can sample none of the candidate metrics.
    #[error(
        "device {device} ({chip}): the chip can PM-sample none of the metrics gpumeter uses \
         ({})",
        all_candidates().join(", ")
    )]
    NoMetrics {
        /// The CUDA ordinal.
        device: u32,
        /// The chip name.
        chip: String,
    },
    /// No CUDA driver or GPU (`CUPTI_ERROR_NOT_INITIALIZED`).
    #[error("PM sampling: no CUDA driver or GPU ({detail})")]
    NoGpu {
        /// CUPTI's function, result and message.
        detail: String,
    },
    /// The decode thread could not be spawned.
    #[error("PM sampling: {0}")]
    Thread(String),
    /// Another CUPTI failure.
    #[error("device {device}: PM sampling: {error}")]
    Cupti {
        /// The CUDA ordinal.
        device: u32,
        /// The failure.
        #[source]
        error: CuptiError,
    },
}

impl PmSamplingError {
    /// The typed error of a failed CUPTI call while setting up device `device` (`chip` when
    /// known): INSUFFICIENT_PRIVILEGES, NOT_SUPPORTED, NOT_INITIALIZED and a missing API get
    /// their own variants.
    pub fn from_cupti(device: u32, chip: Option<&str>, error: CuptiError) -> PmSamplingError {
        use cupti_sys::v13_4 as h;
        match (&error, error.code()) {
            (CuptiError::NotSupported { .. } | CuptiError::MissingSymbol { .. }, _) => {
                PmSamplingError::NotAvailable(error)
            }
            (_, Some(h::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)) => {
                PmSamplingError::InsufficientPrivileges {
                    device,
                    detail: error.to_string(),
                }
            }
            (_, Some(h::CUPTI_ERROR_NOT_SUPPORTED)) => PmSamplingError::Unsupported {
                device,
                chip: chip.unwrap_or("?").to_string(),
                detail: error.to_string(),
            },
            (_, Some(h::CUPTI_ERROR_NOT_INITIALIZED)) => PmSamplingError::NoGpu {
                detail: error.to_string(),
            },
            _ => PmSamplingError::Cupti { device, error },
        }
    }
}

fn all_candidates() -> Vec<&'static str> {
    [
        SM_ACTIVE_CANDIDATES,
        SM_ELAPSED_CANDIDATES,
        DRAM_READ_CANDIDATES,
        DRAM_WRITE_CANDIDATES,
    ]
    .concat()
}

/// The metric chosen for each role (`None`: the chip has none of its candidates).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricSelection {
    /// Σ SM active cycles ([`PmSample::sm_active_cycles`]).
    pub sm_active: Option<&'static str>,
    /// SM elapsed cycles ([`PmSample::sm_elapsed_cycles`]).
    pub sm_elapsed: Option<&'static str>,
    /// DRAM bytes read ([`PmSample::dram_read_bytes`]).
    pub dram_read: Option<&'static str>,
    /// DRAM bytes written ([`PmSample::dram_write_bytes`]).
    pub dram_write: Option<&'static str>,
}

impl MetricSelection {
    /// The chosen metrics in role order (SM active, SM elapsed, DRAM read, DRAM write),
    /// absent roles skipped: the order values are evaluated in.
    pub fn metrics(&self) -> Vec<&'static str> {
        [
            self.sm_active,
            self.sm_elapsed,
            self.dram_read,
            self.dram_write,
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// What the selection lacks, for a warning (`None` when complete).
    pub fn missing(&self) -> Option<String> {
        let mut gaps = Vec::new();
        if self.sm_active.is_none() || self.sm_elapsed.is_none() {
            gaps.push("SM activity (sm_active_ns will not be sampled)");
        }
        if self.dram_read.is_none() || self.dram_write.is_none() {
            gaps.push("DRAM bytes (dram_bytes will not be sampled)");
        }
        (!gaps.is_empty()).then(|| gaps.join("; "))
    }
}

/// What [`select_metrics`] asks of a chip.
pub trait MetricProbe {
    /// The chip's base counter metrics for PM sampling (names without a rollup, e.g.
    /// `sm__cycles_active`).
    ///
    /// # Errors
    /// A failed CUPTI call.
    fn base_counters(&mut self) -> Result<Vec<String>, CuptiError>;

    /// Whether one PM sampling configuration can hold all of `metrics`: `Ok(false)` when the
    /// chip refuses them, `Err` for any other failure.
    ///
    /// # Errors
    /// A failed CUPTI call other than a refusal of the metrics.
    fn accepts(&mut self, metrics: &[&str]) -> Result<bool, CuptiError>;
}

/// Chooses per role (SM active, SM elapsed, DRAM read, DRAM write, in that order) the first
/// candidate whose base metric the chip lists and that one configuration accepts together
/// with the metrics already chosen.
///
/// # Errors
/// A failed probe call other than a refusal.
pub fn select_metrics(probe: &mut dyn MetricProbe) -> Result<MetricSelection, CuptiError> {
    let bases = probe.base_counters()?;
    let mut chosen: Vec<&'static str> = Vec::new();
    let mut pick = |candidates: &[&'static str]| -> Result<Option<&'static str>, CuptiError> {
        for &c in candidates {
            let base = c.split('.').next().unwrap_or(c);
            if !bases.iter().any(|b| b == base) {
                continue;
            }
            let mut with = chosen.clone();
            with.push(c);
            if probe.accepts(&with)? {
                chosen.push(c);
                return Ok(Some(c));
            }
        }
        Ok(None)
    };
    Ok(MetricSelection {
        sm_active: pick(SM_ACTIVE_CANDIDATES)?,
        sm_elapsed: pick(SM_ELAPSED_CANDIDATES)?,
        dram_read: pick(DRAM_READ_CANDIDATES)?,
        dram_write: pick(DRAM_WRITE_CANDIDATES)?,
    })
}

/// [`MetricProbe`] through the real profiler host API for one chip: each question on a fresh
/// host object (a refused `cuptiProfilerHostConfigAddMetrics` leaves an object's state
/// undefined).
pub struct HostProbe<'a> {
    cupti: &'a Cupti,
    chip: String,
    availability: Option<Vec<u8>>,
}

impl<'a> HostProbe<'a> {
    /// A probe of chip `chip` (e.g. `"GH100"`) with the device's counter-availability image
    /// when there is one.
    pub fn new(cupti: &'a Cupti, chip: &str, availability: Option<Vec<u8>>) -> HostProbe<'a> {
        HostProbe {
            cupti,
            chip: chip.to_string(),
            availability,
        }
    }

    fn with_host<T>(
        &mut self,
        f: impl FnOnce(&Cupti, &PmHost) -> Result<T, CuptiError>,
    ) -> Result<T, CuptiError> {
        let host = self
            .cupti
            .pm_host_initialize(&self.chip, self.availability.as_deref())?;
        let r = f(self.cupti, &host);
        let _ = self.cupti.pm_host_deinitialize(host);
        r
    }
}

impl MetricProbe for HostProbe<'_> {
    fn base_counters(&mut self) -> Result<Vec<String>, CuptiError> {
        self.with_host(|c, h| c.pm_host_base_metrics(h, MetricType::Counter))
    }

    fn accepts(&mut self, metrics: &[&str]) -> Result<bool, CuptiError> {
        use cupti_sys::v13_4 as h;
        self.with_host(|c, host| match c.pm_host_add_metrics(host, metrics) {
            Ok(()) => Ok(true),
            Err(e)
                if matches!(
                    e.code(),
                    Some(h::CUPTI_ERROR_INVALID_PARAMETER | h::CUPTI_ERROR_INVALID_METRIC_NAME)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        })
    }
}

/// Why a value CUPTI evaluated cannot be a count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// NaN.
    NaN,
    /// +∞ or −∞.
    Infinite,
    /// Below zero (less than −0.5 before rounding).
    Negative,
    /// Above `u64::MAX`.
    TooLarge,
}

/// A counter value as CUPTI evaluates it (`f64`) as a count: rounded to the nearest integer
/// (half away from zero).
///
/// # Errors
/// [`Unusable`] for NaN, ±∞, a value that rounds below 0, or one of 2^64 or more.
pub fn to_count(v: f64) -> Result<u64, Unusable> {
    if v.is_nan() {
        return Err(Unusable::NaN);
    }
    if v.is_infinite() {
        return Err(Unusable::Infinite);
    }
    let r = v.round();
    if r < 0.0 {
        return Err(Unusable::Negative);
    }
    // 2^64 as f64 is exact; every f64 below it converts without saturation.
    if r >= 18_446_744_073_709_551_616.0 {
        return Err(Unusable::TooLarge);
    }
    // Truncation is exact here: `r` is integral and within 0..2^64.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(r as u64)
}

/// One sample as decoded: CUPTI-clock times and the selection's values in
/// [`MetricSelection::metrics`] order.
#[derive(Debug, Clone, PartialEq)]
pub struct RawSample {
    /// Start, ns on CUPTI's clock.
    pub start_ns: u64,
    /// End, ns on CUPTI's clock.
    pub end_ns: u64,
    /// The evaluated values.
    pub values: Vec<f64>,
}

/// What one decode of a device gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decoded {
    /// Samples completed since the previous decode, in order.
    pub samples: Vec<RawSample>,
    /// The hardware buffer overflowed: samples after these were lost.
    pub overflow: bool,
}

/// A device's source of samples: CUPTI's sampler, or a fake in tests.
pub trait SampleSource: Send {
    /// The CUDA ordinal.
    fn device(&self) -> u32;
    /// The metrics the values are of.
    fn selection(&self) -> &MetricSelection;
    /// Decodes what the hardware has collected since the previous call.
    ///
    /// # Errors
    /// A message for the stop report.
    fn decode(&mut self) -> Result<Decoded, String>;
    /// Stops sampling and releases everything (after the last [`SampleSource::decode`]);
    /// returns the problems met.
    fn finish(self: Box<Self>) -> Vec<String>;
}

/// Builds a [`PmSample`] from a raw one; returns it and how many values were unusable.
pub fn to_pm_sample(raw: &RawSample, selection: &MetricSelection) -> (PmSample, u64) {
    let mut unusable = 0u64;
    let mut values = raw.values.iter();
    let mut next = |present: bool| -> Option<u64> {
        if !present {
            return None;
        }
        match values.next().map(|&v| to_count(v)) {
            Some(Ok(n)) => Some(n),
            Some(Err(_)) | None => {
                unusable += 1;
                None
            }
        }
    };
    let sample = PmSample {
        start_ns: raw.start_ns,
        end_ns: raw.end_ns,
        sm_active_cycles: next(selection.sm_active.is_some()),
        sm_elapsed_cycles: next(selection.sm_elapsed.is_some()),
        dram_read_bytes: next(selection.dram_read.is_some()),
        dram_write_bytes: next(selection.dram_write.is_some()),
        overflow: false,
    };
    (sample, unusable)
}

/// Counts of a PM sampling session, for the stop report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PmSamplingTally {
    /// Devices sampled: (CUDA ordinal, description: chip, metrics, trigger).
    pub devices: Vec<(u32, String)>,
    /// Samples handed to the sink.
    pub samples: u64,
    /// Frames handed to the sink.
    pub frames: u64,
    /// Hardware-buffer overflows reported by decodes (each marks lost samples).
    pub overflows: u64,
    /// Values that could not be counts (NaN, infinite, negative, too large): their counters
    /// are `None` in the samples.
    pub unusable_values: u64,
    /// Samples decoded but not written (the sink refused the frame).
    pub unwritten_samples: u64,
    /// Problems: setup failures per device, failed decodes, failed stops.
    pub errors: Vec<String>,
    /// Warnings: missing metrics, trigger fallbacks.
    pub warnings: Vec<String>,
}

/// Writes one device's samples as a frame; `false` when they were not written (the writer
/// reported why).
pub type WriteSamples = Box<dyn FnMut(&PmSamples) -> bool + Send>;

/// A device being sampled, with its pending overflow and last sample end.
struct Entry {
    source: Box<dyn SampleSource>,
    overflow_pending: bool,
    last_end: Option<u64>,
}

struct Shared {
    state: Mutex<PumpState>,
    wake: Condvar,
}

struct PumpState {
    stopping: bool,
    devices: BTreeMap<u32, Entry>,
    write: WriteSamples,
    tally: PmSamplingTally,
    more_errors: u64,
}

impl PumpState {
    fn error(&mut self, e: String) {
        if self.tally.errors.len() < KEEP_ERRORS {
            self.tally.errors.push(e);
        } else {
            self.more_errors += 1;
        }
    }

    /// Decodes one device and writes its frame.
    fn pump_one(&mut self, device: u32, last: bool) {
        let Some(entry) = self.devices.get_mut(&device) else {
            return;
        };
        let decoded = match catch_unwind(AssertUnwindSafe(|| entry.source.decode())) {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => {
                self.error(format!("device {device}: PM sampling decode failed: {e}"));
                return;
            }
            Err(p) => {
                self.error(format!(
                    "device {device}: panic in the PM sampling decode: {}",
                    panic_message(p.as_ref())
                ));
                return;
            }
        };
        let selection = entry.source.selection().clone();
        let mut samples = Vec::with_capacity(decoded.samples.len());
        let mut unusable = 0;
        for raw in &decoded.samples {
            let (mut s, u) = to_pm_sample(raw, &selection);
            unusable += u;
            if std::mem::take(&mut entry.overflow_pending) {
                s.overflow = true;
            }
            entry.last_end = Some(s.end_ns);
            samples.push(s);
        }
        let mut overflows = 0;
        if decoded.overflow {
            overflows = 1;
            entry.overflow_pending = true;
        }
        if last && entry.overflow_pending {
            // Nothing follows: a counter-free sample at the last end carries the flag.
            if let Some(t) = entry.last_end {
                entry.overflow_pending = false;
                samples.push(PmSample {
                    start_ns: t,
                    end_ns: t,
                    sm_active_cycles: None,
                    sm_elapsed_cycles: None,
                    dram_read_bytes: None,
                    dram_write_bytes: None,
                    overflow: true,
                });
            }
        }
        self.tally.unusable_values += unusable;
        self.tally.overflows += overflows;
        if samples.is_empty() {
            return;
        }
        let n = samples.len() as u64;
        let frame = PmSamples {
            device_id: device,
            samples,
        };
        let write = &mut self.write;
        match catch_unwind(AssertUnwindSafe(|| write(&frame))) {
            Ok(true) => {
                self.tally.samples += n;
                self.tally.frames += 1;
            }
            Ok(false) => self.tally.unwritten_samples += n,
            Err(p) => {
                self.tally.unwritten_samples += n;
                self.error(format!(
                    "device {device}: panic writing PM samples: {}",
                    panic_message(p.as_ref())
                ));
            }
        }
    }

    /// Decodes a device a last time and finishes it.
    fn retire(&mut self, device: u32) {
        self.pump_one(device, true);
        if let Some(entry) = self.devices.remove(&device) {
            if entry.overflow_pending {
                self.error(format!(
                    "device {device}: a PM sampling overflow before any sample could not be \
                     written as a flagged sample"
                ));
            }
            match catch_unwind(AssertUnwindSafe(|| entry.source.finish())) {
                Ok(problems) => {
                    for p in problems {
                        self.error(format!("device {device}: {p}"));
                    }
                }
                Err(p) => self.error(format!(
                    "device {device}: panic stopping PM sampling: {}",
                    panic_message(p.as_ref())
                )),
            }
        }
    }
}

/// The decode thread and the devices it serves.
pub struct Pump {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Pump {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pump").finish_non_exhaustive()
    }
}

impl Pump {
    /// Starts the decode thread: every `period` each device is decoded and its samples
    /// written through `write`.
    ///
    /// # Errors
    /// When the thread cannot be spawned.
    pub fn start(period: Duration, write: WriteSamples) -> Result<Pump, String> {
        let shared = Arc::new(Shared {
            state: Mutex::new(PumpState {
                stopping: false,
                devices: BTreeMap::new(),
                write,
                tally: PmSamplingTally::default(),
                more_errors: 0,
            }),
            wake: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("gpumeter-pm".into())
            .spawn(move || run(&s, period))
            .map_err(|e| format!("PM sampling decode thread not started: {e}"))?;
        Ok(Pump {
            shared,
            thread: Some(thread),
        })
    }

    /// Adds a device's source (replacing and finishing an earlier one of the same device).
    pub fn add(&self, source: Box<dyn SampleSource>, description: String) {
        let mut st = lock(&self.shared.state);
        let device = source.device();
        if st.stopping {
            drop(st);
            let _ = catch_unwind(AssertUnwindSafe(|| source.finish()));
            return;
        }
        if st.devices.contains_key(&device) {
            st.retire(device);
        }
        st.tally.devices.push((device, description));
        st.devices.insert(
            device,
            Entry {
                source,
                overflow_pending: false,
                last_end: None,
            },
        );
    }

    /// Whether `device` is being sampled.
    pub fn has(&self, device: u32) -> bool {
        lock(&self.shared.state).devices.contains_key(&device)
    }

    /// Decodes every device now (as the thread does every period) and writes the frames.
    pub fn decode_now(&self) {
        let mut st = lock(&self.shared.state);
        let devices: Vec<u32> = st.devices.keys().copied().collect();
        for d in devices {
            st.pump_one(d, false);
        }
    }

    /// Decodes `device` a last time and finishes it (its context is going away).
    pub fn retire(&self, device: u32) {
        lock(&self.shared.state).retire(device);
    }

    /// Records a setup failure or a warning for the stop report.
    pub fn note(&self, error: Option<String>, warning: Option<String>) {
        let mut st = lock(&self.shared.state);
        if let Some(e) = error {
            st.error(e);
        }
        if let Some(w) = warning {
            st.tally.warnings.push(w);
        }
    }

    /// Stops the thread, decodes every device a last time, finishes them, and returns the
    /// tally.
    pub fn stop(mut self) -> PmSamplingTally {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> PmSamplingTally {
        lock(&self.shared.state).stopping = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                lock(&self.shared.state).error("the PM sampling decode thread panicked".into());
            }
        }
        let mut st = lock(&self.shared.state);
        let devices: Vec<u32> = st.devices.keys().copied().collect();
        for d in devices {
            st.retire(d);
        }
        let mut tally = std::mem::take(&mut st.tally);
        if st.more_errors > 0 {
            tally
                .errors
                .push(format!("… and {} more PM sampling errors", st.more_errors));
            st.more_errors = 0;
        }
        tally
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = catch_unwind(AssertUnwindSafe(|| self.stop_inner()));
        }
    }
}

fn run(shared: &Shared, period: Duration) {
    let mut st = lock(&shared.state);
    loop {
        // Checked before waiting too: a stop asked before this thread first took the lock
        // has already notified.
        if st.stopping {
            return;
        }
        st = match shared.wake.wait_timeout(st, period) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
        if st.stopping {
            return;
        }
        let devices: Vec<u32> = st.devices.keys().copied().collect();
        for d in devices {
            st.pump_one(d, false);
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_data_image_holds_two_decode_periods_within_bounds() {
        assert_eq!(PmSamplingConfig::default().image_samples(), 2000);
        let slow = PmSamplingConfig {
            interval: Duration::from_secs(1),
            decode_period: Duration::from_millis(1),
            ..PmSamplingConfig::default()
        };
        assert_eq!(slow.image_samples(), 256);
        let fast = PmSamplingConfig {
            interval: Duration::from_micros(1),
            decode_period: Duration::from_secs(10),
            ..PmSamplingConfig::default()
        };
        assert_eq!(fast.image_samples(), 1 << 20);
    }
}
