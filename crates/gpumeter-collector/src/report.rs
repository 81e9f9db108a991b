//! What a collection did: the [`StopReport`] of [`Collector::stop`](crate::Collector::stop).

use gpumeter_recording::gmr::GmrHeader;

use crate::pmsampling::PmSamplingTally;

/// What a collection did, from [`Collector::stop`](crate::Collector::stop). A recording misses work when
/// [`StopReport::is_complete`] is `false`; the counts say how much.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StopReport {
    /// The final header given to the sink (the start header plus the device inventory).
    pub header: GmrHeader,
    /// Activity buffers the sink accepted.
    pub buffers: u64,
    /// Their valid bytes.
    pub bytes: u64,
    /// Records in them.
    pub records: u64,
    /// KERNEL and CONCURRENT_KERNEL records among them.
    pub kernels: u64,
    /// Records CUPTI reported dropped (its buffers were full or late): in the recording as
    /// dropped-count frames, booked as loss `dropped` by a usage report.
    pub dropped_records: u64,
    /// Buffers whose delivery failed (a panic or a sink error): their records are missing.
    pub failed_buffers: u64,
    /// Buffers CUPTI completed after the session ended: not recorded.
    pub discarded_buffers: u64,
    /// Completions of buffers the pool had not lent (or had already got back): ignored.
    pub unknown_buffers: u64,
    /// Buffers that did not walk to their end with the session's layouts (recorded whole).
    pub decode_errors: u64,
    /// Buffers CUPTI still held after the forced flush (empty ones it had not used yet).
    pub outstanding_buffers: u64,
    /// Panics caught in callbacks (messages; at most 32, then a count).
    pub panics: Vec<String>,
    /// Errors: sink failures, failed CUPTI calls at stop (at most 32, then a count).
    pub errors: Vec<String>,
    /// Instruction-count frames handed to the sink ([`CollectorConfig::instructions`](crate::CollectorConfig::instructions)): one
    /// per instrumented kernel-launch call.
    pub instruction_frames: u64,
    /// Warnings: kinds that could not be enabled, inventory or energy that could not be read.
    pub warnings: Vec<String>,
    /// Energy frames handed to the sink ([`CollectorConfig::energy`](crate::CollectorConfig::energy)).
    pub energy_samples: u64,
    /// PM samples handed to the sink ([`CollectorConfig::pm_sampling`](crate::CollectorConfig::pm_sampling)).
    pub pm_samples: u64,
    /// PM-sample frames handed to the sink.
    pub pm_frames: u64,
    /// Hardware-buffer overflows of PM sampling (samples were lost; each is flagged in the
    /// recording and booked as loss `pm_sample_overflow` by a usage report).
    pub pm_overflows: u64,
    /// PM sample values that were not usable counts (NaN, infinite, negative, too large):
    /// those counters are absent from their samples.
    pub pm_unusable_values: u64,
    /// PM samples decoded but not written (the sink refused them).
    pub pm_unwritten_samples: u64,
    /// Devices PM-sampled, with the chip, metrics and trigger.
    pub pm_devices: Vec<(u32, String)>,
    /// Operation-counters frames handed to the sink ([`CollectorConfig::flops`](crate::CollectorConfig::flops)).
    pub flops_frames: u64,
    /// Kernel launches written with FLOP counters.
    pub flops_launches: u64,
    /// Kernel launches left without FLOP counters (ranges dropped or missing, or frames the
    /// sink refused): their device's FLOP meters are not meterable in a usage report.
    pub flops_launches_without_counts: u64,
    /// FLOP counter values that were not usable counts (left out of their launch).
    pub flops_unusable_values: u64,
    /// Contexts profiled: (CUDA ordinal, metrics and replay passes per kernel).
    pub flops_contexts: Vec<(u32, String)>,
}

impl StopReport {
    /// `true` when nothing was lost: no dropped records, no failed, discarded or unknown
    /// buffers, no PM-sampling overflow or unwritten samples, no panics and no errors.
    pub fn is_complete(&self) -> bool {
        self.dropped_records == 0
            && self.failed_buffers == 0
            && self.discarded_buffers == 0
            && self.unknown_buffers == 0
            && self.panics.is_empty()
            && self.errors.is_empty()
            && self.pm_overflows == 0
            && self.pm_unwritten_samples == 0
            && self.flops_launches_without_counts == 0
    }
}

/// Puts a PM sampling tally into the stop report: counts, devices, warnings (including one
/// for overflows and unusable values, which are never silent) and errors.
pub(crate) fn add_pm_tally(report: &mut StopReport, errors: &mut Vec<String>, t: PmSamplingTally) {
    report.pm_samples = t.samples;
    report.pm_frames = t.frames;
    report.pm_overflows = t.overflows;
    report.pm_unusable_values = t.unusable_values;
    report.pm_unwritten_samples = t.unwritten_samples;
    report.pm_devices = t.devices;
    report.warnings.extend(t.warnings);
    if t.overflows > 0 {
        report.warnings.push(format!(
            "PM sampling: the hardware buffer overflowed {} time(s); samples were lost (flagged \
             in the recording; a larger hw_buffer_bytes, a shorter decode_period or a longer \
             interval avoids it)",
            t.overflows
        ));
    }
    if t.unusable_values > 0 {
        report.warnings.push(format!(
            "PM sampling: {} counter value(s) were NaN, infinite, negative or too large and \
             are absent from their samples",
            t.unusable_values
        ));
    }
    errors.extend(t.errors);
}
