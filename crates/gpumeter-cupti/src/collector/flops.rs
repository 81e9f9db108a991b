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

use std::collections::VecDeque;

use cupti_sys::{Cupti, CuptiError, MetricType, PmHost};
use gpumeter_core::ops::{is_tensor_op_metric, SASS_OP_METRICS, TENSOR_OP_PREFIX};

use super::pmsampling::{to_count, MetricProbe};
use crate::gmr::{KernelOpCounters, OpCounterValue, OpCounters};

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

/// The metrics chosen for one chip and what collecting them costs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlopsSelection {
    /// The SASS op counters the chip offers (of the nine), in [`SASS_OP_METRICS`] order.
    pub sass: Vec<String>,
    /// The tensor-path totals the chip offers (`sm__ops_path_tensor_src_<type>[_dst_<type>].sum`,
    /// not their `_sparsity_on/off` parts), sorted.
    pub tensor: Vec<String>,
    /// Replay passes the configuration of all of them needs
    /// (`cuptiProfilerHostGetNumOfPasses`): each kernel runs this many times.
    pub passes: usize,
}

impl FlopsSelection {
    /// Every chosen metric, SASS first: the order values are evaluated and written in.
    pub fn metrics(&self) -> Vec<&str> {
        self.sass
            .iter()
            .chain(&self.tensor)
            .map(String::as_str)
            .collect()
    }

    /// The tensor-path totals chosen that `tensor_ops` does not add up
    /// ([`gpumeter_core::ops::is_tensor_op_metric`]): recorded raw, not metered.
    pub fn tensor_not_metered(&self) -> Vec<&str> {
        self.tensor
            .iter()
            .map(String::as_str)
            .filter(|m| !is_tensor_op_metric(m))
            .collect()
    }
}

/// What [`select_flops_metrics`] asks of a chip beyond [`MetricProbe`].
pub trait PassProbe: MetricProbe {
    /// Replay passes one range-profiler configuration of `metrics` needs.
    ///
    /// # Errors
    /// A failed CUPTI call.
    fn passes(&mut self, metrics: &[&str]) -> Result<usize, CuptiError>;
}

/// Whether `base` (a base metric, no rollup) is a tensor-path total: the prefix
/// `sm__ops_path_tensor_src_`, not a `_sparsity_on` / `_sparsity_off` part.
pub fn is_tensor_path_total(base: &str) -> bool {
    base.starts_with(TENSOR_OP_PREFIX)
        && !base.ends_with("_sparsity_on")
        && !base.ends_with("_sparsity_off")
}

/// Chooses the FLOP counters of a chip: the SASS op counters whose base metric it lists, and
/// every tensor-path total it lists ([`is_tensor_path_total`], with `.sum`), all of them
/// together when one configuration accepts them, else one by one in that order, each kept when
/// the configuration accepts it with those kept before; then the pass count of what was kept.
///
/// # Errors
/// A failed probe call other than a refusal. An empty selection is not an error here (the
/// caller's [`FlopsError::NoMetrics`]).
pub fn select_flops_metrics(probe: &mut dyn PassProbe) -> Result<FlopsSelection, CuptiError> {
    let bases = probe.base_counters()?;
    let listed = |m: &str| {
        let base = m.strip_suffix(".sum").unwrap_or(m);
        bases.iter().any(|b| b == base)
    };
    let sass: Vec<String> = SASS_OP_METRICS
        .iter()
        .map(|m| m.name)
        .filter(|m| listed(m))
        .map(str::to_string)
        .collect();
    let mut tensor: Vec<String> = bases
        .iter()
        .filter(|b| is_tensor_path_total(b))
        .map(|b| format!("{b}.sum"))
        .collect();
    tensor.sort();
    let all: Vec<&str> = sass.iter().chain(&tensor).map(String::as_str).collect();
    let mut sel = if all.is_empty() || probe.accepts(&all)? {
        FlopsSelection {
            sass,
            tensor,
            passes: 0,
        }
    } else {
        let mut kept: Vec<&str> = Vec::new();
        for m in &all {
            let mut with = kept.clone();
            with.push(m);
            if probe.accepts(&with)? {
                kept = with;
            }
        }
        FlopsSelection {
            sass: sass
                .iter()
                .filter(|m| kept.contains(&m.as_str()))
                .cloned()
                .collect(),
            tensor: tensor
                .iter()
                .filter(|m| kept.contains(&m.as_str()))
                .cloned()
                .collect(),
            passes: 0,
        }
    };
    let metrics = sel.metrics();
    if !metrics.is_empty() {
        sel.passes = probe.passes(&metrics)?;
    }
    Ok(sel)
}

/// [`PassProbe`] through the real profiler host API, range-profiler type, for one chip: each
/// question on a fresh host object (a refused `cuptiProfilerHostConfigAddMetrics` leaves an
/// object's state undefined).
pub struct RangeHostProbe<'a> {
    cupti: &'a Cupti,
    chip: String,
    availability: Option<Vec<u8>>,
}

