//! The end of a collection ([`Collector::stop`]), step by step: end instrumented mode, disable
//! the kinds and force a flush, take the last energy reading, decode the FLOP counters and PM
//! samples left, book the last dropped-record count and unsubscribe, then complete the
//! header's device inventory (DEVICE records, the CUDA driver, NVML), write the held-back
//! energy readings, finish the sink and fill the [`StopReport`].

use std::panic::{catch_unwind, AssertUnwindSafe};

use gpumeter_recording::gmr::{GmrDevice, GmrHeader};

use crate::completion::{panic_message, Session, Tally};
use crate::energy::Leftover;
use crate::live::{Live, RunningGuard, LIVE};
use crate::report::{add_pm_tally, StopReport};
use crate::{driver, ffi, flops, nvml, pmsampling, sass, Collector};

impl Collector {
    /// [`Collector::stop`] and the drop of a running collector: see `stop`'s docs.
    pub(crate) fn stop_inner(&mut self) -> StopReport {
        let mut report = StopReport {
            warnings: std::mem::take(&mut self.warnings),
            ..StopReport::default()
        };
        if !self.running {
            return report;
        }
        self.running = false;
        let _release = RunningGuard(true);
        let mut errors = Vec::new();
        let energy_left = self.end_collection(&mut report, &mut errors);
        let Some(live) = LIVE.get() else {
            return report;
        };
        self.release_cupti(live, &mut report, &mut errors);
        let mut header = self.header.clone();
        if let Some(session) = live.core.end() {
            self.finish_session(session, &mut header, energy_left, &mut report, &mut errors);
        }
        fill_from_tally(&mut report, header, live.core.tally(), errors);
        report
    }

    /// Ends instrumented mode, disables the kinds, forces the final flush, stops the energy
    /// sampler (its last reading, returned) and decodes what FLOP counting and PM sampling
    /// still hold, while the recording is open.
    fn end_collection(
        &mut self,
        report: &mut StopReport,
        errors: &mut Vec<String>,
    ) -> Option<Leftover> {
        let cupti = self.cupti;
        if std::mem::take(&mut self.instructions) {
            let ended = sass::end(cupti);
            report.warnings.extend(ended.warnings);
            report.instruction_frames = ended.frames;
        }
        for kind in std::mem::take(&mut self.enabled) {
            if let Err(e) = cupti.activity_disable(kind.0) {
                report
                    .warnings
                    .push(format!("activity kind {kind} not disabled: {e}"));
            }
        }
        if let Err(e) = cupti.activity_flush_all(ffi::FLUSH_FORCED) {
            errors.push(format!("forced flush failed (buffers may be missing): {e}"));
        }
        // The last energy reading, after the final flush; nothing is written by the sampler
        // after this.
        let energy_left = self.energy.take().map(|s| s.stop(nvml::NVML_TIMEOUT));
        // The FLOP counters of the launches not yet decoded, while the recording is open.
        if std::mem::take(&mut self.flops) {
            if let Some(f) = flops::end() {
                report.flops_frames = f.frames;
                report.flops_launches = f.tally.launches_with_counts;
                report.flops_launches_without_counts =
                    f.tally.launches_without_counts + f.unwritten_launches;
                report.flops_unusable_values = f.tally.unusable_values;
                report.flops_contexts = f.contexts;
                report.warnings.extend(f.warnings);
                errors.extend(f.errors);
            }
        }
        // The PM samples left in the hardware buffers, while the recording is still open.
        if std::mem::take(&mut self.pm_sampling) {
            if let Some(t) = pmsampling::end() {
                add_pm_tally(report, errors, t);
            }
        }
        energy_left
    }

    /// Books the last dropped-record count and unsubscribes.
    fn release_cupti(&mut self, live: &Live, report: &mut StopReport, errors: &mut Vec<String>) {
        let cupti = self.cupti;
        match ffi::read_dropped(cupti) {
            Ok(Some(d)) => live.core.dropped(d),
            Ok(None) => {}
            Err(e) => errors.push(format!("dropped-record count not read at stop: {e}")),
        }
        if let Some(h) = self.subscriber.take() {
            if let Err(e) = ffi::unsubscribe(cupti, h) {
                report.warnings.push(e.to_string());
            }
        }
    }

