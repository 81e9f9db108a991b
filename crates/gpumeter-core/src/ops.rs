//! Arithmetic a kernel executed, from CUPTI's instruction and operation counters: the
//! quantities of the meters `flops_fp64`, `flops_fp32`, `flops_fp16` and `tensor_ops`
//! ([`OpCounts`]), and which counters give them ([`SASS_OP_METRICS`], [`is_tensor_op_metric`]).
//!
//! Sources (the definitions are NVIDIA's; `docs/METERING.md` "FLOPs" has the table, what each
//! meter does not see, and the precision of each):
//! - the SASS counters `smsp__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum`:
//!   thread-level double, single and half precision add, multiply and fused multiply-add
//!   instructions whose predicate was on (Nsight Compute's "Metrics Reference"; the same
//!   counters Kineto's CUPTI-profiler mode records, and Nsight Compute's roofline and LIKWID's
//!   `FLOPS_*` groups add up as add + mul + 2 × fma);
//! - the tensor-path counters `sm__ops_path_tensor_src_<type>_dst_<type>.sum` of compute
//!   capability 8.0 and later ("# of math ops executed in Tensor path", `ncu --query-metrics`).
//!   The warp-instruction counters `sm__inst_executed_pipe_tensor*` of every architecture are
//!   *not* converted: how many operations one tensor instruction performs differs per
//!   instruction variant and per architecture, and the counter does not say which.

use crate::report::MeterKind;

/// The four meters an [`OpCounts`] carries, in report order.
pub const OP_METERS: [MeterKind; 4] = [
    MeterKind::FlopsFp64,
    MeterKind::FlopsFp32,
    MeterKind::FlopsFp16,
    MeterKind::TensorOps,
];

/// Operations one kernel launch executed, per meter; `None` where the source did not measure
/// it (every kernel of a device must carry a meter's count for the meter to be billed there:
/// a partial count under-bills).
///
/// Units: `flops_*` are floating-point operations (an add or a multiply is 1, a fused
/// multiply-add 2), counted per thread; `tensor_ops` are the tensor path's math operations as
/// the hardware counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpCounts {
    /// Double-precision FLOPs (`dadd` + `dmul` + 2 × `dfma`), count.
    pub flops_fp64: Option<u64>,
    /// Single-precision FLOPs (`fadd` + `fmul` + 2 × `ffma`), count.
    pub flops_fp32: Option<u64>,
    /// Half-precision FLOPs (`hadd` + `hmul` + 2 × `hfma`), count.
    pub flops_fp16: Option<u64>,
    /// Tensor-core math operations (Σ `sm__ops_path_tensor_src_*_dst_*`), count.
    pub tensor_ops: Option<u64>,
}

impl OpCounts {
    /// The count of `meter` (`None` for a meter that is not one of [`OP_METERS`]).
    pub fn get(&self, meter: MeterKind) -> Option<u64> {
        match meter {
            MeterKind::FlopsFp64 => self.flops_fp64,
            MeterKind::FlopsFp32 => self.flops_fp32,
            MeterKind::FlopsFp16 => self.flops_fp16,
            MeterKind::TensorOps => self.tensor_ops,
            _ => None,
        }
    }

    /// The counts in [`OP_METERS`] order.
    pub fn as_array(&self) -> [Option<u64>; 4] {
        [
            self.flops_fp64,
            self.flops_fp32,
            self.flops_fp16,
            self.tensor_ops,
        ]
    }

    /// Whether no meter is counted.
    pub fn is_empty(&self) -> bool {
        self.as_array().iter().all(Option::is_none)
    }

    /// `self`'s counts, filled from `other` where `self` has none.
    pub fn or(self, other: OpCounts) -> OpCounts {
        OpCounts {
            flops_fp64: self.flops_fp64.or(other.flops_fp64),
            flops_fp32: self.flops_fp32.or(other.flops_fp32),
            flops_fp16: self.flops_fp16.or(other.flops_fp16),
            tensor_ops: self.tensor_ops.or(other.tensor_ops),
        }
    }

    /// Whether two records' counts can be of one record: every meter both count is equal.
    pub fn agrees(&self, other: &OpCounts) -> bool {
        self.as_array()
            .iter()
            .zip(other.as_array())
            .all(|(a, b)| match (a, b) {
                (Some(a), Some(b)) => *a == b,
                _ => true,
            })
    }
}

/// One SASS counter and what it adds to a FLOP meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpMetric {
    /// The metric's name with its `.sum` rollup, as CUPTI and Kineto write it.
    pub name: &'static str,
    /// The meter it feeds.
    pub meter: MeterKind,
    /// FLOPs per counted thread instruction: 1 for add and multiply, 2 for a fused
    /// multiply-add.
    pub flops_per_instruction: u64,
}

