//! Energy samples: each GPU's cumulative NVML energy counter as `.gmr` energy frames
//! ([`CollectorConfig::energy`](super::CollectorConfig::energy)).
//!
//! A helper thread (`gpumeter-energy`) opens NVML (through `gpumeter_nvml`'s [`Telemetry`]),
//! lists its GPUs, and reads every GPU's counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ
//! since the driver was loaded) at once, then every interval (default 1 s), and a last time
//! when [`EnergySampler::stop`] asks, which the collector does right after its forced flush.
//! NVML is never called on the application's threads, so [`Collector::start`](crate::Collector::start) never waits
//! for it, and [`EnergySampler::stop`] waits at most its timeout: a wedged driver costs the
//! final sample, never a hung exit.
//!
//! # What a frame says
//!
//! * `device` is the **CUDA ordinal** of the inventory entry the NVML GPU is (the ordinal in
//!   `deviceId` of the CUPTI records and in the header's device list), matched by the rules
//!   of the NVML inventory step (`super::nvml`: by UUID; by NVML index only where that is
//!   provably the CUDA ordinal). Until the process's CUDA devices are known (the CUDA driver
//!   answers once the program initialised it; else the final inventory at stop), readings
//!   are held back, then written under the matched ordinal. An NVML GPU that matches no entry
//!   (not visible to this process, or in MIG mode: its counter covers the whole GPU, not one
//!   MIG instance) is never written: its readings are dropped and the stop report says so.
//! * `timestamp_ns` is on **CUPTI's clock** (`cuptiGetTimestamp`, the clock of the activity
//!   records; ns since the Unix epoch on Linux): the midpoint of CUPTI timestamps read just
//!   before and just after the NVML call. Where CUPTI gives no timestamp, NVML's wall-clock
//!   time is mapped through the header's clock pair (`cupti + (wall − pair.wall)`). Per device,
//!   timestamps strictly increase: a reading not later than the previous one is not written.
//! * `energy_mj` is the counter as read: cumulative, not a delta.
//!
//! Failures to read energy (no NVML, a GPU without the counter, no permission, a timeout)
//! are warnings in the stop report, each message once with a count; they never fail
//! collection.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use gpumeter_nvml::{Gpu, Telemetry, TelemetryError};

use super::completion::panic_message;
use super::nvml::ordinals;
use super::pool::lock;
use gpumeter_recording::gmr::{ClockPair, EnergySample, GmrDevice};

/// Readings of one GPU held back while its CUDA ordinal is unknown; past this, the newest
/// replaces the last one kept (the first and the latest survive).
pub(crate) const MAX_PENDING: usize = 4096;

/// Distinct problem messages kept (each with a count).
const KEEP_PROBLEMS: usize = 32;

/// Opens the telemetry, on the sampler thread.
pub(crate) type Open = Box<dyn FnOnce() -> Result<Box<dyn Telemetry>, TelemetryError> + Send>;
/// Writes one frame; `false` when it was not written (the writer reported why).
pub(crate) type Write = Box<dyn FnMut(&EnergySample) -> bool + Send>;

/// What the sampler needs from its surroundings (the collector: NVML, CUPTI, the CUDA driver
/// and the recording; tests: `gpumeter_nvml::Recorded` and plain closures).
pub(crate) struct Sources {
    /// Opens the telemetry (`gpumeter_nvml::Nvml::init`).
    pub(crate) open: Open,
    /// CUPTI's clock (`cuptiGetTimestamp`), ns; `None` when it cannot be read.
    pub(crate) clock: Box<dyn Fn() -> Option<u64> + Send>,
    /// The header's clock pair, for readings without a CUPTI timestamp.
    pub(crate) clock_pair: ClockPair,
    /// The process's CUDA devices (ordinals and UUIDs) once known, else `None`; not asked
    /// before the first interval has passed.
    pub(crate) inventory: Box<dyn FnMut() -> Option<Vec<GmrDevice>> + Send>,
    /// Whether NVML's index may stand for the CUDA ordinal, given whether NVML lists a single
    /// GPU (`super::nvml::index_is_ordinal`).
    pub(crate) by_index: fn(bool) -> bool,
    /// Writes a frame.
    pub(crate) write: Write,
}

/// What is known of one NVML GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Its CUDA ordinal is not known yet: readings are held back.
    Unknown,
    /// It is this CUDA ordinal: readings are written.
    Ordinal(u32),
    /// It is no CUDA device of this process: not sampled any more.
    Unmatched,
    /// It has no energy counter: not sampled any more.
    Unsupported,
}

