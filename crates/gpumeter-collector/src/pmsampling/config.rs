//! PM sampling's settings ([`PmSamplingConfig`], its accepted ranges and defaults) and why it
//! could not be set up ([`PmSamplingError`]).

use std::ops::RangeInclusive;
use std::time::Duration;

use cupti_sys::CuptiError;

use super::selection::all_candidates;

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

/// Fewest and most samples one counter-data image holds.
const MIN_IMAGE_SAMPLES: u64 = 256;
const MAX_IMAGE_SAMPLES: u64 = 1 << 20;

/// PM sampling settings ([`CollectorConfig::pm_sampling`](crate::CollectorConfig::pm_sampling)).
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
    pub(super) fn image_samples(&self) -> u32 {
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
