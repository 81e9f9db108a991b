//! Instrumented mode: warp-level instruction counts per kernel launch from CUPTI's SASS
//! metrics API (CUDA 12.4+), for the `warp_instructions` meter.
//!
//! When [`CollectorConfig::instructions`](super::CollectorConfig::instructions) is set, the
//! collector enables the CUPTI callbacks of the runtime and driver kernel-launch functions
//! (and of graph launches) and of context destruction. Around each launch call:
//!
//! - **enter** (outermost launch of the thread only: a runtime launch that calls the driver is
//!   one launch): on the context's first launch, `cuptiProfilerInitialize` (once per process),
//!   then for its device (once) `cuptiProfilerDeviceSupported`, `cuptiDeviceGetChipName`,
//!   `cuptiSassMetricsGetProperties(smsp__sass_inst_executed)` and `cuptiSassMetricsSetConfig`
//!   (GPU granularity), then `cuptiSassMetricsEnable` on the context with lazy patching (a
//!   function is patched at its first launch). Then the thread takes the context's launch
//!   slot: launches into one context are serialized across threads, so a flush only sees the
//!   work of the launch that owns the slot.
//! - **exit**: `cuCtxSynchronize`, `cuptiSassMetricsFlushData` (values since the previous
//!   flush), the values summed per function, and an [`InstructionCounts`] frame queued for the
//!   recording with the launch's correlation id, the device ordinal and the context id; then
//!   the slot is released.
//!
//! A context being destroyed is disabled (`cuptiSassMetricsDisable`) first; at stop, the
//! remaining contexts are disabled and every configured device unset. Nothing here fails the
//! collection: problems (a device without SASS metrics, a failed call) become warnings of the
//! stop report (at most 32, then a count), and that launch or context has no counts.
//!
//! Cost: every launch waits for the GPU to finish it, and patched kernels run slower, so time
//! meters of an instrumented recording are not the program's normal times; the header's
//! `instrumented` flag makes a report say so.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use cupti_sys::{Cupti, SassGranularity, SASS_INST_EXECUTED};

use super::event::{ApiCall, Event};
use super::live::LIVE;
use super::{driver, ffi};
use gpumeter_recording::gmr::{FunctionInstructions, InstructionCounts};

/// Warnings kept for the stop report; later ones are counted.
const KEEP_WARNINGS: usize = 32;
/// How long [`end`] waits for launches in flight to finish before disabling anyway.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A launch that holds its context's slot until its exit.
#[derive(Debug, Clone, Copy)]
struct Outer {
    call: ApiCall,
    device: u32,
    metric_id: u64,
}

/// What happened to a device's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeviceSetup {
    /// Configured for this metric id.
    Configured(u64),
    /// Could not be configured (warned once).
    Failed,
}

#[derive(Default)]
struct State {
    /// `cuptiProfilerInitialize`'s outcome: once per process.
    profiler: Option<Result<(), String>>,
    devices: BTreeMap<u32, DeviceSetup>,
    /// Enabled contexts → (device, metric id).
    contexts: BTreeMap<usize, (u32, u64)>,
    /// Contexts that could not be enabled (warned once).
    failed: BTreeSet<usize>,
    /// Contexts whose launch slot is taken, and by which thread.
    busy: BTreeMap<usize, ThreadId>,
    warnings: Vec<String>,
    more_warnings: u64,
}

impl State {
    fn warn(&mut self, msg: String) {
        if self.warnings.len() < KEEP_WARNINGS {
            self.warnings.push(msg);
        } else {
            self.more_warnings += 1;
        }
    }
}

struct Sass {
    active: AtomicBool,
    state: Mutex<State>,
    released: Condvar,
    frames: AtomicU64,
}

static SASS: Sass = Sass {
    active: AtomicBool::new(false),
    state: Mutex::new(State {
        profiler: None,
        devices: BTreeMap::new(),
        contexts: BTreeMap::new(),
        failed: BTreeSet::new(),
        busy: BTreeMap::new(),
        warnings: Vec::new(),
        more_warnings: 0,
    }),
    released: Condvar::new(),
    frames: AtomicU64::new(0),
};

thread_local! {
    /// Nesting depth of launch callbacks on this thread (a runtime launch calls the driver).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The outermost launch of this thread, while it holds its context's slot.
    static OUTER: Cell<Option<Outer>> = const { Cell::new(None) };
    /// Set while this thread runs instrumented-mode code, so callbacks it causes are ignored.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

fn state() -> MutexGuard<'static, State> {
    SASS.state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn cupti() -> Option<&'static Cupti> {
    LIVE.get().map(|l| l.cupti)
}