const fn op(name: &'static str, meter: MeterKind, flops_per_instruction: u64) -> OpMetric {
    OpMetric {
        name,
        meter,
        flops_per_instruction,
    }
}

/// The SASS op counters of the FLOP meters (Nsight Compute "Metrics Reference", `smsp__sass_*`;
/// the nine Kineto's CUPTI-profiler mode records by default).
pub const SASS_OP_METRICS: [OpMetric; 9] = [
    op(
        "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum",
        MeterKind::FlopsFp64,
        1,
    ),
    op(
        "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum",
        MeterKind::FlopsFp64,
        1,
    ),
    op(
        "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
        MeterKind::FlopsFp64,
        2,
    ),
    op(
        "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
        MeterKind::FlopsFp32,
        1,
    ),
    op(
        "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
        MeterKind::FlopsFp32,
        1,
    ),
    op(
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
        MeterKind::FlopsFp32,
        2,
    ),
    op(
        "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
        MeterKind::FlopsFp16,
        1,
    ),
    op(
        "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
        MeterKind::FlopsFp16,
        1,
    ),
    op(
        "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
        MeterKind::FlopsFp16,
        2,
    ),
];

/// The prefix of the tensor-path operation counters (compute capability 8.0 and later).
pub const TENSOR_OP_PREFIX: &str = "sm__ops_path_tensor_src_";

/// Whether `name` is a tensor-path operation counter that [`OpCounter`] adds to `tensor_ops`:
/// `sm__ops_path_tensor_src_<type>.sum` (all operations with that source type) or
/// `sm__ops_path_tensor_src_<type>_dst_<type>.sum` (those with one destination type). Its
/// `_sparsity_on` / `_sparsity_off` parts are not (they split the same operations: adding
/// them would count each twice).
pub fn is_tensor_op_metric(name: &str) -> bool {
    tensor_source(name).is_some()
}

/// The source type of a tensor-path operation counter and whether it is one destination
/// type's part (`src_fp16_dst_fp32` → `("fp16", true)`, `src_int8` → `("int8", false)`).
fn tensor_source(name: &str) -> Option<(&str, bool)> {
    let types = name.strip_prefix(TENSOR_OP_PREFIX)?.strip_suffix(".sum")?;
    let plain = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    };
    if types.ends_with("_sparsity_on") || types.ends_with("_sparsity_off") || !plain(types) {
        return None;
    }
    match types.split_once("_dst_") {
        Some((src, dst)) if !src.is_empty() && !dst.is_empty() && !dst.contains("_dst_") => {
            Some((src, true))
        }
        Some(_) => None,
        None => Some((types, false)),
    }
}

/// Why counters cannot make an [`OpCounts`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpCountError {
    /// The meter's total does not fit `u64`.
    #[error("{meter}'s total for one kernel overflows u64 (the counter {metric} adds {value})")]
    Overflow {
        /// The meter.
        meter: MeterKind,
        /// The counter whose value overflowed it.
        metric: String,
        /// That counter's value.
        value: u64,
    },
}

/// Adds counters up into an [`OpCounts`]: feed every (metric, value) of one kernel
/// ([`OpCounter::add`]), then [`OpCounter::finish`]. A meter is counted when at least one of
/// its counters was given (a FLOP meter's missing counters are not assumed 0: a source that
/// records `ffma` but not `fadd` gives a count that under-bills, and [`OpCounter::partial`]
/// says which meters are so).
#[derive(Debug, Clone, Default)]
pub struct OpCounter {
    counts: [Option<u64>; 3],
    /// Per SASS metric: whether it was given.
    seen: [bool; 9],
    /// Tensor-path counters given: (source type, whether a destination type's part, value).
    /// Per source type, its destination parts are summed when given, else its total: a
    /// chip offers one or the other (GA100 `src_fp16_dst_fp16` and `_dst_fp32`, GH100
    /// `src_fp16`), and a source recording both must not count them twice.
    tensor: Vec<(String, bool, u64)>,
}

impl OpCounter {
    /// A counter with nothing added.
    pub fn new() -> Self {
        OpCounter::default()
    }

