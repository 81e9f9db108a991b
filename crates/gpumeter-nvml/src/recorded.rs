//! [`Recorded`]: a [`Telemetry`] that replays given GPUs and energy samples.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::{EnergyReading, Gpu, Telemetry, TelemetryError};

/// A [`Telemetry`] that replays what it was given: for tests of code that samples NVML, and for
/// replays of recorded readings.
///
/// [`Telemetry::gpus`] returns the GPUs given to [`Recorded::new`] (or the error of
/// [`Recorded::unavailable`]). [`Telemetry::energy`] returns, for each GPU, the readings and
/// errors queued for it in order, one per call; then [`TelemetryError::Exhausted`]. An index
/// not among the GPUs is [`TelemetryError::NoDevice`]. Every call first sleeps the delay of
/// [`Recorded::with_delay`] (none by default), to play a slow or wedged driver.
///
/// ```
/// use gpumeter_nvml::{Gpu, Recorded, Telemetry, TelemetryError};
///
/// let gpu = Gpu { index: 0, uuid: Some("GPU-0000".into()), ..Gpu::default() };
/// let nvml = Recorded::new(vec![gpu]).with_energy(0, [(1_000, 50), (2_000, 75)]);
/// assert_eq!(nvml.energy(0)?.energy_mj, 50);
/// assert_eq!(nvml.energy(0)?.timestamp_ns, 2_000);
/// assert!(matches!(nvml.energy(0), Err(TelemetryError::Exhausted { device: 0 })));
/// # Ok::<(), TelemetryError>(())
/// ```
#[derive(Debug)]
pub struct Recorded {
    gpus: Result<Vec<Gpu>, TelemetryError>,
    samples: Mutex<BTreeMap<u32, VecDeque<Result<EnergyReading, TelemetryError>>>>,
    delay: Duration,
}

impl Recorded {
    /// Telemetry listing `gpus` (by their [`Gpu::index`]), with no energy samples yet.
    pub fn new(gpus: Vec<Gpu>) -> Recorded {
        Recorded {
            gpus: Ok(gpus),
            samples: Mutex::new(BTreeMap::new()),
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

    fn queue(
        &self,
    ) -> MutexGuard<'_, BTreeMap<u32, VecDeque<Result<EnergyReading, TelemetryError>>>> {
        self.samples.lock().unwrap_or_else(PoisonError::into_inner)
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
        let gpus = self.gpus.as_ref().map_err(Clone::clone)?;
        if !gpus.iter().any(|g| g.index == index) {
            return Err(TelemetryError::NoDevice {
                call: "nvmlDeviceGetHandleByIndex_v2",
                device: index,
            });
        }
        self.queue()
            .get_mut(&index)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Err(TelemetryError::Exhausted { device: index }))
    }
}
