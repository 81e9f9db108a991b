//! Operation counters (a `.gmr`'s type-10 frames) joined to their kernels, and the
//! instrumented-run evidence of a source.

use super::*;

/// What instrumented a source, as its `instrumented_run` warning names it: the instruction
/// counting (`sass`: `SASS metrics`, `INSTRUCTION_EXECUTION records`), and CUPTI's range
/// profiler when the source holds operation-counters frames (`op_passes`: their pass counts),
/// which serializes kernels and replays each once per pass. `None` when nothing did.
pub(crate) fn instrumented_by(
    sass: Option<&str>,
    op_passes: Option<&BTreeSet<u32>>,
) -> Option<String> {
    let profiler = op_passes.map(|passes| {
        let known: Vec<String> = passes
            .iter()
            .filter(|&&p| p > 0)
            .map(u32::to_string)
            .collect();
        let times = match known.as_slice() {
            [] => "once per counter pass".to_string(),
            [one] if one == "1" => "once (1 counter pass)".to_string(),
            [one] => format!("{one} times ({one} counter passes)"),
            many => format!("{} times (counter passes, per context)", many.join(" or ")),
        };
        format!(
            "CUPTI range profiler for the FLOP counters, kernel replay: kernels serialized and \
             each replayed {times}"
        )
    });
    match (sass, profiler) {
        (Some(s), Some(p)) => Some(format!("{s}; {p}")),
        (Some(s), None) => Some(s.to_string()),
        (None, p) => p,
    }
}

/// What [`assign_op_counts`] did.
#[derive(Debug, Default)]
pub(crate) struct OpJoin {
    /// Kernels given operation counts.
    pub(crate) given: u64,
    /// Correlation ids with counters and no kernel record.
    pub(crate) unmatched: Vec<u32>,
    /// Launches whose counts pass 64 bits: (correlation id, why).
    pub(crate) overflowed: Vec<(u32, String)>,
    /// Per FLOP meter, launches with some but not all of its three counters.
    pub(crate) partial: BTreeMap<gpumeter_core::MeterKind, u64>,
}

impl OpJoin {
    /// The warnings of the join: counters of no kernel (`unmatched_profiler_ranges`), counts
    /// past 64 bits (`instruction_count_overflow`), partial FLOP meters
    /// (`partial_op_counters`), and `repeats` entries of a correlation id given before.
    pub(crate) fn warn(
        &self,
        source: &str,
        repeats: u64,
        warnings: &mut Vec<gpumeter_core::Warning>,
    ) {
        use gpumeter_core::{Warning, WarningCode};
        if !self.unmatched.is_empty() || repeats > 0 {
            let mut parts = Vec::new();
            if let (Some(first), n) = (self.unmatched.iter().min(), self.unmatched.len()) {
                parts.push(format!(
                    "{n} launches' operation counters (correlation ids from {first}) match no \
                     kernel record of the recording"
                ));
            }
            if repeats > 0 {
                parts.push(format!(
                    "{repeats} entries repeat a correlation id an earlier operation-counters \
                     frame gave (the first is metered)"
                ));
            }
            warnings.push(Warning::new(
                WarningCode::UnmatchedProfilerRanges,
                format!(
                    "{source}: {}: their counts are not metered (flops_fp64, flops_fp32, \
                     flops_fp16, tensor_ops)",
                    parts.join("; ")
                ),
            ));
        }
        if let Some((corr, why)) = self.overflowed.first() {
            warnings.push(Warning::new(
                WarningCode::InstructionCountOverflow,
                format!(
                    "{source}: the operation counts of {} launches pass 64 bits (the first, \
                     correlation id {corr}: {why}): their kernels have no operation counts, so \
                     the FLOP meters are not meterable on their device (never a clamped count)",
                    self.overflowed.len()
                ),
            ));
        }
        for (meter, n) in &self.partial {
            warnings.push(Warning::new(
                WarningCode::PartialOpCounters,
                format!(
                    "{source}: the operation counters of {n} launches hold some but not all of \
                     {meter}'s add, mul and fma counters: those kernels have no {meter} count"
                ),
            ));
        }
    }
}

/// Gives kernels their operation counts ([`gpumeter_core::OpCounts`]: `flops_fp64`,
/// `flops_fp32`, `flops_fp16`, `tensor_ops`) from the raw counters of their correlation id
/// (`.gmr` operation-counters frames), added up by [`gpumeter_core::OpCounter`] (add and mul
/// count 1, fma 2; tensor-path counters summed). A FLOP meter with only some of its three
/// counters is left without a count ([`gpumeter_core::OpCounter::partial`]); a launch whose
/// counts pass 64 bits gets none. Several kernel records of one correlation id (a graph
/// launch) are one launch call's: the earliest gets the counts, the others 0, so the call's
/// total is given once.
pub(crate) fn assign_op_counts(
    records: &mut [ActivityRecord],
    ops_of: &FxHashMap<u32, Vec<OpCounterValue>>,
) -> OpJoin {
    let mut join = OpJoin::default();
    if ops_of.is_empty() {
        return join;
    }
    let mut seen: BTreeSet<u32> = BTreeSet::new();
    let mut counted: FxHashMap<u32, Option<gpumeter_core::OpCounts>> = FxHashMap::default();
    // `records` are sorted by start: the first of a correlation id is the earliest.
    for r in records.iter_mut() {
        let Work::Kernel(k) = &mut r.work else {
            continue;
        };
        let corr = r.correlation_id;
        let Some(counters) = ops_of.get(&corr).filter(|_| corr != 0) else {
            continue;
        };
        if !seen.insert(corr) {
            // A later kernel of the same call: 0 of each meter the call counted.
            if let Some(Some(c)) = counted.get(&corr) {
                let zero = |n: Option<u64>| n.map(|_| 0);
                k.set_op_counts(gpumeter_core::OpCounts {
                    flops_fp64: zero(c.flops_fp64),
                    flops_fp32: zero(c.flops_fp32),
                    flops_fp16: zero(c.flops_fp16),
                    tensor_ops: zero(c.tensor_ops),
                });
                join.given += 1;
            }
            continue;
        }
        let mut c = gpumeter_core::OpCounter::new();
        let mut overflow = None;
        for v in counters {
            if let Err(e) = c.add(&v.metric, v.value) {
                overflow = Some(e.to_string());
                break;
            }
        }
        if overflow.is_none() && c.tensor_overflow() {
            overflow = Some("tensor_ops's total for one kernel overflows u64".to_string());
        }
        if let Some(why) = overflow {
            join.overflowed.push((corr, why));
            counted.insert(corr, None);
            continue;
        }
        let mut ops = c.finish();
        for m in c.partial() {
            *join.partial.entry(m).or_insert(0) += 1;
            match m {
                gpumeter_core::MeterKind::FlopsFp64 => ops.flops_fp64 = None,
                gpumeter_core::MeterKind::FlopsFp32 => ops.flops_fp32 = None,
                gpumeter_core::MeterKind::FlopsFp16 => ops.flops_fp16 = None,
                _ => {}
            }
        }
        k.set_op_counts(ops);
        counted.insert(corr, Some(ops));
        join.given += 1;
    }
    join.unmatched = ops_of
        .keys()
        .copied()
        .filter(|c| !seen.contains(c))
        .collect();
    join.unmatched.sort_unstable();
    join
}
