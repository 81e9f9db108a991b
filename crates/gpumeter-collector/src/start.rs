//! The start of a collection ([`Collector::start`]), step by step: check the configuration
//! and the libcupti's APIs, subscribe, begin the sink with the start header, register the
//! buffer callbacks, enable the activity kinds, then turn on each optional part (instrumented
//! mode, PM sampling, FLOP counters, energy). A failed step undoes the ones before it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cupti_sys::{Cupti, CuptiError};
use gpumeter_cupti::kind::ActivityKind;
use gpumeter_cupti::layout::ApiVersion;
use gpumeter_recording::gmr::{ClockPair, GmrHeader};

use crate::completion::Session;
use crate::config::{validate, CollectorConfig};
use crate::error::CollectorError;
use crate::flops::{FlopsConfig, FlopsError};
use crate::live::{live, Live, RunningGuard, LIVE};
use crate::pmsampling::{PmSamplingConfig, PmSamplingError};
use crate::sink::CompletionSink;
use crate::{callbacks, driver, energy, ffi, flops, nvml, pmsampling, sass, Collector};

/// [`Collector::start`]: see its docs.
pub(crate) fn start(
    config: CollectorConfig,
    sink: Box<dyn CompletionSink>,
) -> Result<Collector, CollectorError> {
    validate(&config)?;
    let guard = RunningGuard::claim()?;
    let (live, api) = live(&config)?;
    let cupti = live.cupti;
    check_apis(cupti, &config)?;
    live.core.pool().set_size(config.buffer_size);
    let subscriber = callbacks::subscribe(cupti).map_err(CollectorError::from_cupti)?;
    let header = start_header(cupti, api, &config);
    let mut collector = Collector {
        cupti,
        api,
        header: header.clone(),
        enabled: Vec::new(),
        subscriber: Some(subscriber),
        warnings: Vec::new(),
        driver_inventory: config.driver_inventory,
        nvml_inventory: config.nvml_inventory,
        energy: None,
        instructions: false,
        pm_sampling: false,
        flops: false,
        running: false,
    };
    if let Err(e) = collector.begin(live, &config, header, sink) {
        collector.undo();
        return Err(e);
    }
    if config.energy {
        collector.start_energy(live, config.energy_interval);
    }
    collector.running = true;
    guard.defuse();
    Ok(collector)
}

/// Fails when an optional part is asked for and the libcupti lacks its API.
fn check_apis(cupti: &Cupti, config: &CollectorConfig) -> Result<(), CollectorError> {
    if config.instructions {
        cupti
            .sass_metrics_available()
            .map_err(CollectorError::InstructionsNotSupported)?;
    }
    if config.pm_sampling.is_some() {
        cupti
            .pm_sampling_available()
            .map_err(|e| CollectorError::PmSampling(PmSamplingError::NotAvailable(e)))?;
    }
    if config.flops.is_some() {
        cupti
            .range_profiler_available()
            .map_err(|e| CollectorError::Flops(FlopsError::NotAvailable(e)))?;
    }
    Ok(())
}

/// The header the sink begins with: API version, host, clock pair, process, producer, labels.
fn start_header(cupti: &Cupti, api: ApiVersion, config: &CollectorConfig) -> GmrHeader {
    let clock = ClockPair {
        cupti_timestamp_ns: cupti.timestamp().unwrap_or(0),
        unix_time_ns: now_unix_ns(),
    };
    GmrHeader {
        cupti_api_version: api.cupti_api_version(),
        host: driver::host_name(),
        clock,
        process_id: std::process::id(),
        devices: Vec::new(),
        producer: config.producer.clone(),
        instrumented: config.instructions,
        labels: config.labels.clone(),
    }
}

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

impl Collector {
    /// The steps of a start after the subscription, up to energy: the sink begins, the buffer
    /// callbacks are registered, the kinds enabled and the optional parts turned on. On an
    /// error the caller undoes what was done ([`Collector::undo`]).
    fn begin(
        &mut self,
        live: &'static Live,
        config: &CollectorConfig,
        header: GmrHeader,
        sink: Box<dyn CompletionSink>,
    ) -> Result<(), CollectorError> {
        live.core
            .begin(Session::new(self.api, header, sink))
            .map_err(CollectorError::Sink)?;
        callbacks::register_callbacks(self.cupti).map_err(CollectorError::from_cupti)?;
        self.enable_kinds(&config.kinds, config.instructions)?;
        if config.flush_period_ms > 0 {
            if let Err(e) = ffi::flush_period(self.cupti, config.flush_period_ms) {
                self.warnings.push(format!(
                    "flush period of {} ms not set: {e}",
                    config.flush_period_ms
                ));
            }
        }
        if config.instructions {
            self.start_instructions()
                .map_err(CollectorError::InstructionsNotSupported)?;
        }
        if let Some(pm) = &config.pm_sampling {
            self.start_pm_sampling(live, pm)?;
        }
        if let Some(f) = &config.flops {
            self.start_flops(live, f)?;
        }
        Ok(())
    }

