//! FLOP counters: per kernel launch, CUPTI's SASS op counters
//! (`smsp__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum`) and the chip's
//! tensor-path operation counters (`sm__ops_path_tensor_src_*.sum`), collected with CUPTI's
//! range profiler (`cupti_range_profiler.h`, CUDA 12.6+) and written as `.gmr`
//! operation-counters frames (type 10, [`OpCounters`]) joined to the launches by correlation
//! id ([`CollectorConfig::flops`](super::CollectorConfig::flops), `gpumeter record --flops`).
//!
//! # Flow (docs/COLLECTION.md, "FLOP counters (range profiler)")
//!
//! Per CUDA context, on its creation: the chip name, a profiler host object of type range
//! profiler, the metric selection ([`select_flops_metrics`]: those of the nine SASS op counters
//! the chip offers and every tensor-path total it offers), the config image and its pass count
//! ([`FlopsSelection::passes`]), `cuptiRangeProfilerEnable` on the context, a counter-data
//! image for [`FlopsConfig::ranges_per_pass`] ranges, `cuptiRangeProfilerSetConfig` with
//! **auto range** (one range per kernel launch) and **kernel replay** (CUPTI runs each kernel
//! once per pass, saving and restoring the memory it writes), and `cuptiRangeProfilerStart`.
//! Each kernel-launch API call of the context (callback API, in call order) appends its
//! correlation id to the context's [`LaunchOrder`]. When the image holds
//! [`FlopsConfig::ranges_per_pass`] ranges, and when the context is destroyed or the collector
//! stops: `cuptiRangeProfilerStop`, `cuptiRangeProfilerDecodeData`, the number of ranges
//! (`cuptiRangeProfilerGetCounterDataInfo`), per range the metric values
//! (`cuptiProfilerHostEvaluateToGpuValues`), ranges paired with the launches in order
//! ([`LaunchOrder::pair`]), one frame written, the image re-initialised and the profiler started
//! again.
//!
//! Only the host side (metric lists, config images, pass counts) answers without a GPU: it is
//! tested against the real libcupti 12.8. The target side (`cuptiRangeProfiler*`) needs a GPU
//! and was written from the CUPTI 12.8 header's documentation only; `scripts/gpu-flops/` is the
//! check that runs it.
//!
//! # What is never silent
//!
//! * Ranges CUPTI dropped (`numOfRangeDropped`), and launches left without a range, leave
//!   their kernels without counts (the meters are then not meterable on the device, never a
//!   guess), counted in [`FlopsTally::launches_without_counts`].
//! * A value CUPTI evaluates to NaN, ±∞, a negative number or more than `u64::MAX` is left out
//!   of its kernel's counters (its meter is then partial, a report warning) and counted in
//!   [`FlopsTally::unusable_values`].
//! * Set-up failures are typed ([`FlopsError`]) errors of the stop report.

mod selection;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use cupti_sys::{Cupti, CuptiError, PmHost};

pub use self::selection::{
    is_tensor_path_total, select_flops_metrics, FlopsSelection, PassProbe, RangeHostProbe,
};
use super::event::ApiCall;
use super::pmsampling::to_count;
use gpumeter_recording::gmr::{KernelOpCounters, OpCounterValue, OpCounters};

/// Allowed [`FlopsConfig::ranges_per_pass`]: 1 to 65 536 kernel launches per counter-data
/// image.
pub const FLOPS_RANGES_RANGE: std::ops::RangeInclusive<usize> = 1..=65_536;
/// Default [`FlopsConfig::ranges_per_pass`]: 1 024 launches between decodes.
pub const DEFAULT_FLOPS_RANGES: usize = 1024;

/// FLOP-counter settings ([`CollectorConfig::flops`](super::CollectorConfig::flops)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlopsConfig {
    /// Kernel launches (auto ranges) one counter-data image holds before it is decoded and
    /// written (`maxRangesPerPass`), [`FLOPS_RANGES_RANGE`]; default [`DEFAULT_FLOPS_RANGES`].
    /// Larger holds more launches between decodes (each decode stops the profiler on the
    /// application's thread) at the cost of host memory for the image.
    pub ranges_per_pass: usize,
}

