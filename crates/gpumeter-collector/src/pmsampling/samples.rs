//! Decoding samples: the values CUPTI evaluated ([`RawSample`]) become counts ([`to_count`])
//! in a [`PmSample`] of the selected counters ([`to_pm_sample`]); a [`SampleSource`] is a
//! device the decode thread reads.

use gpumeter_core::PmSample;

use super::selection::MetricSelection;

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