impl<'a> RangeHostProbe<'a> {
    /// A probe of chip `chip` (e.g. `"GH100"`) with the device's counter-availability image
    /// when there is one (`None` offline).
    pub fn new(cupti: &'a Cupti, chip: &str, availability: Option<Vec<u8>>) -> RangeHostProbe<'a> {
        RangeHostProbe {
            cupti,
            chip: chip.to_string(),
            availability,
        }
    }

    fn with_host<T>(
        &mut self,
        f: impl FnOnce(&Cupti, &PmHost) -> Result<T, CuptiError>,
    ) -> Result<T, CuptiError> {
        let host = self
            .cupti
            .range_host_initialize(&self.chip, self.availability.as_deref())?;
        let r = f(self.cupti, &host);
        let _ = self.cupti.pm_host_deinitialize(host);
        r
    }
}

impl MetricProbe for RangeHostProbe<'_> {
    fn base_counters(&mut self) -> Result<Vec<String>, CuptiError> {
        self.with_host(|c, h| c.pm_host_base_metrics(h, MetricType::Counter))
    }

    fn accepts(&mut self, metrics: &[&str]) -> Result<bool, CuptiError> {
        use cupti_sys::v13_4 as h;
        self.with_host(|c, host| match c.pm_host_add_metrics(host, metrics) {
            Ok(()) => Ok(true),
            Err(e)
                if matches!(
                    e.code(),
                    Some(h::CUPTI_ERROR_INVALID_PARAMETER | h::CUPTI_ERROR_INVALID_METRIC_NAME)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        })
    }
}

impl PassProbe for RangeHostProbe<'_> {
    fn passes(&mut self, metrics: &[&str]) -> Result<usize, CuptiError> {
        self.with_host(|c, host| {
            c.pm_host_add_metrics(host, metrics)?;
            let image = c.pm_host_config_image(host)?;
            c.profiler_host_num_passes(&image)
        })
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
    /// range *i* is launch *i*. When CUPTI dropped ranges, which launches lost theirs is not
    /// known: the launches of this decode beyond the ranges kept get no counters (their
    /// kernels' meters become not meterable, never a count of another kernel). Every launch
    /// noted is consumed.
    pub fn pair(
        &mut self,
        metrics: &[&str],
        decoded: &DecodedRanges,
        tally: &mut FlopsTally,
    ) -> Vec<KernelOpCounters> {
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake {
        bases: Vec<String>,
        refuse: Vec<&'static str>,
    }

    impl MetricProbe for Fake {
        fn base_counters(&mut self) -> Result<Vec<String>, CuptiError> {
            Ok(self.bases.clone())
        }
        fn accepts(&mut self, metrics: &[&str]) -> Result<bool, CuptiError> {
            Ok(!metrics.iter().any(|m| self.refuse.contains(m)))
        }
    }

    impl PassProbe for Fake {
        fn passes(&mut self, metrics: &[&str]) -> Result<usize, CuptiError> {
            Ok(metrics.len().div_ceil(4))
        }
    }

    #[test]
    fn selection_takes_what_the_chip_lists_and_leaves_sparsity_parts() {
        let mut bases: Vec<String> = SASS_OP_METRICS
            .iter()
            .map(|m| m.name)
            .filter(|m| !m.contains("_op_h"))
            .map(|m| m.trim_end_matches(".sum").to_string())
            .collect();
        for b in [
            "sm__ops_path_tensor_src_fp16_dst_fp32",
            "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_on",
            "sm__ops_path_tensor_src_fp64",
            "smsp__ops_path_tensor_src_fp64",
            "sm__inst_executed_pipe_tensor",
        ] {
            bases.push(b.to_string());
        }
        let mut p = Fake {
            bases,
            refuse: vec!["sm__ops_path_tensor_src_fp64.sum"],
        };
        let s = select_flops_metrics(&mut p).unwrap();
        assert_eq!(s.sass.len(), 6, "{s:?}");
        assert_eq!(s.tensor, ["sm__ops_path_tensor_src_fp16_dst_fp32.sum"]);
        assert_eq!(s.passes, 2);
        assert!(s.tensor_not_metered().is_empty());
    }

    #[test]
    fn ranges_pair_with_launches_in_order_and_drops_leave_launches_without_counts() {
        let mut o = LaunchOrder::default();
        for c in [7, 0, 8, 9] {
            o.launch(c);
        }
        assert_eq!(o.pending(), 3);
        let metrics = ["a.sum", "b.sum"];
        let d = DecodedRanges {
            ranges: vec![vec![1.0, 2.4], vec![f64::NAN, 3.0]],
            dropped: 1,
        };
        let mut t = FlopsTally::default();
        let k = o.pair(&metrics, &d, &mut t);
        assert_eq!(k.len(), 2);
        assert_eq!((k[0].correlation_id, k[1].correlation_id), (7, 8));
        assert_eq!(k[0].counters[1].value, 2);
        assert_eq!(k[1].counters.len(), 1);
        assert_eq!(
            t,
            FlopsTally {
                launches_with_counts: 2,
                launches_without_counts: 1,
                ranges_without_launch: 0,
                unusable_values: 1,
            }
        );
        assert_eq!(o.pending(), 0);
        let k = o.pair(&metrics, &d, &mut t);
        assert!(k.is_empty());
        assert_eq!(t.ranges_without_launch, 2);
    }

    #[test]
    fn config_is_validated() {
        assert!(FlopsConfig::default().validate().is_ok());
        let e = FlopsConfig { ranges_per_pass: 0 }.validate().unwrap_err();
        assert!(e.contains("flops.ranges_per_pass is 0"), "{e}");
        assert!(FlopsConfig {
            ranges_per_pass: 65_537
        }
        .validate()
        .is_err());
    }
}