    /// Completes `header`'s device inventory, writes the energy readings held back until it
    /// was known, and finishes the sink with the final header.
    fn finish_session(
        &self,
        mut session: Session,
        header: &mut GmrHeader,
        energy_left: Option<Leftover>,
        report: &mut StopReport,
        errors: &mut Vec<String>,
    ) {
        header.devices = self.inventory(&session, &mut report.warnings);
        if let Some(left) = energy_left {
            let resolved = left.resolve(&header.devices);
            report.energy_samples = resolved.written;
            report.warnings.extend(resolved.warnings);
            for s in &resolved.samples {
                let sink = &mut session.sink;
                match catch_unwind(AssertUnwindSafe(|| sink.energy(s))) {
                    Ok(Ok(())) => report.energy_samples += 1,
                    Ok(Err(e)) => errors.push(format!("could not record an energy sample: {e}")),
                    Err(p) => errors.push(format!(
                        "panic while recording an energy sample: {}",
                        panic_message(p.as_ref())
                    )),
                }
            }
        }
        let finished = catch_unwind(AssertUnwindSafe(|| session.sink.finish(header)));
        match finished {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(format!("could not finish the recording: {e}")),
            Err(p) => errors.push(format!(
                "panic while finishing the recording: {}",
                panic_message(p.as_ref())
            )),
        }
    }

    /// The devices of the DEVICE records, then what the CUDA driver
    /// ([`crate::CollectorConfig::driver_inventory`]) and NVML
    /// ([`crate::CollectorConfig::nvml_inventory`]) add.
    fn inventory(&self, session: &Session, warnings: &mut Vec<String>) -> Vec<GmrDevice> {
        let mut devices: Vec<GmrDevice> = session.devices().values().cloned().collect();
        if self.driver_inventory {
            match driver::driver_inventory() {
                Ok(found) => merge_inventory(&mut devices, found),
                Err(e) => warnings.push(format!("no device inventory from the CUDA driver: {e}")),
            }
        }
        if self.nvml_inventory {
            nvml::nvml_inventory(&mut devices, warnings, nvml::verbose(), nvml::NVML_TIMEOUT);
        }
        devices
    }
}

/// Fills `report` from the core's tally and the final header; `errors` (of the stop) come
/// after the tally's.
fn fill_from_tally(report: &mut StopReport, header: GmrHeader, t: Tally, errors: Vec<String>) {
    report.header = header;
    report.buffers = t.written;
    report.bytes = t.bytes;
    report.records = t.records;
    report.kernels = t.kernels;
    report.dropped_records = t.dropped;
    report.failed_buffers = t.failed;
    report.discarded_buffers = t.discarded;
    report.unknown_buffers = t.unknown;
    report.decode_errors = t.decode_errors;
    report.outstanding_buffers = t.pool.outstanding;
    report.panics = t.panics;
    report.errors = t.errors;
    report.errors.extend(errors);
}

/// Adds the driver's view of each device to the DEVICE-record inventory: a device the records
/// did not name is added; known fields stay.
pub(crate) fn merge_inventory(devices: &mut Vec<GmrDevice>, from_driver: Vec<GmrDevice>) {
    for d in from_driver {
        match devices.iter_mut().find(|x| x.id == d.id) {
            Some(x) => {
                if x.name.is_none() {
                    x.name = d.name;
                }
                if x.uuid.is_none() {
                    x.uuid = d.uuid;
                }
                if x.sm_count.is_none() {
                    x.sm_count = d.sm_count;
                }
                if x.compute_capability.is_none() {
                    x.compute_capability = d.compute_capability;
                }
            }
            None => devices.push(d),
        }
    }
    devices.sort_by_key(|d| d.id);
}