impl Default for FlopsConfig {
    fn default() -> Self {
        FlopsConfig {
            ranges_per_pass: DEFAULT_FLOPS_RANGES,
        }
    }
}

impl FlopsConfig {
    /// Checks the settings against their ranges.
    ///
    /// # Errors
    /// A message naming the field and its allowed range.
    pub fn validate(&self) -> Result<(), String> {
        if !FLOPS_RANGES_RANGE.contains(&self.ranges_per_pass) {
            return Err(format!(
                "flops.ranges_per_pass is {}; allowed {} to {} kernel launches",
                self.ranges_per_pass,
                FLOPS_RANGES_RANGE.start(),
                FLOPS_RANGES_RANGE.end()
            ));
        }
        Ok(())
    }
}

/// Why FLOP counters could not be collected (at start, or for one context).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FlopsError {
    /// The libcupti has no range profiler or profiler host API (CUDA 12.6 and newer have it).
    #[error(
        "FLOP counters need CUPTI's range profiler and profiler host APIs (CUDA 12.6 and \
         newer): {0}"
    )]
    NotAvailable(#[source] CuptiError),
    /// CUPTI refused for lack of permission (`CUPTI_ERROR_INSUFFICIENT_PRIVILEGES`).
    #[error(
        "device {device}: GPU performance counters are restricted to administrators \
         ({detail}); run as root, or allow all users by loading the nvidia module with \
         NVreg_RestrictProfilingToAdminUsers=0"
    )]
    InsufficientPrivileges {
        /// The CUDA ordinal.
        device: u32,
        /// CUPTI's function, result and message.
        detail: String,
    },
    /// The GPU cannot be profiled (`CUPTI_ERROR_NOT_SUPPORTED`, or a chip the host API does
    /// not know).
    #[error("device {device} ({chip}): the range profiler is not supported: {detail}")]
    Unsupported {
        /// The CUDA ordinal.
        device: u32,
        /// The chip name, or `?` when not known yet.
        chip: String,
        /// CUPTI's function, result and message.
        detail: String,
    },
    /// The chip offers none of the FLOP counters.
    #[error(
        "device {device} ({chip}): the range profiler offers none of the FLOP counters \
         (smsp__sass_thread_inst_executed_op_{{d,f,h}}{{add,mul,fma}}_pred_on.sum, \
         sm__ops_path_tensor_src_*.sum)"
    )]
    NoMetrics {
        /// The CUDA ordinal.
        device: u32,
        /// The chip name.
        chip: String,
    },
    /// Another CUPTI failure.
    #[error("device {device}: FLOP counters: {error}")]
    Cupti {
        /// The CUDA ordinal.
        device: u32,
        /// The failure.
        #[source]
        error: CuptiError,
    },
}

impl FlopsError {
    /// The typed error of a failed CUPTI call while setting up device `device` (`chip` when
    /// known): a missing API, INSUFFICIENT_PRIVILEGES and NOT_SUPPORTED get their own
    /// variants.
    pub fn from_cupti(device: u32, chip: Option<&str>, error: CuptiError) -> FlopsError {
        use cupti_sys::v13_4 as h;
        match (&error, error.code()) {
            (CuptiError::NotSupported { .. } | CuptiError::MissingSymbol { .. }, _) => {
                FlopsError::NotAvailable(error)
            }
            (_, Some(h::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)) => {
                FlopsError::InsufficientPrivileges {
                    device,
                    detail: error.to_string(),
                }
            }
            (_, Some(h::CUPTI_ERROR_NOT_SUPPORTED)) => FlopsError::Unsupported {
                device,
                chip: chip.unwrap_or("?").to_string(),
                detail: error.to_string(),
            },
            _ => FlopsError::Cupti { device, error },
        }
    }
}

/// The correlation ids of one context's kernel launches not yet paired with a range, in call
/// order (auto ranges are made per kernel launch, in launch order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchOrder {
    pending: VecDeque<u32>,
}

/// What one decode of a context gave: per range, in range order, the values of
/// [`FlopsSelection::metrics`] in that order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DecodedRanges {
    /// The ranges' values.
    pub ranges: Vec<Vec<f64>>,
    /// Ranges CUPTI dropped (`numOfRangeDropped`: the image was full).
    pub dropped: usize,
}

