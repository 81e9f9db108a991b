//! Profiler ranges: `cuda_profiler_range` events with CUPTI metric arguments (PyTorch's
//! profiler in CUPTI-profiler mode), read as measured kernels ([`read_range`]) with their
//! operation counts ([`range_op_counts`]), then resolved against the kernel events
//! ([`resolve_ranges`]): their counts attach to the kernel of their name and launch order, or,
//! on a device without kernel events, each is a kernel launch. The warnings say which.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use gpumeter_core::{Warning, WarningCode, Work};
use serde_json::value::RawValue;

use super::event::{device_hint, parse_args, Args, Class, Event};
use super::fault::Fault;
use super::gpu::{work_event, KernelNames, Pending};
use crate::error::{shorten, ImportError};

/// A measured kernel range (`cuda_profiler_range` with CUPTI metric arguments), as read.
pub(super) struct Range {
    pub(super) index: usize,
    /// The device the event names (`args.device`, else `pid`), when it tells one.
    pub(super) device_id: Option<u32>,
    /// The range as a kernel record (its counts in `KernelLaunch::ops`), or why it cannot be
    /// read.
    pub(super) parsed: Result<Pending<'static>, ImportError>,
    /// A FLOP meter of which the range records some but not all counters (that meter left
    /// uncounted).
    pub(super) partial: bool,
    /// A meter whose total overflows `u64` (that meter left uncounted).
    pub(super) overflow: bool,
    /// A session-wide range ([`SESSION_NAME`]): its counters cover every kernel of the
    /// profiling session.
    pub(super) session: bool,
}

impl Range {
    /// A range that cannot be read: whether it is measured is unknown, and a measured one
    /// must not vanish (lost on a range-only device, else unmatched).
    pub(super) fn unread(index: usize, device_id: Option<u32>, fault: ImportError) -> Range {
        Range {
            index,
            device_id,
            parsed: Err(fault),
            partial: false,
            overflow: false,
            session: false,
        }
    }
}

/// A `cuda_profiler_range` complete event (or a `B` event `ev` closed by `end`), event
/// `index`: with CUPTI metric arguments a measured kernel range (which `finish` makes a
/// launch, or attaches its counts to its kernel); `None` without (the caller counts it as
/// skipped).
pub(super) fn read_range(
    f: &Fault<'_>,
    index: usize,
    ev: &Event<'_>,
    end: Option<&Event<'_>>,
    names: &mut KernelNames,
) -> Option<Range> {
    let args = match parse_args(f, ev.args) {
        Ok(a) if a.metrics.is_empty() => return None,
        Ok(a) => a,
        // Args that cannot be read: whether the range is measured is unknown, and a measured
        // one must not vanish.
        Err(e) => return Some(Range::unread(index, device_hint(ev, &Args::default()), e)),
    };
    let mut partial = false;
    let mut overflow = false;
    let mut session = false;
    let parsed = match ev.duplicate.or(end.and_then(|e| e.duplicate)) {
        Some(d) => Err(d.fault(
            f,
            "given twice in the event, so which value holds is unknown".to_string(),
        )),
        None => work_event(f, ev, end, &args, Class::Kernel, names),
    }
    .and_then(|mut p| {
        let (ops, part, over) = range_op_counts(f, &args.metrics)?;
        (partial, overflow) = (part, over);
        if let Work::Kernel(k) = &mut p.rec.work {
            k.set_op_counts(ops);
            // Kineto names a range whose kernel name it did not get `__missing__`.
            if k.name.as_deref() == Some(MISSING_NAME) {
                k.name = None;
            }
            session = k.name.as_deref() == Some(SESSION_NAME);
        }
        Ok(p.into_owned())
    });
    Some(Range {
        index,
        device_id: device_hint(ev, &args),
        parsed,
        partial,
        overflow,
        session,
    })
}

/// The name Kineto gives a profiler range whose kernel name it did not get.
const MISSING_NAME: &str = "__missing__";

/// The name of the one range per device Kineto's range profiler writes when it does not
/// measure per kernel (PyTorch `profiler_measure_per_kernel=False`, the default): its
/// counters are the whole session's.
pub(super) const SESSION_NAME: &str = "__profile__";

/// The message field of each SASS op counter ([`gpumeter_core::ops::SASS_OP_METRICS`], in its
/// order) as a range's `args` spell it.
pub(super) const SASS_OP_FIELDS: [&str; 9] = [
    "args.smsp__sass_thread_inst_executed_op_dadd_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_dmul_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
];