#[derive(Default)]
struct State {
    stop: bool,
    gpus: Vec<Gpu>,
    by_index: bool,
    targets: BTreeMap<u32, Target>,
    /// NVML index → held-back readings `(timestamp_ns, energy_mj)`.
    pending: BTreeMap<u32, Vec<(u64, u64)>>,
    /// NVML index → how many held-back readings were thinned out.
    thinned: BTreeMap<u32, u64>,
    /// NVML index → timestamp of the last reading accepted.
    last: BTreeMap<u32, u64>,
    written: u64,
    /// Problem messages in first-seen order, with counts.
    problems: Vec<(String, u64)>,
    more_problems: u64,
}

impl State {
    fn problem(&mut self, msg: String) {
        if let Some(p) = self.problems.iter_mut().find(|(m, _)| *m == msg) {
            p.1 += 1;
        } else if self.problems.len() < KEEP_PROBLEMS {
            self.problems.push((msg, 1));
        } else {
            self.more_problems += 1;
        }
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// `None` once the sampler is stopped: later readings go nowhere.
    writer: Mutex<Option<Write>>,
}

impl Shared {
    fn problem(&self, msg: String) {
        lock(&self.state).problem(msg);
    }

    /// Writes `s` unless the sampler is stopped; counts it when written.
    fn write(&self, s: &EnergySample) {
        let ok = match lock(&self.writer).as_mut() {
            Some(w) => w(s),
            None => false,
        };
        if ok {
            lock(&self.state).written += 1;
        }
    }

    /// Waits up to `interval` or until a stop is asked; `true` when one was.
    fn wait(&self, interval: Duration) -> bool {
        let guard = lock(&self.state);
        match self.wake.wait_timeout_while(guard, interval, |s| !s.stop) {
            Ok((s, _)) => s.stop,
            Err(poisoned) => poisoned.into_inner().0.stop,
        }
    }
}

/// The running sampler (see the module documentation).
pub(crate) struct EnergySampler {
    shared: Arc<Shared>,
    done: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for EnergySampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EnergySampler")
    }
}

/// A CUPTI timestamp for a wall-clock time, through the clock pair (the wall time itself when
/// the pair has no CUPTI side).
fn wall_to_cupti(unix_ns: u64, pair: &ClockPair) -> u64 {
    if pair.cupti_timestamp_ns == 0 || pair.unix_time_ns == 0 {
        return unix_ns;
    }
    let t =
        i128::from(pair.cupti_timestamp_ns) + i128::from(unix_ns) - i128::from(pair.unix_time_ns);
    u64::try_from(t.max(0)).unwrap_or(u64::MAX)
}

fn describe(g: &Gpu) -> String {
    match &g.uuid {
        Some(u) => format!("NVML GPU {} ({u})", g.index),
        None => format!("NVML GPU {}", g.index),
    }
}

impl EnergySampler {
    /// Starts the sampler thread.
    ///
    /// # Errors
    /// When the thread cannot be created (the message says so).
    pub(crate) fn start(sources: Sources, interval: Duration) -> Result<EnergySampler, String> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            writer: Mutex::new(None),
        });
        let Sources {
            open,
            clock,
            clock_pair,
            inventory,
            by_index,
            write,
        } = sources;
        *lock(&shared.writer) = Some(write);
        let (tx, done) = mpsc::channel();
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("gpumeter-energy".to_string())
            .spawn(move || {
                let body = AssertUnwindSafe(|| {
                    let mut run = Run {
                        shared: &s,
                        clock,
                        clock_pair,
                        inventory,
                    };
                    run.run(open, by_index, interval);
                });
                if let Err(p) = catch_unwind(body) {
                    s.problem(format!(
                        "energy sampling stopped by a panic: {}",
                        panic_message(p.as_ref())
                    ));
                }
                let _ = tx.send(());
            })
            .map_err(|e| format!("no energy samples: the sampler thread cannot start: {e}"))?;
        Ok(EnergySampler {
            shared,
            done,
            thread: Some(thread),
        })
    }

    /// Asks for the last reading and waits at most `timeout` for it; then closes the sampler
    /// (nothing more is written, even by a thread that answers late) and returns what is
    /// left to resolve with the final inventory.
    pub(crate) fn stop(mut self, timeout: Duration) -> Leftover {
        lock(&self.shared.state).stop = true;
        self.shared.wake.notify_all();
        let finished = match self.done.recv_timeout(timeout) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => true,
            Err(mpsc::RecvTimeoutError::Timeout) => false,
        };
        if finished {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
        // Closed before anything else: a late thread writes nothing.
        drop(lock(&self.shared.writer).take());
        let mut st = lock(&self.shared.state);
        if !finished {
            st.problem(format!(
                "the energy sampler did not answer within {timeout:?} (NVML is slow or wedged): \
                 the last energy reading is missing"
            ));
        }
        Leftover {
            gpus: std::mem::take(&mut st.gpus),
            by_index: st.by_index,
            targets: std::mem::take(&mut st.targets),
            pending: std::mem::take(&mut st.pending),
            thinned: std::mem::take(&mut st.thinned),
            written: st.written,
            problems: std::mem::take(&mut st.problems),
            more_problems: st.more_problems,
        }
        // A thread that did not answer is left to finish on its own (it holds its own
        // reference to the shared state and writes nothing more).
    }
}

