//! Energy (`energy_mj`): counter samples interpolated to windows and apportioned by `sm_ns`.

use super::*;

use super::shares::largest_remainder;

use std::collections::BTreeMap;

use num_bigint::BigInt;
use num_rational::BigRational;

use crate::record::DeviceSlot;
use crate::tenant::IDLE;
use crate::time::{WindowSize, MAX_RECORD_NS};

/// Energy per window of one device from its cumulative-counter samples:
/// within each run of samples (a run ends where the counter goes down), the counter is
/// interpolated linearly between consecutive samples, and a window's energy is
/// `⌊E(window end)⌋ − ⌊E(window start)⌋` clipped to the run, so the windows of a run sum
/// exactly to its last minus first sample. Returns the energy per window start (windows with
/// energy only), how many times the counter went down, how many pairs of consecutive samples
/// are implausible (more than 7 days apart, or rising faster than 100 kW), and, when `spans`
/// are given, how many pairs no span covers (between recordings); none of those is billed.
///
/// # Errors
/// `(first sample, last sample, windows)` as soon as the windows with energy that `cells` does
/// not hold yet pass `left` (the report's cell budget): nothing is booked.
pub(super) fn energy_per_window(
    samples: &[(u64, u64)],
    spans: &[(u64, u64)],
    window: WindowSize,
    cells: &Cells,
    left: u64,
) -> Result<EnergyWindows, (u64, u64, u64)> {
    let mut s = samples.to_vec();
    s.sort_unstable();
    // One sample per timestamp (the first after sorting: the smallest reading).
    s.dedup_by_key(|p| p.0);
    let mut out: BTreeMap<u64, u128> = BTreeMap::new();
    let mut resets = 0u64;
    let mut gaps = 0u64;
    let mut unobserved = 0u64;
    let mut new_windows = 0u64;
    for pair in s.windows(2) {
        let ((t0, e0), (t1, e1)) = (pair[0], pair[1]);
        if !spans.is_empty() && !spans.iter().any(|&(a, b)| a <= t0 && t1 <= b) {
            unobserved += 1;
            continue;
        }
        if e1 < e0 {
            resets += 1;
            continue;
        }
        // Samples more than 7 days apart (a clock fault, or a counter read once long ago):
        // interpolating between them would spread energy over a span no report observed.
        // Or a rise no GPU can draw: over 100 kW (0.1 mJ per ns) is a counter fault.
        if t1 - t0 > MAX_RECORD_NS || u128::from(e1 - e0) * 10 > u128::from(t1 - t0) {
            gaps += 1;
            continue;
        }
        let (dt, de) = (u128::from(t1 - t0), u128::from(e1 - e0));
        // Energy from t0 to t, floored: ⌊de × (t − t0) / dt⌋ (exact in u128 for any u64s
        // whose product fits; saturated otherwise, which only arises beyond 2^64 mJ).
        let upto = |t: u64| de.saturating_mul(u128::from(t - t0)) / dt;
        let mut t = t0;
        let mut booked = 0u128;
        while t < t1 {
            let w = window.start_of(t);
            let edge = w.saturating_add(window.ns()).min(t1);
            let e = if edge == t1 { de } else { upto(edge) };
            if e > booked {
                if !cells.contains(w) && !out.contains_key(&w) {
                    new_windows += 1;
                    if new_windows > left {
                        let (first, last) = (s[0].0, s[s.len() - 1].0);
                        return Err((first, last, new_windows));
                    }
                }
                *out.entry(w).or_insert(0) += e - booked;
            }
            booked = e;
            t = edge;
        }
    }
    Ok((out, resets, gaps, unobserved))
}

/// Energy per window start, how many times the counter went down, implausible pairs, pairs no
/// recording observed ([`energy_per_window`]).
pub(super) type EnergyWindows = (BTreeMap<u64, u128>, u64, u64, u64);

/// Splits a window's energy `e` (mJ) among tenants in proportion to their `sm_ns` in the
/// window (largest remainder); all of it to [`IDLE`] when nobody has `sm_ns` there.
pub(super) fn apportion_energy(e: u128, sm: &[(String, u128)]) -> Vec<(String, u128)> {
    let total: u128 = sm.iter().map(|(_, q)| q).sum();
    if total == 0 {
        return vec![(IDLE.to_string(), e)];
    }
    let shares: BTreeMap<String, BigRational> = sm
        .iter()
        .filter(|(_, q)| *q > 0)
        .map(|(t, q)| {
            (
                t.clone(),
                BigRational::new(BigInt::from(e) * BigInt::from(*q), BigInt::from(total)),
            )
        })
        .collect();
    largest_remainder(shares, e).into_iter().collect()
}

impl Meter {
    /// Declares that one recording observed the device's energy counter from `from_ns` to
    /// `to_ns` (its first and last sample). Once a device has spans, energy is interpolated
    /// only between samples that one span covers: the gap between two recordings of the GPU
    /// made one after the other was observed by none and is not billed (the report warns).
    /// Unknown slots are ignored.
    pub fn observe_energy_span(&mut self, device: DeviceSlot, from_ns: u64, to_ns: u64) {
        if let Some(d) = self.devices.get_mut(device.0 as usize) {
            d.energy_spans
                .push((from_ns.min(to_ns), from_ns.max(to_ns)));
        }
    }

    /// Records a sample of a device's cumulative energy counter (`energy_mj`): NVML
    /// `nvmlDeviceGetTotalEnergyConsumption`, mJ, at `timestamp_ns` (ns since the epoch,
    /// CUPTI's clock). The counter is interpolated linearly between samples to window edges;
    /// a window's energy is apportioned to tenants by their `sm_ns` in it, or to the tenant
    /// [`IDLE`] when it has none. Energy before the first and after the last sample is unknown
    /// and not billed; a counter that goes down (driver reload) ends one run of samples and
    /// starts another (the gap is not billed, and the report says so). Samples may arrive in
    /// any order; they are kept until the report is built. Unknown slots and zero timestamps
    /// are ignored.
    pub fn push_energy(&mut self, device: DeviceSlot, timestamp_ns: u64, energy_mj: u64) {
        if timestamp_ns == 0 {
            return;
        }
        if let Some(d) = self.devices.get_mut(device.0 as usize) {
            d.energy.push((timestamp_ns, energy_mj));
            d.last_ns = d.last_ns.max(timestamp_ns);
        }
    }
}
