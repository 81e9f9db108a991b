//! Which FLOP counters are collected on a chip ([`select_flops_metrics`]): those of the nine
//! SASS op counters it offers and every tensor-path total it offers, with the replay passes
//! they cost, asked of a [`PassProbe`] (the range profiler's host object: [`RangeHostProbe`]).

use cupti_sys::{Cupti, CuptiError, MetricType, PmHost};
use gpumeter_core::ops::{is_tensor_op_metric, SASS_OP_METRICS, TENSOR_OP_PREFIX};

use crate::pmsampling::MetricProbe;

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
/// caller's [`FlopsError::NoMetrics`](crate::FlopsError::NoMetrics)).
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