/// Counts of what [`LaunchOrder::pair`] could not give a kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlopsTally {
    /// Kernel launches written with counters.
    pub launches_with_counts: u64,
    /// Kernel launches left without counters (ranges dropped, or missing).
    pub launches_without_counts: u64,
    /// Ranges beyond the launches recorded (no correlation id to join them to): not written.
    pub ranges_without_launch: u64,
    /// Decodes whose ranges (kept and dropped) did not add up to the launches noted: none of
    /// their launches got counters.
    pub mismatched_decodes: u64,
    /// Values CUPTI evaluated to something that is not a count (left out).
    pub unusable_values: u64,
}

impl LaunchOrder {
    /// Notes a kernel-launch API call (its correlation id; 0 is ignored).
    pub fn launch(&mut self, correlation_id: u32) {
        if correlation_id != 0 {
            self.pending.push_back(correlation_id);
        }
    }

    /// Launches noted and not yet paired.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Pairs a decode's ranges with the launches noted, in order, into one frame's entries:
    /// range *i* is launch *i*. That holds only when every launch made one range: the ranges
    /// kept and dropped must add up to the launches. When CUPTI dropped ranges (the image was
    /// full: the latest ones), the launches beyond the ranges kept get no counters. When the
    /// numbers disagree (a launch that made no range, e.g. one captured into a CUDA graph, or a
    /// range of a launch not seen), which range is whose is not known: no launch of the decode
    /// gets counters (their kernels' meters become not meterable, never a count of another
    /// kernel), counted in [`FlopsTally::mismatched_decodes`]. Every launch noted is consumed.
    pub fn pair(
        &mut self,
        metrics: &[&str],
        decoded: &DecodedRanges,
        tally: &mut FlopsTally,
    ) -> Vec<KernelOpCounters> {
        if decoded.ranges.len() + decoded.dropped != self.pending.len() {
            tally.mismatched_decodes += 1;
            tally.launches_without_counts += self.pending.len() as u64;
            tally.ranges_without_launch +=
                decoded.ranges.len().saturating_sub(self.pending.len()) as u64;
            self.pending.clear();
            return Vec::new();
        }
        let mut out = Vec::with_capacity(decoded.ranges.len());
        for values in &decoded.ranges {
            let Some(correlation_id) = self.pending.pop_front() else {
                tally.ranges_without_launch += 1;
                continue;
            };
            let mut counters = Vec::with_capacity(metrics.len());
            for (metric, &v) in metrics.iter().zip(values) {
                match to_count(v) {
                    Ok(value) => counters.push(OpCounterValue {
                        metric: (*metric).to_string(),
                        value,
                    }),
                    Err(_) => tally.unusable_values += 1,
                }
            }
            tally.launches_with_counts += 1;
            out.push(KernelOpCounters {
                correlation_id,
                counters,
            });
        }
        tally.launches_without_counts += self.pending.len() as u64;
        self.pending.clear();
        out
    }
}

/// One frame of a context's decode.
pub fn op_counters_frame(
    device_id: u32,
    context_id: u32,
    passes: usize,
    kernels: Vec<KernelOpCounters>,
) -> OpCounters {
    OpCounters {
        device_id,
        context_id,
        passes: u32::try_from(passes).unwrap_or(u32::MAX),
        kernels,
    }
}

/// Frames written through this: `true` when the sink took one.
pub(crate) type WriteOpCounts = Box<dyn FnMut(&OpCounters) -> bool + Send>;

/// What a session of FLOP counting did, for the stop report.
#[derive(Debug, Clone, Default)]
pub struct FlopsReport {
    /// Launch pairing and values ([`FlopsTally`]).
    pub tally: FlopsTally,
    /// Operation-counters frames handed to the sink.
    pub frames: u64,
    /// Kernel launches in frames the sink refused.
    pub unwritten_launches: u64,
    /// Contexts profiled: (CUDA ordinal, chip, metrics, passes).
    pub contexts: Vec<(u32, String)>,
    /// Set-up failures and failed calls (typed [`FlopsError`] messages).
    pub errors: Vec<String>,
    /// Warnings (tensor totals recorded but not metered, graph launches).
    pub warnings: Vec<String>,
}