    /// Adds one counter's value. Returns `Ok(false)` for a metric that feeds no meter (left
    /// alone), `Ok(true)` when it was added.
    ///
    /// # Errors
    /// [`OpCountError::Overflow`] when the meter's total would overflow `u64`.
    pub fn add(&mut self, metric: &str, value: u64) -> Result<bool, OpCountError> {
        let (meter, weight) = match SASS_OP_METRICS.iter().position(|m| m.name == metric) {
            Some(i) => {
                self.seen[i] = true;
                let m = &SASS_OP_METRICS[i];
                (m.meter, m.flops_per_instruction)
            }
            None => {
                let Some((src, part)) = tensor_source(metric) else {
                    return Ok(false);
                };
                // Summed in `finish`, where which counters of a source count is known.
                self.tensor.push((src.to_string(), part, value));
                return Ok(true);
            }
        };
        let overflow = || OpCountError::Overflow {
            meter,
            metric: metric.to_string(),
            value,
        };
        let slot = &mut self.counts[OP_METERS.iter().position(|&m| m == meter).unwrap_or(0)];
        let add = value.checked_mul(weight).ok_or_else(overflow)?;
        *slot = Some(slot.unwrap_or(0).checked_add(add).ok_or_else(overflow)?);
        Ok(true)
    }

    /// The FLOP meters some but not all of whose three counters were given.
    pub fn partial(&self) -> Vec<MeterKind> {
        [
            MeterKind::FlopsFp64,
            MeterKind::FlopsFp32,
            MeterKind::FlopsFp16,
        ]
        .into_iter()
        .enumerate()
        .filter(|(i, _)| {
            let seen = &self.seen[i * 3..i * 3 + 3];
            seen.iter().any(|&s| s) && !seen.iter().all(|&s| s)
        })
        .map(|(_, m)| m)
        .collect()
    }

    /// `tensor_ops`: per source type, the sum of its destination parts when any was given,
    /// else its total; `Err(())` when the sum overflows `u64`. `Ok(None)` when no tensor-path
    /// counter was given.
    fn tensor_ops(&self) -> Result<Option<u64>, ()> {
        if self.tensor.is_empty() {
            return Ok(None);
        }
        let mut sum = 0u64;
        for (src, part, value) in &self.tensor {
            let has_parts = self.tensor.iter().any(|(s, p, _)| s == src && *p);
            if *part == has_parts {
                sum = sum.checked_add(*value).ok_or(())?;
            }
        }
        Ok(Some(sum))
    }

    /// Whether the tensor-path counters' sum overflows `u64` (`tensor_ops` is then left
    /// uncounted by [`OpCounter::finish`]).
    pub fn tensor_overflow(&self) -> bool {
        self.tensor_ops().is_err()
    }

    /// The counts (`tensor_ops` `None` when its sum overflows: [`OpCounter::tensor_overflow`]).
    pub fn finish(&self) -> OpCounts {
        OpCounts {
            flops_fp64: self.counts[0],
            flops_fp32: self.counts[1],
            flops_fp16: self.counts[2],
            tensor_ops: self.tensor_ops().ok().flatten(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fma_counts_twice_and_meters_stay_apart() {
        let mut c = OpCounter::new();
        for m in SASS_OP_METRICS {
            assert!(c.add(m.name, 10).expect("added"));
        }
        assert!(c
            .add("sm__ops_path_tensor_src_fp16_dst_fp32.sum", 7)
            .expect("added"));
        assert!(c
            .add("sm__ops_path_tensor_src_bf16_dst_fp32.sum", 5)
            .expect("added"));
        // A source's total beside its destination parts is not counted again; a source given
        // only as a total is.
        assert!(c
            .add("sm__ops_path_tensor_src_fp16.sum", 1_000)
            .expect("added"));
        assert!(c
            .add("sm__ops_path_tensor_src_int8.sum", 100)
            .expect("added"));
        // Parts of a counted total, instruction counts and other metrics are left alone.
        assert!(!c
            .add("sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_on.sum", 99)
            .expect("added"));
        assert!(!c
            .add("sm__inst_executed_pipe_tensor.sum", 99)
            .expect("added"));
        assert!(!c
            .add("smsp__sass_thread_inst_executed_op_ffma_pred_on.avg", 99)
            .expect("added"));
        let n = c.finish();
        assert_eq!(n.flops_fp64, Some(40));
        assert_eq!(n.flops_fp32, Some(40));
        assert_eq!(n.flops_fp16, Some(40));
        assert_eq!(n.tensor_ops, Some(112));
        assert!(c.partial().is_empty());
    }

    #[test]
    fn partial_and_overflow_are_told() {
        let mut c = OpCounter::new();
        c.add("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", 1)
            .expect("added");
        assert_eq!(c.partial(), vec![MeterKind::FlopsFp32]);
        assert_eq!(c.finish().flops_fp64, None);
        let e = c
            .add(
                "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
                u64::MAX / 2 + 1,
            )
            .expect_err("overflows");
        assert!(matches!(
            e,
            OpCountError::Overflow {
                meter: MeterKind::FlopsFp64,
                ..
            }
        ));
    }
}