/// Starts instrumented mode for a session: fresh device and context tables, callbacks on.
/// The profiler initialisation of an earlier session is kept.
pub(crate) fn begin() {
    let mut s = state();
    let profiler = s.profiler.take();
    *s = State {
        profiler,
        ..State::default()
    };
    SASS.frames.store(0, Ordering::Relaxed);
    SASS.active.store(true, Ordering::SeqCst);
}

/// What [`end`] reports.
#[derive(Debug, Default)]
pub(crate) struct Ended {
    pub(crate) warnings: Vec<String>,
    pub(crate) frames: u64,
}

/// Ends instrumented mode: no new launch is instrumented; waits (at most 10 s) for launches
/// in flight, then disables every enabled context and unsets every configured device.
pub(crate) fn end(cupti: &Cupti) -> Ended {
    if !SASS.active.swap(false, Ordering::SeqCst) {
        return Ended::default();
    }
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    let mut s = state();
    while !s.busy.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let n = s.busy.len();
            s.warn(format!(
                "instruction counts: {n} launch(es) still in flight at stop; their contexts were \
                 disabled anyway"
            ));
            break;
        }
        s = match SASS.released.wait_timeout(s, left) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
    }
    let contexts: Vec<usize> = std::mem::take(&mut s.contexts).into_keys().collect();
    for ctx in contexts {
        // SAFETY: `ctx` was enabled from a launch callback and has not been destroyed: a
        // context being destroyed is removed from the table first (`ContextDestroying`), and
        // the subscription that reports that is still held while the collector stops.
        match unsafe { cupti.sass_disable(ctx as *mut c_void) } {
            Ok(0) => {}
            Ok(n) => s.warn(format!(
                "instruction counts: {n} SASS records of context {ctx:#x} were not flushed at stop"
            )),
            Err(e) => s.warn(format!(
                "instruction counts: disabling context {ctx:#x} at stop: {e}"
            )),
        }
    }
    let devices: Vec<u32> = s
        .devices
        .iter()
        .filter(|(_, d)| matches!(d, DeviceSetup::Configured(_)))
        .map(|(&d, _)| d)
        .collect();
    for d in devices {
        if let Err(e) = cupti.sass_unset_config(d) {
            s.warn(format!("instruction counts: unsetting device {d}: {e}"));
        }
    }
    s.devices.clear();
    let mut warnings = std::mem::take(&mut s.warnings);
    if s.more_warnings > 0 {
        warnings.push(format!(
            "… and {} more instruction-count warnings",
            s.more_warnings
        ));
        s.more_warnings = 0;
    }
    Ended {
        warnings,
        frames: SASS.frames.load(Ordering::Relaxed),
    }
}

/// Handles one callback (from [`super::callbacks`]'s subscriber callback, which catches panics).
pub(crate) fn on_event(event: Event) {
    if INSIDE.with(Cell::get) {
        return;
    }
    match event {
        Event::Api(call) if call.enter => {
            let depth = DEPTH.with(|d| {
                let v = d.get().saturating_add(1);
                d.set(v);
                v
            });
            if depth == 1 && SASS.active.load(Ordering::SeqCst) {
                let outer = guarded(|| prepare(call));
                OUTER.with(|o| o.set(outer));
            }
        }
        Event::Api(call) => {
            let depth = DEPTH.with(|d| {
                let v = d.get();
                d.set(v.saturating_sub(1));
                v
            });
            if depth != 1 {
                return;
            }
            // FLOP counting notes the outermost launch call only (a runtime launch calls the
            // driver's, under the same correlation id).
            if !call.failed && super::flops::ACTIVE.load(Ordering::Relaxed) {
                guarded(|| super::flops::on_launch_exit(call));
            }
            if let Some(outer) = OUTER.with(Cell::take) {
                guarded(|| {
                    if SASS.active.load(Ordering::SeqCst) {
                        collect(outer);
                    }
                });
                release(outer.call.context);
            }
        }
        Event::ContextDestroying(ctx) => guarded(|| destroying(ctx)),
    }
}

/// Runs `f` with [`INSIDE`] set (callbacks it causes on this thread are ignored).
fn guarded<T>(f: impl FnOnce() -> T) -> T {
    INSIDE.with(|i| i.set(true));
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            INSIDE.with(|i| i.set(false));
        }
    }
    let _reset = Reset;
    f()
}

