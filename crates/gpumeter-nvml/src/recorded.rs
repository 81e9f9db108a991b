//! [`Recorded`]: a [`Telemetry`] that replays given GPUs, energy samples and process listings.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::{EnergyReading, Gpu, GpuProcess, Telemetry, TelemetryError};

/// Per GPU, what is queued for it.
type Queues<T> = BTreeMap<u32, VecDeque<Result<T, TelemetryError>>>;

/// A [`Telemetry`] that replays what it was given: for tests of code that samples NVML, and for
/// replays of recorded readings.
///
/// [`Telemetry::gpus`] returns the GPUs given to [`Recorded::new`] (or the error of
/// [`Recorded::unavailable`]). [`Telemetry::energy`] returns, for each GPU, the readings and
/// errors queued for it in order, one per call; then [`TelemetryError::Exhausted`].
/// [`Telemetry::processes`] returns, for each GPU, the listings (and errors) queued for it in
/// order, one per call, and then the last one again at every later call (processes that keep
/// running); a GPU with no listing queued has no processes (an empty listing). An index not
/// among the GPUs is [`TelemetryError::NoDevice`]. Every call first sleeps the delay of
/// [`Recorded::with_delay`] (none by default), to play a slow or wedged driver.
///
/// ```
/// use gpumeter_nvml::{Gpu, GpuProcess, Recorded, Telemetry, TelemetryError};
///
/// let gpu = Gpu { index: 0, uuid: Some("GPU-0000".into()), ..Gpu::default() };
/// let nvml = Recorded::new(vec![gpu]).with_energy(0, [(1_000, 50), (2_000, 75)]);
/// assert_eq!(nvml.energy(0)?.energy_mj, 50);
/// assert_eq!(nvml.energy(0)?.timestamp_ns, 2_000);
/// assert!(matches!(nvml.energy(0), Err(TelemetryError::Exhausted { device: 0 })));
///
/// // Process 4242 holds GPU 0 for two listings, then 4243 alone, for good.
/// let p = |pid, bytes| GpuProcess { pid, used_memory_bytes: Some(bytes) };
/// let nvml = nvml.with_processes(0, [vec![p(4242, 1 << 20)], vec![p(4242, 2 << 20)], vec![p(4243, 0)]]);
/// assert_eq!(nvml.processes(0)?, vec![p(4242, 1 << 20)]);
/// assert_eq!(nvml.processes(0)?, vec![p(4242, 2 << 20)]);
/// assert_eq!(nvml.processes(0)?, vec![p(4243, 0)]);
/// assert_eq!(nvml.processes(0)?, vec![p(4243, 0)]);
/// # Ok::<(), TelemetryError>(())
/// ```
#[derive(Debug)]
pub struct Recorded {
    gpus: Result<Vec<Gpu>, TelemetryError>,
    samples: Mutex<Queues<EnergyReading>>,
    listings: Mutex<Queues<Vec<GpuProcess>>>,
    delay: Duration,
}

impl Recorded {
    /// Telemetry listing `gpus` (by their [`Gpu::index`]), with no energy samples yet.
    pub fn new(gpus: Vec<Gpu>) -> Recorded {
        Recorded {
            gpus: Ok(gpus),
            samples: Mutex::new(BTreeMap::new()),
            listings: Mutex::new(BTreeMap::new()),
            delay: Duration::ZERO,
        }
    }

    /// Telemetry whose every call fails with `error` (e.g. [`TelemetryError::Unavailable`]: a
    /// host without NVML).
    pub fn unavailable(error: TelemetryError) -> Recorded {
        Recorded {
            gpus: Err(error),
            ..Recorded::new(Vec::new())
        }
    }

    /// Queues readings for GPU `index`: `(timestamp_ns, energy_mj)` pairs, ns since the Unix
    /// epoch and mJ of the cumulative counter, returned in this order.
    #[must_use]
    pub fn with_energy(self, index: u32, samples: impl IntoIterator<Item = (u64, u64)>) -> Self {
        for (timestamp_ns, energy_mj) in samples {
            self.push(EnergyReading {
                index,
                timestamp_ns,
                energy_mj,
            });
        }
        self
    }

    /// Queues process listings for GPU `index`, returned in this order by
    /// [`Telemetry::processes`], one per call; the last one is returned again at every later
    /// call. Each listing is that call's whole answer: the processes with a compute context on
    /// the GPU then (host process ids, used memory in bytes).
    #[must_use]
    pub fn with_processes(
        self,
        index: u32,
        listings: impl IntoIterator<Item = Vec<GpuProcess>>,
    ) -> Self {
        for listing in listings {
            self.push_processes(index, listing);
        }
        self
    }

    /// Queues one process listing for GPU `index`, after those already queued (see
    /// [`Recorded::with_processes`]).
    pub fn push_processes(&self, index: u32, listing: Vec<GpuProcess>) {
        lock(&self.listings)
            .entry(index)
            .or_default()
            .push_back(Ok(listing));
    }

    /// Queues an error for GPU `index`'s process listing: the call that reaches it fails with
    /// `error` (and, when it is the last one queued, every later call too).
    pub fn push_processes_error(&self, index: u32, error: TelemetryError) {
        lock(&self.listings)
            .entry(index)
            .or_default()
            .push_back(Err(error));
    }

    /// Sleeps `delay` at the start of every call.
    #[must_use]
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Queues one reading for GPU `reading.index`, after those already queued.
    pub fn push(&self, reading: EnergyReading) {
        self.queue()
            .entry(reading.index)
            .or_default()
            .push_back(Ok(reading));
    }

    /// Queues an error for GPU `index`: the call that reaches it fails with `error`.
    pub fn push_error(&self, index: u32, error: TelemetryError) {
        self.queue().entry(index).or_default().push_back(Err(error));
    }

    /// Readings and errors still queued for GPU `index`.
    pub fn remaining(&self, index: u32) -> usize {
        self.queue().get(&index).map_or(0, VecDeque::len)
    }

    fn queue(&self) -> MutexGuard<'_, Queues<EnergyReading>> {
        lock(&self.samples)
    }

    /// The GPUs, or the error of [`Recorded::unavailable`]; [`TelemetryError::NoDevice`] when
    /// `index` is not one of them.
    fn known(&self, index: u32) -> Result<(), TelemetryError> {
        let gpus = self.gpus.as_ref().map_err(Clone::clone)?;
        if gpus.iter().any(|g| g.index == index) {
            Ok(())
        } else {
            Err(TelemetryError::NoDevice {
                call: "nvmlDeviceGetHandleByIndex_v2",
                device: index,
            })
        }
    }

    fn pause(&self) {
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
    }
}

impl Telemetry for Recorded {
    fn gpus(&self) -> Result<Vec<Gpu>, TelemetryError> {
        self.pause();
        self.gpus.clone()
    }

    fn energy(&self, index: u32) -> Result<EnergyReading, TelemetryError> {
        self.pause();
        self.known(index)?;
        self.queue()
            .get_mut(&index)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Err(TelemetryError::Exhausted { device: index }))
    }

    fn processes(&self, index: u32) -> Result<Vec<GpuProcess>, TelemetryError> {
        self.pause();
        self.known(index)?;
        let mut listings = lock(&self.listings);
        let Some(queue) = listings.get_mut(&index) else {
            return Ok(Vec::new());
        };
        // The last listing stays: it is the answer from then on.
        if queue.len() > 1 {
            queue.pop_front().unwrap_or(Ok(Vec::new()))
        } else {
            queue.front().cloned().unwrap_or(Ok(Vec::new()))
        }
    }
}

/// Locks `m`, also after a panic of another holder (the queues stay usable).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