/// The sampler thread's side.
struct Run<'a> {
    shared: &'a Shared,
    clock: Box<dyn Fn() -> Option<u64> + Send>,
    clock_pair: ClockPair,
    inventory: Box<dyn FnMut() -> Option<Vec<GmrDevice>> + Send>,
}

impl Run<'_> {
    fn run(&mut self, open: Open, by_index: fn(bool) -> bool, interval: Duration) {
        let telemetry = match open() {
            Ok(t) => t,
            Err(e) => return self.shared.problem(format!("no energy samples: {e}")),
        };
        let gpus = match telemetry.gpus() {
            Ok(g) if g.is_empty() => {
                return self
                    .shared
                    .problem("no energy samples: NVML lists no GPU".to_string())
            }
            Ok(g) => g,
            Err(e) => return self.shared.problem(format!("no energy samples: {e}")),
        };
        {
            let mut st = lock(&self.shared.state);
            st.by_index = by_index(gpus.len() == 1);
            for g in &gpus {
                st.targets.insert(g.index, Target::Unknown);
            }
            st.gpus = gpus.clone();
        }
        let mut first = true;
        loop {
            let stopping = lock(&self.shared.state).stop;
            if !first && !stopping {
                self.resolve();
            }
            first = false;
            for g in &gpus {
                self.sample(telemetry.as_ref(), g);
            }
            if stopping {
                break;
            }
            // A stop during the wait: one more turn takes the last reading, then ends.
            self.shared.wait(interval);
        }
    }

    /// Asks for the inventory while some GPU's ordinal is unknown; writes what it resolves.
    fn resolve(&mut self) {
        let (unknown, gpus, by_index) = {
            let st = lock(&self.shared.state);
            let unknown = st.targets.values().any(|t| *t == Target::Unknown);
            (unknown, st.gpus.clone(), st.by_index)
        };
        if !unknown {
            return;
        }
        let Some(devices) = (self.inventory)().filter(|d| !d.is_empty()) else {
            return;
        };
        let map = ordinals(&devices, &gpus, by_index);
        let mut ready = Vec::new();
        {
            let mut st = lock(&self.shared.state);
            for g in &gpus {
                if st.targets.get(&g.index) != Some(&Target::Unknown) {
                    continue;
                }
                let held = st.pending.remove(&g.index).unwrap_or_default();
                match map.get(&g.index) {
                    Some(&ordinal) => {
                        st.targets.insert(g.index, Target::Ordinal(ordinal));
                        ready.extend(held.into_iter().map(|(timestamp_ns, energy_mj)| {
                            EnergySample {
                                device_id: ordinal,
                                timestamp_ns,
                                energy_mj,
                            }
                        }));
                    }
                    None => {
                        st.targets.insert(g.index, Target::Unmatched);
                    }
                }
            }
        }
        for s in &ready {
            self.shared.write(s);
        }
    }

    /// One reading of `g`, written, held back or skipped according to its target.
    fn sample(&self, telemetry: &dyn Telemetry, g: &Gpu) {
        let target = lock(&self.shared.state).targets.get(&g.index).copied();
        if !matches!(target, Some(Target::Unknown | Target::Ordinal(_))) {
            return;
        }
        let before = (self.clock)();
        let reading = telemetry.energy(g.index);
        let after = (self.clock)();
        let reading = match reading {
            Ok(r) => r,
            Err(e @ TelemetryError::NotSupported { .. }) => {
                let mut st = lock(&self.shared.state);
                st.targets.insert(g.index, Target::Unsupported);
                st.pending.remove(&g.index);
                st.problem(format!("no energy samples for {}: {e}", describe(g)));
                return;
            }
            Err(e) => {
                return self
                    .shared
                    .problem(format!("energy of {} not read: {e}", describe(g)))
            }
        };
        let timestamp_ns = match (before, after) {
            (Some(b), Some(a)) if a >= b => b + (a - b) / 2,
            _ => wall_to_cupti(reading.timestamp_ns, &self.clock_pair),
        };
        let sample = {
            let mut st = lock(&self.shared.state);
            if st.last.get(&g.index).is_some_and(|&t| timestamp_ns <= t) {
                return;
            }
            st.last.insert(g.index, timestamp_ns);
            match st.targets.get(&g.index).copied() {
                Some(Target::Ordinal(device_id)) => EnergySample {
                    device_id,
                    timestamp_ns,
                    energy_mj: reading.energy_mj,
                },
                Some(Target::Unknown) => {
                    let held = st.pending.entry(g.index).or_default();
                    if held.len() < MAX_PENDING {
                        held.push((timestamp_ns, reading.energy_mj));
                    } else {
                        if let Some(last) = held.last_mut() {
                            *last = (timestamp_ns, reading.energy_mj);
                        }
                        *st.thinned.entry(g.index).or_insert(0) += 1;
                    }
                    return;
                }
                _ => return,
            }
        };
        self.shared.write(&sample);
    }
}