/// Sets the context up on its first launch and takes its launch slot; `None` when the
/// context cannot be instrumented (warned once).
fn prepare(call: ApiCall) -> Option<Outer> {
    let cupti = cupti()?;
    let ctx = call.context;
    let mut s = state();
    if s.failed.contains(&ctx) || ctx == 0 {
        return None;
    }
    let (device, metric_id) = match s.contexts.get(&ctx) {
        Some(&v) => v,
        None => match enable_context(cupti, &mut s, ctx) {
            Ok(v) => {
                s.contexts.insert(ctx, v);
                v
            }
            Err(e) => {
                s.warn(format!(
                    "instruction counts: context {} not instrumented: {e}",
                    call.context_uid
                ));
                s.failed.insert(ctx);
                return None;
            }
        },
    };
    let me = std::thread::current().id();
    loop {
        match s.busy.get(&ctx) {
            // A slot this thread still holds: its exit callback never came; take it over.
            Some(owner) if *owner == me => break,
            Some(_) => {
                s = SASS
                    .released
                    .wait(s)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            None => break,
        }
    }
    s.busy.insert(ctx, me);
    Some(Outer {
        call,
        device,
        metric_id,
    })
}

/// Profiler initialisation (once), the device's configuration (once), then
/// `cuptiSassMetricsEnable` on `ctx` with lazy patching.
fn enable_context(cupti: &Cupti, s: &mut State, ctx: usize) -> Result<(u32, u64), String> {
    if s.profiler.is_none() {
        s.profiler = Some(cupti.profiler_initialize().map_err(|e| e.to_string()));
    }
    if let Some(Err(e)) = &s.profiler {
        return Err(format!("the CUPTI profiler could not be initialised: {e}"));
    }
    // SAFETY: `ctx` is the context of a launch callback that is running on this thread, so it
    // is live.
    let device = unsafe { ffi::device_of(cupti, ctx) }.map_err(|e| e.to_string())?;
    let setup = match s.devices.get(&device) {
        Some(&d) => d,
        None => {
            let d = match configure_device(cupti, device) {
                Ok(id) => DeviceSetup::Configured(id),
                Err(e) => {
                    s.warn(format!("instruction counts: device {device}: {e}"));
                    DeviceSetup::Failed
                }
            };
            s.devices.insert(device, d);
            d
        }
    };
    let DeviceSetup::Configured(metric_id) = setup else {
        return Err(format!("device {device} has no SASS metrics configuration"));
    };
    // SAFETY: as above, `ctx` is live.
    unsafe { cupti.sass_enable(ctx as *mut c_void, true) }.map_err(|e| e.to_string())?;
    Ok((device, metric_id))
}

/// Checks the device, finds `smsp__sass_inst_executed`'s id for its chip and sets the
/// configuration; returns the metric id.
fn configure_device(cupti: &Cupti, device: u32) -> Result<u64, String> {
    match cupti.sass_device_supported(device) {
        Ok(s) if !s.is_supported() => {
            return Err(format!(
                "SASS metrics are not supported here ({}: {:?})",
                s.reasons().join(", "),
                s
            ))
        }
        Ok(_) => {}
        Err(e) => return Err(e.to_string()),
    }
    let chip = cupti.device_chip_name(device).map_err(|e| e.to_string())?;
    let metric = cupti
        .sass_metric_properties(&chip, SASS_INST_EXECUTED)
        .map_err(|e| format!("{SASS_INST_EXECUTED} on chip {chip}: {e}"))?;
    cupti
        .sass_set_config(device, &[metric.id], SassGranularity::Gpu)
        .map_err(|e| e.to_string())?;
    Ok(metric.id)
}

/// After the launch returned: synchronize, flush, sum per function, queue the frame.
fn collect(o: Outer) {
    let Some(live) = LIVE.get() else {
        return;
    };
    let cupti = live.cupti;
    let c = o.call;
    let synced = driver::synchronize_current_context();
    // SAFETY: `c.context` is the context of the launch whose exit callback is running on this
    // thread, so it is live.
    let flushed = unsafe { cupti.sass_flush(c.context as *mut c_void) };
    let warn = |m: String| state().warn(m);
    if let Err(e) = synced {
        warn(format!(
            "instruction counts: launch {} (context {}): synchronizing failed ({e}); its counts \
             are not recorded",
            c.correlation_id, c.context_uid
        ));
        return;
    }
    let records = match flushed {
        Ok(r) => r,
        Err(e) => {
            warn(format!(
                "instruction counts: launch {} (context {}): {e}",
                c.correlation_id, c.context_uid
            ));
            return;
        }
    };
    let functions = sum_per_function(
        o.metric_id,
        records
            .iter()
            .map(|r| (r.function_name.as_str(), &r.values[..])),
    );
    if functions.is_empty() {
        // What CUPTI did hand over, for the report: records, and Σ value per metric id.
        let mut per_metric: BTreeMap<u64, u64> = BTreeMap::new();
        for r in &records {
            for &(id, v) in &r.values {
                let e = per_metric.entry(id).or_insert(0);
                *e = e.saturating_add(v);
            }
        }
        warn(format!(
            "instruction counts: launch {} (context {}): CUPTI reported no instructions \
             ({} patched-instruction records; Σ value per metric id {:?}; expected metric id {})",
            c.correlation_id,
            c.context_uid,
            records.len(),
            per_metric,
            o.metric_id
        ));
        return;
    }
    let counts = InstructionCounts {
        correlation_id: c.correlation_id,
        device_id: o.device,
        context_id: c.context_uid,
        functions,
    };
    live.core.instructions(&counts);
    SASS.frames.fetch_add(1, Ordering::Relaxed);
}

/// Σ of `metric_id`'s values per function name (saturating), functions without any executed
/// instruction left out, sorted by name.
pub(crate) fn sum_per_function<'a>(
    metric_id: u64,
    records: impl Iterator<Item = (&'a str, &'a [(u64, u64)])>,
) -> Vec<FunctionInstructions> {
    let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
    for (name, values) in records {
        let v = values
            .iter()
            .filter(|(id, _)| *id == metric_id)
            .fold(0u64, |a, (_, v)| a.saturating_add(*v));
        let e = sums.entry(name).or_insert(0);
        *e = e.saturating_add(v);
    }
    sums.into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, warp_instructions)| FunctionInstructions {
            name: name.to_string(),
            warp_instructions,
        })
        .collect()
}

