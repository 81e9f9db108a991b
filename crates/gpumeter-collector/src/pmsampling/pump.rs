//! The decode thread (`gpumeter-pm`): a [`Pump`] decodes every device's [`SampleSource`]
//! each decode period, writes one PM-sample frame per device and decode, flags overflows and
//! keeps the [`PmSamplingTally`] of the stop report.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use gpumeter_core::PmSample;
use gpumeter_recording::gmr::PmSamples;

use crate::completion::panic_message;
use crate::pool::lock;

use super::samples::{to_pm_sample, SampleSource};

/// Error messages kept for the stop report; later ones are counted.
const KEEP_ERRORS: usize = 32;

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