/// One context profiled through CUPTI's range profiler.
struct ContextProfiler {
    device: u32,
    /// CUPTI's context id (`contextUid`), from the context's first launch callback.
    context_uid: u32,
    host: Option<PmHost>,
    profiler: Option<cupti_sys::RangeProfiler>,
    metrics: Vec<String>,
    passes: usize,
    config: Vec<u8>,
    /// The counter-data image CUPTI writes at decode: never moved while configured.
    image: Vec<u8>,
    order: LaunchOrder,
}

/// The process-wide FLOP-counting state behind the callbacks.
struct Global {
    cupti: &'static Cupti,
    config: FlopsConfig,
    write: WriteOpCounts,
    /// `cuptiProfilerInitialize` done.
    profiler: bool,
    /// Live contexts (by `CUcontext` address).
    contexts: std::collections::BTreeMap<usize, ContextProfiler>,
    report: FlopsReport,
}

static GLOBAL: std::sync::Mutex<Option<Global>> = std::sync::Mutex::new(None);
/// A session is running (the callbacks skip the lock otherwise).
pub(crate) static ACTIVE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Starts a session writing through `write`; `graph_cbids` are the `(domain, cbid)` of graph
/// launches (one correlation id, many kernels: their ranges are summed into one entry,
/// [`is_graph_launch`]).
///
/// # Errors
/// [`FlopsError::NotAvailable`] when the libcupti lacks the range profiler.
pub(crate) fn begin(
    cupti: &'static Cupti,
    config: &FlopsConfig,
    graph_cbids: Vec<(u32, u32)>,
    write: WriteOpCounts,
) -> Result<(), FlopsError> {
    cupti
        .range_profiler_available()
        .map_err(FlopsError::NotAvailable)?;
    let mut g = super::pool::lock(&GLOBAL);
    let profiler = g.as_ref().is_some_and(|g| g.profiler);
    *g = Some(Global {
        cupti,
        config: config.clone(),
        write,
        profiler,
        contexts: std::collections::BTreeMap::new(),
        report: FlopsReport::default(),
    });
    let _ = GRAPH_CBIDS.set(graph_cbids);
    ACTIVE.store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// The graph-launch callback ids of the first session (the same for every libcupti of a
/// process: CUPTI's callback ids are stable).
static GRAPH_CBIDS: std::sync::OnceLock<Vec<(u32, u32)>> = std::sync::OnceLock::new();

/// Whether `(domain, cbid)` is a graph launch.
pub(crate) fn is_graph_launch(domain: u32, cbid: u32) -> bool {
    GRAPH_CBIDS
        .get()
        .is_some_and(|ids| ids.contains(&(domain, cbid)))
}

/// Ends the session: every context decoded a last time and released; the report.
pub(crate) fn end() -> Option<FlopsReport> {
    ACTIVE.store(false, std::sync::atomic::Ordering::SeqCst);
    let mut g = super::pool::lock(&GLOBAL);
    let global = g.as_mut()?;
    let contexts = std::mem::take(&mut global.contexts);
    for (_, mut c) in contexts {
        global.flush(&mut c, true);
        global.release(c);
    }
    let mut report = std::mem::take(&mut global.report);
    let t = report.tally;
    if t.mismatched_decodes > 0 {
        report.warnings.push(format!(
            "FLOP counters: {} decodes had ranges that did not add up to their kernel launches \
             (a launch without a range, e.g. captured into a CUDA graph): their launches have no \
             counters",
            t.mismatched_decodes
        ));
    }
    if t.ranges_without_launch > 0 {
        report.warnings.push(format!(
            "FLOP counters: {} ranges had no kernel launch to join them to: not written",
            t.ranges_without_launch
        ));
    }
    // Keeps `profiler` (cuptiProfilerInitialize is once per process) for a later session.
    global.write = Box::new(|_| false);
    Some(report)
}

/// A context was created (CUPTI's resource callback, on the creating thread): its range
/// profiler set up and started.
pub(crate) fn on_context_created(ctx: usize, device: u32) {
    let mut g = super::pool::lock(&GLOBAL);
    let Some(global) = g.as_mut() else {
        return;
    };
    if global.contexts.contains_key(&ctx) {
        return;
    }
    match global.set_up(ctx, device) {
        Ok(c) => {
            global.report.contexts.push((
                device,
                format!(
                    "{} metrics, {} replay passes per kernel",
                    c.metrics.len(),
                    c.passes
                ),
            ));
            global.contexts.insert(ctx, c);
        }
        Err(e) => global.report.errors.push(e.to_string()),
    }
}

/// A context is being destroyed: its ranges decoded and written, its profiler released.
pub(crate) fn on_context_destroying(ctx: usize) {
    let mut g = super::pool::lock(&GLOBAL);
    let Some(global) = g.as_mut() else {
        return;
    };
    if let Some(mut c) = global.contexts.remove(&ctx) {
        global.flush(&mut c, true);
        global.release(c);
    }
}

/// The outermost kernel-launch API call's exit: its correlation id noted in launch order; a full image is decoded. A graph launch is decoded alone (before and after),
/// its ranges summed into its one correlation id.
pub(crate) fn on_launch_exit(call: ApiCall) {
    let (ctx, context_uid, correlation_id) = (call.context, call.context_uid, call.correlation_id);
    let mut g = super::pool::lock(&GLOBAL);
    let Some(global) = g.as_mut() else {
        return;
    };
    let Some(mut c) = global.contexts.remove(&ctx) else {
        return;
    };
    if c.context_uid == 0 {
        c.context_uid = context_uid;
    }
    if call.graph {
        // The launches before it are paired first; then every range since is the graph's.
        let before = c.order.pending();
        if before > 0 {
            global.flush(&mut c, false);
        }
        c.order.launch(correlation_id);
        global.flush_graph(&mut c);
    } else {
        c.order.launch(correlation_id);
        if c.order.pending() >= global.config.ranges_per_pass {
            global.flush(&mut c, false);
        }
    }
    global.contexts.insert(ctx, c);
}

impl Global {
    fn set_up(&mut self, ctx: usize, device: u32) -> Result<ContextProfiler, FlopsError> {
        let cupti = self.cupti;
        if !self.profiler {
            cupti
                .profiler_initialize()
                .map_err(|e| FlopsError::from_cupti(device, None, e))?;
            self.profiler = true;
        }
        let chip = cupti
            .device_chip_name(device)
            .map_err(|e| FlopsError::from_cupti(device, None, e))?;
        let err = |e: CuptiError| FlopsError::from_cupti(device, Some(&chip), e);
        let selection =
            select_flops_metrics(&mut RangeHostProbe::new(cupti, &chip, None)).map_err(&err)?;
        let metrics: Vec<String> = selection
            .metrics()
            .into_iter()
            .map(str::to_string)
            .collect();
        if metrics.is_empty() {
            return Err(FlopsError::NoMetrics { device, chip });
        }
        let not_metered = selection.tensor_not_metered();
        if !not_metered.is_empty() {
            self.report.warnings.push(format!(
                "device {device} ({chip}): tensor-path counters recorded but not added to \
                 tensor_ops: {}",
                not_metered.join(", ")
            ));
        }
        let names: Vec<&str> = metrics.iter().map(String::as_str).collect();
        let host = cupti.range_host_initialize(&chip, None).map_err(&err)?;
        let mut c = ContextProfiler {
            device,
            context_uid: 0,
            host: Some(host),
            profiler: None,
            metrics: metrics.clone(),
            passes: selection.passes,
            config: Vec::new(),
            image: Vec::new(),
            order: LaunchOrder::default(),
        };
        let r = (|| {
            let host = c.host.as_ref().ok_or_else(|| {
                err(CuptiError::InvalidBuffer {
                    reason: "no host object".into(),
                })
            })?;
            cupti.pm_host_add_metrics(host, &names).map_err(&err)?;
            c.config = cupti.pm_host_config_image(host).map_err(&err)?;
            // SAFETY: CUPTI's resource callback for this context's creation is running: the
            // context is live.
            let profiler = unsafe { cupti.range_enable(ctx) }.map_err(&err)?;
            let profiler = c.profiler.insert(profiler);
            let size = cupti
                .range_counter_data_size(profiler, &names, self.config.ranges_per_pass)
                .map_err(&err)?;
            c.image = vec![0u8; size];
            self.configure(&mut c).map_err(&err)
        })();
        match r {
            Ok(()) => Ok(c),
            Err(e) => {
                self.release(c);
                Err(e)
            }
        }
    }

    /// Initializes the context's image, configures the profiler with it and starts it.
    fn configure(&self, c: &mut ContextProfiler) -> Result<(), CuptiError> {
        let cupti = self.cupti;
        let Some(profiler) = c.profiler.as_ref() else {
            return Ok(());
        };
        cupti.range_counter_data_initialize(profiler, &mut c.image)?;
        // SAFETY: `c.image` stays in place (never resized) until the next decode, which
        // happens before it is initialized again or dropped.
        unsafe {
            cupti.range_set_config(
                profiler,
                &c.config,
                &mut c.image,
                self.config.ranges_per_pass,
            )
        }?;
        cupti.range_start(profiler)
    }

    /// Stops, decodes and evaluates the context's ranges.
    fn decode(&self, c: &mut ContextProfiler) -> Result<DecodedRanges, CuptiError> {
        let cupti = self.cupti;
        let (Some(profiler), Some(host)) = (c.profiler.as_ref(), c.host.as_ref()) else {
            return Ok(DecodedRanges::default());
        };
        cupti.range_stop(profiler)?;
        let dropped = cupti.range_decode(profiler)?;
        let n = cupti.range_count(&c.image)?;
        let names: Vec<&str> = c.metrics.iter().map(String::as_str).collect();
        let mut ranges = Vec::with_capacity(n);
        for i in 0..n {
            ranges.push(cupti.pm_host_evaluate(host, &c.image, i, &names)?);
        }
        Ok(DecodedRanges { ranges, dropped })
    }

    /// Decodes the context's ranges, writes them as one frame and (unless `last`) starts the
    /// profiler again.
    fn flush(&mut self, c: &mut ContextProfiler, last: bool) {
        let decoded = match self.decode(c) {
            Ok(d) => d,
            Err(e) => {
                self.report
                    .errors
                    .push(FlopsError::from_cupti(c.device, None, e).to_string());
                DecodedRanges::default()
            }
        };
        let names: Vec<&str> = c.metrics.iter().map(String::as_str).collect();
        let kernels = c.order.pair(&names, &decoded, &mut self.report.tally);
        self.write(c, kernels);
        if !last {
            if let Err(e) = self.configure(c) {
                self.report
                    .errors
                    .push(FlopsError::from_cupti(c.device, None, e).to_string());
            }
        }
    }

    /// A graph launch's ranges, summed into its one correlation id.
    fn flush_graph(&mut self, c: &mut ContextProfiler) {
        let mut decoded = match self.decode(c) {
            Ok(d) => d,
            Err(e) => {
                self.report
                    .errors
                    .push(FlopsError::from_cupti(c.device, None, e).to_string());
                DecodedRanges::default()
            }
        };
        if decoded.ranges.len() > 1 {
            let mut sum = vec![0f64; c.metrics.len()];
            for r in &decoded.ranges {
                for (s, v) in sum.iter_mut().zip(r) {
                    *s += v;
                }
            }
            decoded.ranges = vec![sum];
        }
        if decoded.dropped > 0 {
            // Some of the graph's kernels are missing from the sum: no count, never a part.
            decoded.ranges.clear();
        }
        let names: Vec<&str> = c.metrics.iter().map(String::as_str).collect();
        let kernels = c.order.pair(&names, &decoded, &mut self.report.tally);
        self.write(c, kernels);
        if let Err(e) = self.configure(c) {
            self.report
                .errors
                .push(FlopsError::from_cupti(c.device, None, e).to_string());
        }
    }

    fn write(&mut self, c: &ContextProfiler, kernels: Vec<KernelOpCounters>) {
        if kernels.is_empty() {
            return;
        }
        let n = kernels.len() as u64;
        let frame = op_counters_frame(c.device, c.context_uid, c.passes, kernels);
        if (self.write)(&frame) {
            self.report.frames += 1;
        } else {
            self.report.unwritten_launches += n;
        }
    }

    fn release(&self, mut c: ContextProfiler) {
        if let Some(p) = c.profiler.take() {
            let _ = self.cupti.range_disable(p);
        }
        if let Some(h) = c.host.take() {
            let _ = self.cupti.pm_host_deinitialize(h);
        }
    }
}