/// Releases a context's launch slot.
fn release(ctx: usize) {
    let mut s = state();
    s.busy.remove(&ctx);
    drop(s);
    SASS.released.notify_all();
}

/// A context is being destroyed: disable it while it is still live, and forget it.
fn destroying(ctx: usize) {
    let Some(cupti) = cupti() else {
        return;
    };
    let mut s = state();
    s.failed.remove(&ctx);
    if s.contexts.remove(&ctx).is_none() {
        return;
    }
    // SAFETY: CUPTI reports the destruction as starting: the context is still live during
    // this callback.
    match unsafe { cupti.sass_disable(ctx as *mut c_void) } {
        Ok(0) => {}
        Ok(n) => s.warn(format!(
            "instruction counts: {n} SASS records lost when context {ctx:#x} was destroyed"
        )),
        Err(e) => s.warn(format!(
            "instruction counts: disabling context {ctx:#x} before its destruction: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_per_function_over_pcs_and_instances() {
        let a = [(7u64, 10u64), (7, 5), (9, 1000)];
        let b = [(7u64, 3u64)];
        let zero = [(7u64, 0u64)];
        let max = [(7u64, u64::MAX)];
        let out = sum_per_function(
            7,
            [
                ("_Z1kv", &a[..]),
                ("_Z1jv", &b[..]),
                ("_Z1kv", &b[..]),
                ("idle", &zero[..]),
                ("big", &max[..]),
                ("big", &max[..]),
            ]
            .into_iter(),
        );
        let got: Vec<(&str, u64)> = out
            .iter()
            .map(|f| (f.name.as_str(), f.warp_instructions))
            .collect();
        assert_eq!(got, [("_Z1jv", 3), ("_Z1kv", 18), ("big", u64::MAX)]);
    }

    /// Callbacks nest (a runtime launch calls the driver): only the outermost exit collects,
    /// and an exit without an entry is ignored. Without an active session nothing is held.
    #[test]
    fn nesting_is_tracked_per_thread() {
        let call = |enter| {
            Event::Api(ApiCall {
                enter,
                correlation_id: 1,
                context: 0x1000,
                context_uid: 1,
                graph: false,
                failed: false,
            })
        };
        std::thread::spawn(move || {
            on_event(call(false));
            assert_eq!(DEPTH.with(Cell::get), 0);
            on_event(call(true));
            on_event(call(true));
            assert_eq!(DEPTH.with(Cell::get), 2);
            on_event(call(false));
            on_event(call(false));
            assert_eq!(DEPTH.with(Cell::get), 0);
            assert!(OUTER.with(Cell::get).is_none());
            on_event(Event::ContextDestroying(0x1000));
        })
        .join()
        .expect("no panic");
    }
}