/// The message field of a tensor-path op counter (the value names which one).
const TENSOR_OP_FIELD: &str = "args.sm__ops_path_tensor_src_*_dst_*.sum";

/// A profiler range's operation counts from its metric arguments
/// ([`gpumeter_core::OpCounter`]): add and multiply 1, FMA 2 per precision; tensor-path ops
/// summed. Metrics that feed no meter are left alone; a `null` counter is not given. Also
/// returns whether a FLOP meter had only some of its counters (that meter is left uncounted:
/// its count would under-bill) and whether a meter's total overflowed `u64` (left
/// uncounted).
///
/// # Errors
/// [`ImportError::BadField`] for a counter that is not a non-negative integer that fits `u64`,
/// or one given twice.
pub(super) fn range_op_counts(
    f: &Fault<'_>,
    metrics: &[(Cow<'_, str>, &RawValue)],
) -> Result<(gpumeter_core::OpCounts, bool, bool), ImportError> {
    use gpumeter_core::ops::{is_tensor_op_metric, SASS_OP_METRICS};
    let mut counter = gpumeter_core::OpCounter::new();
    let mut overflowed = Vec::new();
    let mut seen = HashSet::new();
    for (name, raw) in metrics {
        let field = match SASS_OP_METRICS.iter().position(|m| m.name == name.as_ref()) {
            Some(i) => SASS_OP_FIELDS[i],
            None if is_tensor_op_metric(name) => TENSOR_OP_FIELD,
            None => continue,
        };
        if !seen.insert(name.as_ref()) {
            return Err(f.err(
                field,
                name,
                "the counter is given twice in args, so which value holds is unknown",
            ));
        }
        let value = f.u64_opt(field, Some(raw)).map_err(|e| match e {
            // Name the tensor counter, whose field is a pattern.
            ImportError::BadField {
                path,
                record,
                field,
                value,
                reason,
            } if field == TENSOR_OP_FIELD => ImportError::BadField {
                path,
                record,
                field,
                value: format!("{name}: {value}"),
                reason,
            },
            e => e,
        })?;
        let Some(value) = value else { continue };
        if let Err(gpumeter_core::OpCountError::Overflow { meter, .. }) =
            counter.add(name.as_ref(), value)
        {
            overflowed.push(meter);
        }
    }
    let mut ops = counter.finish();
    let partial = counter.partial();
    for m in partial.iter().chain(&overflowed) {
        match m {
            gpumeter_core::MeterKind::FlopsFp64 => ops.flops_fp64 = None,
            gpumeter_core::MeterKind::FlopsFp32 => ops.flops_fp32 = None,
            gpumeter_core::MeterKind::FlopsFp16 => ops.flops_fp16 = None,
            _ => ops.tensor_ops = None,
        }
    }
    Ok((ops, !partial.is_empty(), !overflowed.is_empty()))
}

/// What [`resolve_ranges`] made of a trace's measured kernel ranges.
#[derive(Default)]
pub(super) struct RangeOutcome {
    /// Ranges taken as kernel launches (devices without kernel events).
    pub(super) launches: u64,
    /// Ranges whose counts attached to a kernel event.
    pub(super) attached: u64,
    /// Ranges on a device with kernel events that matched none (or could not be read): the
    /// first one's event index and why.
    pub(super) unmatched: u64,
    pub(super) first_unmatched: Option<(usize, String)>,
    /// Ranges with a FLOP meter's counters only in part.
    pub(super) partial: u64,
    /// Ranges with a meter's total past `u64`.
    pub(super) overflow: u64,
    /// Session-wide ranges taken as launches, and the first one's event index.
    pub(super) sessions: u64,
    pub(super) first_session: Option<usize>,
}

impl RangeOutcome {
    /// Counts a range that matched no kernel; the warning names the first unmatched range in
    /// the trace, whatever order the (name-keyed, hash-ordered) matching meets them in.
    fn unmatched(&mut self, index: usize, why: String) {
        self.unmatched += 1;
        if self
            .first_unmatched
            .as_ref()
            .is_none_or(|(i, _)| index < *i)
        {
            self.first_unmatched = Some((index, why));
        }
    }
}

/// Resolves measured kernel ranges against the kernel events (`pending`), per device: on a
/// device with kernel events, the k-th range of a kernel name (in start order) gives its
/// counts to the k-th kernel of that name (in start order: the launch order, the profiler
/// having serialized them), so no kernel is counted twice and none gets two ranges' counts; a
/// range left over (or one that cannot be read, or has no name) is unmatched. On a device
/// without kernel events each range is one kernel launch (added to `pending`; one that cannot
/// be read is lost, `invalid_field`).
pub(super) fn resolve_ranges(
    pending: &mut Vec<Pending<'static>>,
    ranges: Vec<Range>,
    invalid: &mut Vec<(Option<u32>, ImportError)>,
    launch_ts: &HashMap<u32, i128>,
) -> RangeOutcome {
    let mut out = RangeOutcome::default();
    if ranges.is_empty() {
        return out;
    }
    let with_kernels: HashSet<u32> = pending
        .iter()
        .filter(|p| kernel_name(p).is_some())
        .map(|p| p.device_id)
        .collect();
    let kernels = kernels_in_launch_order(pending, launch_ts);
    // Range launches of a device are numbered in trace order as their correlation id: two
    // ranges alike in every field (Kineto gives ranges equal shares of the session, which
    // can be 0 µs) are two launches, not one record twice.
    let mut ordinal: HashMap<u32, u32> = HashMap::new();
    let mut matched: HashMap<(u32, Arc<str>), Vec<Pending<'static>>> = HashMap::new();
    for r in ranges {
        out.partial += u64::from(r.partial);
        out.overflow += u64::from(r.overflow);
        // The device the range is metered on when it becomes a launch: the parsed record's
        // own (`args.device` read as every record's, a numeric string included), so a range
        // is never a second launch beside a kernel of that device.
        let device = match &r.parsed {
            Ok(p) => Some(p.device_id),
            Err(_) => r.device_id,
        };
        let on_kernel_device = device.is_some_and(|d| with_kernels.contains(&d));
        match (r.parsed, on_kernel_device) {
            (Ok(mut p), false) => {
                out.launches += 1;
                if r.session {
                    out.sessions += 1;
                    out.first_session.get_or_insert(r.index);
                }
                let n = ordinal.entry(p.device_id).or_insert(0);
                *n = n.saturating_add(1);
                p.rec.correlation_id = *n;
                pending.push(p);
            }
            (Err(e), false) => invalid.push((r.device_id, e)),
            (Err(e), true) => out.unmatched(r.index, e.to_string()),
            (Ok(p), true) => match kernel_name(&p).flatten() {
                Some(name) => matched.entry((p.device_id, name)).or_default().push(p),
                None => out.unmatched(r.index, "the range names no kernel".to_string()),
            },
        }
    }
    attach(pending, matched, &kernels, &mut out);
    out
}

/// Gives each range of `matched` (by device and kernel name) its kernel of `kernels`: the
/// k-th range in start order the k-th kernel in launch order; a range left over is unmatched.
fn attach(
    pending: &mut [Pending<'static>],
    matched: HashMap<(u32, Arc<str>), Vec<Pending<'static>>>,
    kernels: &HashMap<(u32, Arc<str>), Vec<usize>>,
    out: &mut RangeOutcome,
) {
    for (key, mut list) in matched {
        list.sort_by_key(|p| (p.ts_ns, p.index));
        let targets = kernels.get(&key).map_or(&[][..], Vec::as_slice);
        for (n, r) in list.into_iter().enumerate() {
            let ops = match &r.rec.work {
                Work::Kernel(k) => k.op_counts(),
                _ => gpumeter_core::OpCounts::default(),
            };
            match targets.get(n) {
                Some(&t) => {
                    if let Work::Kernel(k) = &mut pending[t].rec.work {
                        k.set_op_counts(ops);
                    }
                    out.attached += 1;
                }
                None => out.unmatched(
                    r.index,
                    format!(
                        "the trace has {} kernel events named `{}` on device {}, fewer than \
                         its ranges of that name",
                        targets.len(),
                        shorten(&key.1),
                        key.0
                    ),
                ),
            }
        }
    }
}

/// The name of a pending kernel record (`None` for a memcpy or memset; `Some(None)` for a
/// kernel without a name).
fn kernel_name(p: &Pending<'_>) -> Option<Option<Arc<str>>> {
    match &p.rec.work {
        Work::Kernel(k) => Some(k.name.clone()),
        _ => None,
    }
}

/// The kernel events of `pending` by (device, name), each list in launch order.
fn kernels_in_launch_order(
    pending: &[Pending<'static>],
    launch_ts: &HashMap<u32, i128>,
) -> HashMap<(u32, Arc<str>), Vec<usize>> {
    // (device, name) → kernel events in launch (start) order.
    let mut kernels: HashMap<(u32, Arc<str>), Vec<usize>> = HashMap::new();
    for (i, p) in pending.iter().enumerate() {
        if let Some(Some(name)) = kernel_name(p) {
            kernels.entry((p.device_id, name)).or_default().push(i);
        }
    }
    // Launch order: the launch call's time where the trace has it (kernels of several
    // streams start on the GPU in another order than they were launched in, and the
    // profiler replays them in launch order), else the kernel's start.
    let launched = |p: &Pending<'_>| {
        p.correlation
            .and_then(|c| launch_ts.get(&c).copied())
            .unwrap_or(p.ts_ns)
    };
    for list in kernels.values_mut() {
        list.sort_by_key(|&i| (launched(&pending[i]), pending[i].ts_ns, pending[i].index));
    }
    kernels
}

/// The warnings of a trace's measured kernel ranges.
pub(super) fn range_warnings(
    name: &str,
    r: &RangeOutcome,
    range_pid: Option<u32>,
    launch_pids: usize,
    warnings: &mut Vec<Warning>,
) {
    if r.launches + r.attached > 0 {
        warnings.push(instrumented_run(name, r, range_pid, launch_pids));
    }
    if let Some(index) = r.first_session {
        warnings.push(Warning::new(
            WarningCode::InstrumentedRun,
            format!(
                "{name}: {} CUPTI-profiler ranges are session-wide (`{SESSION_NAME}`, the first \
                 traceEvents[{index}]: PyTorch's profiler_measure_per_kernel=False): each is \
                 metered as one kernel launch spanning the session, so its FLOP and tensor \
                 counts are the session's, right, but kernel_launches and the time meters do not \
                 describe its kernels",
                r.sessions
            ),
        ));
    }
    if let Some((index, why)) = &r.first_unmatched {
        warnings.push(Warning::new(
            WarningCode::UnmatchedProfilerRanges,
            format!(
                "{name}: {} CUPTI-profiler ranges match no kernel event of their device (by \
                 name and launch order; the first, traceEvents[{index}]: {why}): their \
                 counters are not metered (counted in records.skipped as \
                 `cuda_profiler_range`)",
                r.unmatched
            ),
        ));
    }
    if r.partial > 0 {
        warnings.push(Warning::new(
            WarningCode::PartialOpCounters,
            format!(
                "{name}: {} CUPTI-profiler ranges record some but not all of a FLOP meter's \
                 counters (add, mul and fma of one precision): their kernels have no count of \
                 that meter",
                r.partial
            ),
        ));
    }
    if r.overflow > 0 {
        warnings.push(Warning::new(
            WarningCode::InstructionCountOverflow,
            format!(
                "{name}: {} CUPTI-profiler ranges have an operation count past 64 bits: their \
                 kernels have no count of that meter",
                r.overflow
            ),
        ));
    }
}

/// The warning of an instrumented run: how many launches are ranges and how many kernels carry
/// a range's counters, what the time meters then describe, and whose the range launches are.
fn instrumented_run(
    name: &str,
    r: &RangeOutcome,
    range_pid: Option<u32>,
    launch_pids: usize,
) -> Warning {
    let how = match (r.launches, r.attached) {
        (l, 0) => format!(
            "{l} kernel launches are CUPTI-profiler ranges (`cuda_profiler_range`, no \
             kernel events on their devices): their times are the ranges', which Kineto \
             does not measure (it gives each range an equal share of the profiling \
             session's span)"
        ),
        (0, a) => format!("{a} kernels carry the counters of their CUPTI-profiler range"),
        (l, a) => format!(
            "{l} kernel launches are CUPTI-profiler ranges (their times are the ranges', \
             which Kineto does not measure: it gives each range an equal share of the \
             profiling session's span) and {a} kernels carry their range's counters"
        ),
    };
    let who = match (r.launches, range_pid) {
        (0, _) => String::new(),
        (_, Some(pid)) => format!(
            "; ranges carry no correlation id, so their launches are given the process id \
             of the trace's one launching process ({pid})"
        ),
        (_, None) => format!(
            "; ranges carry no correlation id and the trace has {launch_pids} launching \
             processes, so their launches have no process id and a tenant map's [pid] \
             rules cannot attribute them"
        ),
    };
    Warning::new(
        WarningCode::InstrumentedRun,
        format!(
            "{name}: an instrumented run (PyTorch profiler in CUPTI-profiler mode): {how}; \
             kernel_ns, gpu_busy_ns and the other time meters describe the profiled run, \
             not an unprofiled one, while flops_fp64, flops_fp32, flops_fp16 and tensor_ops \
             are the counters' own{who}"
        ),
    )
}