/// What a stopped sampler leaves: readings whose ordinal was not known yet, and problems.
#[derive(Debug, Default)]
pub(crate) struct Leftover {
    gpus: Vec<Gpu>,
    by_index: bool,
    targets: BTreeMap<u32, Target>,
    pending: BTreeMap<u32, Vec<(u64, u64)>>,
    thinned: BTreeMap<u32, u64>,
    written: u64,
    problems: Vec<(String, u64)>,
    more_problems: u64,
}

/// The samples still to write at stop, and the stop report's warnings.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// Held-back readings under their CUDA ordinals, in time order per device.
    pub(crate) samples: Vec<EnergySample>,
    /// Frames the sampler wrote while running.
    pub(crate) written: u64,
    /// Warnings for the stop report.
    pub(crate) warnings: Vec<String>,
}

impl Leftover {
    /// Resolves the held-back readings with the final inventory `devices` (the header's) and
    /// words the warnings.
    pub(crate) fn resolve(self, devices: &[GmrDevice]) -> Resolved {
        let map = ordinals(devices, &self.gpus, self.by_index);
        let mut out = Resolved {
            written: self.written,
            ..Resolved::default()
        };
        let mut unmatched = Vec::new();
        let mut mig = Vec::new();
        for g in &self.gpus {
            if self.targets.get(&g.index) == Some(&Target::Unsupported) {
                continue;
            }
            let resolved = match self.targets.get(&g.index) {
                Some(Target::Ordinal(o)) => Some(*o),
                Some(Target::Unknown) => map.get(&g.index).copied(),
                _ => None,
            };
            match resolved {
                Some(ordinal) => {
                    if let Some(held) = self.pending.get(&g.index) {
                        out.samples
                            .extend(held.iter().map(|&(timestamp_ns, energy_mj)| EnergySample {
                                device_id: ordinal,
                                timestamp_ns,
                                energy_mj,
                            }));
                    }
                    if let Some(n) = self.thinned.get(&g.index) {
                        out.warnings.push(format!(
                            "{} readings of {} taken before CUDA ordinal {ordinal} was known \
                             were thinned out (at most {MAX_PENDING} are held back)",
                            n,
                            describe(g)
                        ));
                    }
                }
                None if g.mig => mig.push(describe(g)),
                None => unmatched.push(describe(g)),
            }
        }
        if !unmatched.is_empty() {
            out.warnings.push(format!(
                "energy not recorded for {}: not a CUDA device of this process (no inventory \
                 entry matches it)",
                unmatched.join(", ")
            ));
        }
        if !mig.is_empty() {
            out.warnings.push(format!(
                "energy not recorded for {}: in MIG mode, its counter covers the whole GPU, \
                 not one CUDA device (MIG instance)",
                mig.join(", ")
            ));
        }
        for (msg, n) in self.problems {
            out.warnings.push(if n > 1 {
                format!("{msg} ({n} times)")
            } else {
                msg
            });
        }
        if self.more_problems > 0 {
            out.warnings.push(format!(
                "… and {} more energy-sampling problems",
                self.more_problems
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests;