    /// Enables `kinds` in order; a failure is a warning, except for CONCURRENT_KERNEL.
    fn enable_kinds(
        &mut self,
        kinds: &[ActivityKind],
        instructions: bool,
    ) -> Result<(), CollectorError> {
        for &configured in kinds {
            // Instrumented mode records kernels with KERNEL, not CONCURRENT_KERNEL: measured
            // on an H200 with CUPTI 13.0 (scripts/gpu-smoke.sh, docs/COLLECTION.md), SASS
            // metric values are all zero while CONCURRENT_KERNEL is enabled and right with
            // KERNEL. KERNEL serializes kernels, which instrumented mode does anyway.
            let kind = if instructions && configured == ActivityKind::CONCURRENT_KERNEL {
                ActivityKind::KERNEL
            } else {
                configured
            };
            match self.cupti.activity_enable(kind.0) {
                Ok(()) => self.enabled.push(kind),
                Err(e) if configured == ActivityKind::CONCURRENT_KERNEL => {
                    return Err(CollectorError::from_cupti(e));
                }
                Err(e) => self
                    .warnings
                    .push(format!("activity kind {kind} not enabled: {e}")),
            }
        }
        Ok(())
    }

    /// Starts the energy sampler ([`CollectorConfig::energy`]); a failure is a warning.
    fn start_energy(&mut self, live: &'static Live, interval: Duration) {
        let cupti = self.cupti;
        let driver_inventory = self.driver_inventory;
        let sources = energy::Sources {
            open: Box::new(|| {
                gpumeter_nvml::Nvml::init()
                    .map(|n| Box::new(n) as Box<dyn gpumeter_nvml::Telemetry>)
            }),
            clock: Box::new(move || cupti.timestamp().ok()),
            clock_pair: self.header.clock.clone(),
            // The CUDA driver's devices, once the program has initialised it (never loads it).
            inventory: Box::new(move || {
                driver_inventory
                    .then(driver::driver_inventory)
                    .and_then(Result::ok)
            }),
            by_index: nvml::index_is_ordinal,
            write: Box::new(move |s| live.core.energy(s)),
        };
        match energy::EnergySampler::start(sources, interval) {
            Ok(s) => self.energy = Some(s),
            Err(e) => self.warnings.push(e),
        }
    }

    /// Turns PM sampling on ([`pmsampling`]): the decode thread, then the context creation and
    /// destruction callbacks that set devices up and release them.
    fn start_pm_sampling(
        &mut self,
        live: &'static Live,
        config: &PmSamplingConfig,
    ) -> Result<(), CollectorError> {
        let Some(subscriber) = self.subscriber else {
            return Ok(());
        };
        pmsampling::begin(
            self.cupti,
            config,
            Box::new(move |frame| live.core.pm_samples(frame)),
        )?;
        self.pm_sampling = true;
        for cbid in [
            ffi::CBID_CONTEXT_CREATED,
            ffi::CBID_CONTEXT_DESTROY_STARTING,
        ] {
            ffi::enable_callback(self.cupti, subscriber, true, ffi::DOMAIN_RESOURCE, cbid)
                .map_err(CollectorError::from_cupti)?;
        }
        Ok(())
    }

    /// Turns FLOP counting on ([`flops`]): the launch callbacks (which note launches in
    /// order) and the context creation and destruction callbacks (which set the range
    /// profiler up and decode it). The launch callbacks also track nesting ([`sass`]), whether
    /// or not instrumented mode is on.
    fn start_flops(
        &mut self,
        live: &'static Live,
        config: &FlopsConfig,
    ) -> Result<(), CollectorError> {
        let Some(subscriber) = self.subscriber else {
            return Ok(());
        };
        flops::begin(
            self.cupti,
            config,
            ffi::graph_launch_callback_ids(self.cupti),
            Box::new(move |frame| live.core.op_counts(frame)),
        )?;
        self.flops = true;
        let mut ids = ffi::launch_callback_ids(self.cupti);
        ids.push((ffi::DOMAIN_RESOURCE, ffi::CBID_CONTEXT_CREATED));
        ids.push((ffi::DOMAIN_RESOURCE, ffi::CBID_CONTEXT_DESTROY_STARTING));
        for (domain, cbid) in ids {
            ffi::enable_callback(self.cupti, subscriber, true, domain, cbid)
                .map_err(CollectorError::from_cupti)?;
        }
        Ok(())
    }

    /// Turns instrumented mode on ([`sass`]): the launch and context-destruction callbacks.
    fn start_instructions(&mut self) -> Result<(), CuptiError> {
        let Some(subscriber) = self.subscriber else {
            return Ok(());
        };
        sass::begin();
        self.instructions = true;
        let mut ids = ffi::launch_callback_ids(self.cupti);
        ids.push((ffi::DOMAIN_RESOURCE, ffi::CBID_CONTEXT_DESTROY_STARTING));
        for (domain, cbid) in ids {
            ffi::enable_callback(self.cupti, subscriber, true, domain, cbid)?;
        }
        Ok(())
    }

    /// Undoes a partial start: disables what was enabled, aborts the sink, unsubscribes.
    fn undo(&mut self) {
        if std::mem::take(&mut self.flops) {
            let _ = flops::end();
        }
        if std::mem::take(&mut self.pm_sampling) {
            let _ = pmsampling::end();
        }
        if std::mem::take(&mut self.instructions) {
            let _ = sass::end(self.cupti);
        }
        for kind in std::mem::take(&mut self.enabled) {
            let _ = self.cupti.activity_disable(kind.0);
        }
        if let Some(live) = LIVE.get() {
            if let Some(mut s) = live.core.end() {
                s.sink.abort();
            }
        }
        if let Some(h) = self.subscriber.take() {
            let _ = ffi::unsubscribe(self.cupti, h);
        }
    }
}
