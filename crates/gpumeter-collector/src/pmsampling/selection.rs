//! Which counters are sampled: per role (SM active cycles, SM cycles elapsed, DRAM bytes read
//! and written) the first candidate metric the chip can PM-sample ([`select_metrics`]), asked
//! of a [`MetricProbe`] (CUPTI's profiler host object: [`HostProbe`]).

use cupti_sys::{Cupti, CuptiError, MetricType, PmHost};

/// Candidates for Σ over SMs of active cycles, in order of preference.
pub const SM_ACTIVE_CANDIDATES: &[&str] = &["sm__cycles_active.sum"];
/// Candidates for the cycles elapsed on one SM over a sample. `gpc__cycles_elapsed.max` counts
/// the GPC clock, which is the SM clock on every chip PM sampling supports.
pub const SM_ELAPSED_CANDIDATES: &[&str] = &["sm__cycles_elapsed.max", "gpc__cycles_elapsed.max"];
/// Candidates for bytes read from device memory. CUPTI 12.8 offers none of them for PM
/// sampling on GA100, GA102, GH100, AD102 or GB100 (only DRAM throughput percentages), so
/// `dram_bytes` is then not sampled (a warning).
pub const DRAM_READ_CANDIDATES: &[&str] = &["dram__bytes_read.sum", "fbpa__dram_read_bytes.sum"];
/// Candidates for bytes written to device memory (see [`DRAM_READ_CANDIDATES`]).
pub const DRAM_WRITE_CANDIDATES: &[&str] = &["dram__bytes_write.sum", "fbpa__dram_write_bytes.sum"];

pub(super) fn all_candidates() -> Vec<&'static str> {
    [
        SM_ACTIVE_CANDIDATES,
        SM_ELAPSED_CANDIDATES,
        DRAM_READ_CANDIDATES,
        DRAM_WRITE_CANDIDATES,
    ]
    .concat()
}

/// The metric chosen for each role (`None`: the chip has none of its candidates).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricSelection {
    /// Σ SM active cycles ([`PmSample::sm_active_cycles`](gpumeter_core::PmSample::sm_active_cycles)).
    pub sm_active: Option<&'static str>,
    /// SM elapsed cycles ([`PmSample::sm_elapsed_cycles`](gpumeter_core::PmSample::sm_elapsed_cycles)).
    pub sm_elapsed: Option<&'static str>,
    /// DRAM bytes read ([`PmSample::dram_read_bytes`](gpumeter_core::PmSample::dram_read_bytes)).
    pub dram_read: Option<&'static str>,
    /// DRAM bytes written ([`PmSample::dram_write_bytes`](gpumeter_core::PmSample::dram_write_bytes)).
    pub dram_write: Option<&'static str>,
}

impl MetricSelection {
    /// The chosen metrics in role order (SM active, SM elapsed, DRAM read, DRAM write),
    /// absent roles skipped: the order values are evaluated in.
    pub fn metrics(&self) -> Vec<&'static str> {
        [
            self.sm_active,
            self.sm_elapsed,
            self.dram_read,
            self.dram_write,
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// What the selection lacks, for a warning (`None` when complete).
    pub fn missing(&self) -> Option<String> {
        let mut gaps = Vec::new();
        if self.sm_active.is_none() || self.sm_elapsed.is_none() {
            gaps.push("SM activity (sm_active_ns will not be sampled)");
        }
        if self.dram_read.is_none() || self.dram_write.is_none() {
            gaps.push("DRAM bytes (dram_bytes will not be sampled)");
        }
        (!gaps.is_empty()).then(|| gaps.join("; "))
    }
}

/// What [`select_metrics`] asks of a chip.
pub trait MetricProbe {
    /// The chip's base counter metrics for PM sampling (names without a rollup, e.g.
    /// `sm__cycles_active`).
    ///
    /// # Errors
    /// A failed CUPTI call.
    fn base_counters(&mut self) -> Result<Vec<String>, CuptiError>;

    /// Whether one PM sampling configuration can hold all of `metrics`: `Ok(false)` when the
    /// chip refuses them, `Err` for any other failure.
    ///
    /// # Errors
    /// A failed CUPTI call other than a refusal of the metrics.
    fn accepts(&mut self, metrics: &[&str]) -> Result<bool, CuptiError>;
}

/// Chooses per role (SM active, SM elapsed, DRAM read, DRAM write, in that order) the first
/// candidate whose base metric the chip lists and that one configuration accepts together
/// with the metrics already chosen.
///
/// # Errors
/// A failed probe call other than a refusal.
pub fn select_metrics(probe: &mut dyn MetricProbe) -> Result<MetricSelection, CuptiError> {
    let bases = probe.base_counters()?;
    let mut chosen: Vec<&'static str> = Vec::new();
    let mut pick = |candidates: &[&'static str]| -> Result<Option<&'static str>, CuptiError> {
        for &c in candidates {
            let base = c.split('.').next().unwrap_or(c);
            if !bases.iter().any(|b| b == base) {
                continue;
            }
            let mut with = chosen.clone();
            with.push(c);
            if probe.accepts(&with)? {
                chosen.push(c);
                return Ok(Some(c));
            }
        }
        Ok(None)
    };
    Ok(MetricSelection {
        sm_active: pick(SM_ACTIVE_CANDIDATES)?,
        sm_elapsed: pick(SM_ELAPSED_CANDIDATES)?,
        dram_read: pick(DRAM_READ_CANDIDATES)?,
        dram_write: pick(DRAM_WRITE_CANDIDATES)?,
    })
}

/// [`MetricProbe`] through the real profiler host API for one chip: each question on a fresh
/// host object (a refused `cuptiProfilerHostConfigAddMetrics` leaves an object's state
/// undefined).
pub struct HostProbe<'a> {
    cupti: &'a Cupti,
    chip: String,
    availability: Option<Vec<u8>>,
}

impl<'a> HostProbe<'a> {
    /// A probe of chip `chip` (e.g. `"GH100"`) with the device's counter-availability image
    /// when there is one.
    pub fn new(cupti: &'a Cupti, chip: &str, availability: Option<Vec<u8>>) -> HostProbe<'a> {
        HostProbe {
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
            .pm_host_initialize(&self.chip, self.availability.as_deref())?;
        let r = f(self.cupti, &host);
        let _ = self.cupti.pm_host_deinitialize(host);
        r
    }
}

impl MetricProbe for HostProbe<'_> {
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
