//! Hardware-measured meters from CUPTI PM sampling (`sm_active_ns`, `dram_bytes`): each sample
//! interval's measured quantity, split at window edges, apportioned to attribution keys by
//! their modelled `sm_ns` in that piece; [`IDLE`](crate::IDLE) when no kernel ran.
//!
//! Samples accepted are held per device, sorted by start (accepted samples never overlap),
//! until the sweep passes them. The sweep's `book` adds, for every sample overlapping the
//! interval it books, Σ len·held per SM·ns slot (a (key, cap factor): the numbers the sweep
//! books as `sm_ns`) into the sample's piece of that window ([`DeviceState::feed_pm`]); a
//! device without pending samples pays one emptiness check per booked interval. Once the sweep
//! has passed a piece's end (a window edge or the sample's end), the piece is complete: its
//! quantity (cumulative floors within the sample) is apportioned among the keys by exact
//! rationals, largest remainder, ties to the key whose [`AttrKey`] sorts first, and booked
//! into the (device, window) cell as integers per key ([`Slot::Int`]) or [`Slot::Idle`]. So a
//! drain at a window edge hands over exactly the pieces before it.

use super::*;

use std::collections::VecDeque;

use num_bigint::BigInt;
use num_traits::{ToPrimitive, Zero};

use crate::record::{DeviceSlot, LossReason, PmSample};
use crate::time::{WindowSize, MAX_RECORD_NS};

/// The two PM-sampled meters, in the order of [`Held::q`].
pub(super) const PM_METERS: [MeterKind; 2] = [MeterKind::SmActiveNs, MeterKind::DramBytes];

/// A sample accepted and not yet fully apportioned.
#[derive(Debug, Clone)]
struct Held {
    sample: PmSample,
    /// Its `sm_active_ns` and `dram_bytes` ([`PM_METERS`] order), `None` when it does not
    /// carry that meter's counters.
    q: [Option<u128>; 2],
    /// Start of the part not yet apportioned (a window edge or the sample's start).
    done_to: u64,
    /// Σ len·held per (window start, SM·ns slot) the sweep booked inside the sample, for the
    /// pieces not yet apportioned.
    shares: Vec<(u64, u32, u128)>,
}

/// A device's PM sampling state.
#[derive(Debug, Clone, Default)]
pub(super) struct PmState {
    /// Samples accepted and not yet apportioned, sorted by start; they never overlap.
    held: VecDeque<Held>,
    /// Samples pushed that carry each meter's counters ([`PM_METERS`] order), lost or not:
    /// whether the device was sampled for that meter at all (kept across drains).
    pub(super) carrying: [u64; 2],
    /// Samples pushed with the overflow flag since the last drain (the warning's count).
    pub(super) overflows: u64,
    /// Samples lost as `invalid_field` since the last drain, and the first one's description.
    pub(super) invalid: u64,
    pub(super) first_invalid: Option<String>,
}

impl PmState {
    /// Whether any sample is waiting for the sweep.
    #[inline]
    pub(super) fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// Forgets the samples waiting (a drained report's copy: they belong to the next one).
    pub(super) fn clear_held(&mut self) {
        self.held.clear();
    }

    /// Forgets what the report handed over counts (loss-side counts), keeping meterability.
    pub(super) fn forget_counts(&mut self) {
        self.overflows = 0;
        self.invalid = 0;
        self.first_invalid = None;
    }
}

/// `⌊q × x ÷ d⌋` for `x ≤ d`, `d > 0`, without overflow for any `q` (`q = a·d + r`).
fn scaled(q: u128, x: u128, d: u128) -> u128 {
    let (a, r) = (q / d, q % d);
    // r < d < 2^63 and x ≤ d: r·x < 2^126.
    a * x + r * x / d
}

/// The quantities of a sample: `sm_active_ns` = ⌊(end − start) × active ÷ elapsed⌋ when both
/// cycle counters are there (0 when both are 0), `dram_bytes` = read + written when both are.
fn quantities(s: &PmSample) -> [Option<u128>; 2] {
    let len = u128::from(s.end_ns.saturating_sub(s.start_ns));
    let sm = match (s.sm_active_cycles, s.sm_elapsed_cycles) {
        (Some(_), Some(0)) => Some(0),
        (Some(a), Some(e)) => Some(len * u128::from(a) / u128::from(e)),
        _ => None,
    };
    let dram = match (s.dram_read_bytes, s.dram_write_bytes) {
        (Some(r), Some(w)) => Some(u128::from(r) + u128::from(w)),
        _ => None,
    };
    [sm, dram]
}

/// Splits `q` among attribution keys in proportion to `weights` (key, numerator over one
/// common denominator): floors, then one unit each to the largest remainders, ties to the key
/// whose [`AttrKey`] sorts first. Keys with weight 0 get nothing; the weights sum to more than 0.
fn apportion_keys(q: u128, weights: &[(u32, BigInt)], keys: &[AttrKey]) -> Vec<(u32, u128)> {
    let total: BigInt = weights.iter().map(|(_, w)| w).sum();
    let qb = BigInt::from(q);
    let mut out: Vec<(u32, u128, BigInt)> = weights
        .iter()
        .filter(|(_, w)| !w.is_zero())
        .map(|(k, w)| {
            let (f, r) = num_integer::Integer::div_mod_floor(&(&qb * w), &total);
            (*k, f.to_u128().unwrap_or(0), r)
        })
        .collect();
    let mut left = q.saturating_sub(out.iter().map(|o| o.1).sum());
    let mut order: Vec<usize> = (0..out.len()).collect();
    order.sort_by(|&a, &b| {
        out[b].2.cmp(&out[a].2).then_with(|| {
            keys.get(out[a].0 as usize)
                .cmp(&keys.get(out[b].0 as usize))
        })
    });
    for i in order {
        if left == 0 {
            break;
        }
        out[i].1 += 1;
        left -= 1;
    }
    out.into_iter().map(|(k, v, _)| (k, v)).collect()
}

impl Meter {
    /// Records one PM sample of a device ([`PmSample`]): CUPTI PM sampling's measurement of
    /// the interval `[start_ns, end_ns)` (CUPTI's clock, ns since the epoch).
    ///
    /// Its `sm_active_ns` (⌊(end − start) × sm_active_cycles ÷ sm_elapsed_cycles⌋, SM·ns, when
    /// it carries both cycle counters) and `dram_bytes` (read + written, when it carries both)
    /// are split at window edges (cumulative floors: the pieces sum to the sample's quantity)
    /// and each piece is apportioned to the attribution keys in proportion to their modelled
    /// `sm_ns` within it (largest remainder), or to [`IDLE`](crate::IDLE) when no kernel ran
    /// in it. Samples may arrive in any order, interleaved with the records, within the
    /// reordering horizon: one starting before the device's sweep is loss `late`.
    ///
    /// Loss, never metered: a zero timestamp (`zero_timestamp`), end before start
    /// (`end_before_start`), over 7 days (`too_long`), `invalid_field` for counters over no
    /// time (end = start), active cycles with no elapsed ones or more than elapsed × the SM
    /// count, or an overlap with another sample that is not its exact copy (`duplicate`). An
    /// `overflow` flag counts one loss `pm_sample_overflow` (a lower bound: the samples the
    /// overflow overwrote are unknown) and warns; the sample's own counters
    /// are still metered. A sample with neither pair of counters meters nothing. Unknown slots
    /// are ignored.
    pub fn push_pm_sample(&mut self, device: DeviceSlot, sample: &PmSample) {
        let Some(d) = self.devices.get_mut(device.0 as usize) else {
            return;
        };
        let s = *sample;
        if s.overflow {
            d.pm.overflows += 1;
            d.loss
                .entry(LossReason::PmSampleOverflow)
                .or_default()
                // A count of overflows: how many samples each overwrote is unknown.
                .add(1, true);
        }
        let q = quantities(&s);
        for (i, c) in q.iter().enumerate() {
            if c.is_some() {
                d.pm.carrying[i] += 1;
            }
        }
        let any_counter = s.sm_active_cycles.is_some()
            || s.sm_elapsed_cycles.is_some()
            || s.dram_read_bytes.is_some()
            || s.dram_write_bytes.is_some();
        if !any_counter {
            // Nothing measured (a sample only carrying the overflow flag): nothing to meter.
            return;
        }
        let reason = d.pm_sample_fault(&s).or_else(|| d.hold_pm_sample(s, q));
        if let Some((r, field, value)) = reason {
            d.loss.entry(r).or_default().add(1, false);
            if r == LossReason::InvalidField {
                d.pm.invalid += 1;
                if d.pm.first_invalid.is_none() {
                    d.pm.first_invalid = Some(format!(
                        "PM sample [{}, {}): {field} = {value}",
                        s.start_ns, s.end_ns
                    ));
                }
            }
        }
    }
}

/// Why a PM sample is lost: the reason, and for `invalid_field` the field and its value.
type PmFault = (LossReason, &'static str, String);

/// An `invalid_field` loss of `field` with `value`.
fn invalid(field: &'static str, value: String) -> Option<PmFault> {
    Some((LossReason::InvalidField, field, value))
}

impl DeviceState {
    /// Why sample `s` (carrying some counter) is lost on its own — times, counters, late —, or
    /// `None`.
    fn pm_sample_fault(&self, s: &PmSample) -> Option<PmFault> {
        if s.start_ns == 0 || s.end_ns == 0 {
            Some((LossReason::ZeroTimestamp, "", String::new()))
        } else if s.end_ns < s.start_ns {
            Some((LossReason::EndBeforeStart, "", String::new()))
        } else if s.end_ns == s.start_ns {
            invalid(
                "end_ns",
                format!("{} (= start_ns: counters over no time)", s.end_ns),
            )
        } else if s.end_ns - s.start_ns > MAX_RECORD_NS {
            Some((LossReason::TooLong, "", String::new()))
        } else if matches!((s.sm_active_cycles, s.sm_elapsed_cycles), (Some(a), Some(0)) if a > 0) {
            invalid(
                "sm_elapsed_cycles",
                format!(
                    "0 with sm_active_cycles = {}",
                    s.sm_active_cycles.unwrap_or(0)
                ),
            )
        } else if let Some((a, e, n)) = match (s.sm_active_cycles, s.sm_elapsed_cycles) {
            (Some(a), Some(e)) => self
                .info
                .sm_count
                .filter(|&n| u128::from(a) > u128::from(e) * u128::from(n))
                .map(|n| (a, e, n)),
            _ => None,
        } {
            invalid(
                "sm_active_cycles",
                format!("{a} > sm_elapsed_cycles {e} × {n} SMs"),
            )
        } else if self.started && s.start_ns < self.swept_to {
            Some((LossReason::Late, "", String::new()))
        } else {
            None
        }
    }

    /// Holds sample `s` (quantities `q`) in start order until the sweep passes it, or the loss
    /// when it overlaps a held sample: `duplicate` for an exact copy, else `invalid_field`.
    fn hold_pm_sample(&mut self, s: PmSample, q: [Option<u128>; 2]) -> Option<PmFault> {
        // Overlap with a held sample: the neighbours in start order.
        let at = self
            .pm
            .held
            .partition_point(|h| h.sample.start_ns < s.start_ns);
        let before = at.checked_sub(1).and_then(|i| self.pm.held.get(i));
        let after = self.pm.held.get(at);
        let over = before
            .filter(|h| h.sample.end_ns > s.start_ns)
            .or(after.filter(|h| h.sample.start_ns < s.end_ns));
        match over {
            Some(h) if h.sample == s => Some((LossReason::Duplicate, "", String::new())),
            Some(h) => invalid(
                "start_ns",
                format!(
                    "[{}, {}) overlaps the sample [{}, {})",
                    s.start_ns, s.end_ns, h.sample.start_ns, h.sample.end_ns
                ),
            ),
            None => {
                self.pm.held.insert(
                    at,
                    Held {
                        sample: s,
                        q,
                        done_to: s.start_ns,
                        shares: Vec::new(),
                    },
                );
                None
            }
        }
    }

    /// Adds the running set's Σ len·held per SM·ns slot over `[a, b)` (already booked as
    /// `sm_ns`) to the held samples overlapping it, per window. Only called when samples are
    /// held.
    #[cold]
    #[inline(never)]
    pub(super) fn feed_pm(&mut self, a: u64, b: u64, window: WindowSize) {
        let held = &self.summary.held;
        if held.is_empty() {
            return;
        }
        let first = self.pm.held.partition_point(|h| h.sample.end_ns <= a);
        for h in self.pm.held.range_mut(first..) {
            if h.sample.start_ns >= b {
                break;
            }
            let (lo, hi) = (a.max(h.sample.start_ns), b.min(h.sample.end_ns));
            let mut t = lo;
            while t < hi {
                let w = window.start_of(t);
                let edge = w.saturating_add(window.ns()).min(hi);
                let len = u128::from(edge - t);
                for &(sm, _, n, _) in held {
                    let v = len * u128::from(n);
                    match h
                        .shares
                        .iter_mut()
                        .find(|(sw, ss, _)| *sw == w && *ss == sm)
                    {
                        Some(e) => e.2 += v,
                        None => h.shares.push((w, sm, v)),
                    }
                }
                t = edge;
            }
        }
    }

    /// Apportions every piece of the held samples that ends at or before `upto` (the sweep's
    /// position: everything before it is booked) and books it into the cells; frees the
    /// samples fully apportioned.
    #[cold]
    #[inline(never)]
    pub(super) fn complete_pm(&mut self, upto: u64, window: WindowSize, keys: &[AttrKey]) {
        while let Some(h) = self.pm.held.front_mut() {
            let (s, e) = (h.sample.start_ns, h.sample.end_ns);
            let t0 = h.done_to;
            let w = window.start_of(t0);
            let t1 = w.saturating_add(window.ns()).min(e);
            if t1 > upto {
                // Held samples never overlap: no later one has a piece ending before `upto`.
                break;
            }
            let d = u128::from(e - s);
            let pieces: Vec<(usize, u128)> = h
                .q
                .iter()
                .enumerate()
                .filter_map(|(i, q)| {
                    let q = (*q)?;
                    let piece = scaled(q, u128::from(t1 - s), d) - scaled(q, u128::from(t0 - s), d);
                    Some((i, piece))
                })
                .collect();
            let mine: Vec<(u32, u128)> = {
                let mut v = Vec::new();
                h.shares.retain(|&(sw, slot, x)| {
                    if sw == w {
                        v.push((slot, x));
                        false
                    } else {
                        true
                    }
                });
                v
            };
            h.done_to = t1;
            if t1 == e {
                self.pm.held.pop_front();
            }
            if pieces.iter().all(|&(_, p)| p == 0) {
                continue;
            }
            let weights = self.key_weights(&mine);
            if !self.cells.contains(w) && self.budget.used() >= self.budget.limit {
                self.fault.get_or_insert(DeviceFault::TooManyCells {
                    what: "PM samples",
                    from: s,
                    to: e,
                    windows: 1,
                });
            }
            let cell = self.cells.at(&self.budget, &mut self.fault, w, window);
            for (i, piece) in pieces {
                if piece == 0 {
                    continue;
                }
                let meter = PM_METERS[i];
                let shares = if weights.is_empty() {
                    vec![(None, piece)]
                } else {
                    apportion_keys(piece, &weights, keys)
                        .into_iter()
                        .map(|(k, v)| (Some(k), v))
                        .collect()
                };
                for (k, v) in shares {
                    if v == 0 {
                        continue;
                    }
                    let slot = match k {
                        Some(k) => self.slots.int(k, meter),
                        None => self.slots.idle(meter),
                    };
                    add_checked(
                        cell.entry(slot, &mut self.slots),
                        v,
                        &mut self.fault,
                        meter,
                        w,
                    );
                }
            }
        }
    }

    /// Per attribution key, its modelled SM·ns in a piece as a numerator over one common
    /// denominator (the least common multiple of the cap factors' denominators): Σ value ×
    /// num × (L ÷ den) over its (key, cap factor) slots. Empty when nothing was held.
    fn key_weights(&self, shares: &[(u32, u128)]) -> Vec<(u32, BigInt)> {
        let factor = |slot: u32| match self.slots.what[slot as usize] {
            Slot::SmExact(k) => (k, (1u128, 1u128)),
            Slot::SmCapped(k, f) => (k, self.slots.factors[f as usize]),
            // Only SM·ns slots are fed ([`DeviceState::feed_pm`]).
            _ => (u32::MAX, (0, 1)),
        };
        let mut lcm = BigInt::from(1u8);
        for &(slot, _) in shares {
            let den = BigInt::from(factor(slot).1 .1);
            let g = num_integer::Integer::gcd(&lcm, &den);
            lcm = lcm / g * den;
        }
        let mut per_key: BTreeMap<u32, BigInt> = BTreeMap::new();
        for &(slot, v) in shares {
            let (k, (num, den)) = factor(slot);
            if k == u32::MAX || v == 0 || num == 0 {
                continue;
            }
            *per_key.entry(k).or_default() +=
                BigInt::from(v) * BigInt::from(num) * (&lcm / BigInt::from(den));
        }
        per_key.into_iter().filter(|(_, w)| !w.is_zero()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that is sampled but runs no kernel: a time-ordered source settling it as it
    /// goes keeps only the samples not yet passed, and the report is the same as without
    /// settling (everything idle).
    #[test]
    fn settling_a_device_with_samples_only_frees_them() {
        let base = 1_700_000_000_000_000_000u64;
        let run = |settle: bool| {
            let mut m = Meter::new(MeterConfig::default());
            let dev = m.register_device(DeviceInfo::bare("GPU-pm", 0));
            let mut most = 0;
            for i in 0..5_000u64 {
                let s = PmSample {
                    start_ns: base + i * 100_000,
                    end_ns: base + (i + 1) * 100_000,
                    sm_active_cycles: Some(i % 97),
                    sm_elapsed_cycles: Some(100),
                    dram_read_bytes: Some(i),
                    dram_write_bytes: Some(1),
                    overflow: false,
                };
                if settle {
                    m.settle(dev, s.start_ns);
                }
                m.push_pm_sample(dev, &s);
                most = most.max(m.devices[0].pm.held.len());
            }
            (most, m.finish().expect("report"))
        };
        let (held, settled) = run(true);
        let (all, whole) = run(false);
        assert!(held <= 2, "{held} samples held");
        assert_eq!(all, 5_000);
        assert_eq!(settled.usage, whole.usage);
        assert_eq!(settled.sha256, whole.sha256);
        assert!(settled.usage.iter().all(|u| u.tenant == crate::IDLE));
    }

    #[test]
    fn scaled_is_the_exact_floor_even_past_128_bits() {
        let q = u128::MAX / 3;
        let d = 7 * 86_400_000_000_000u128;
        for x in [0, 1, d / 3, d - 1, d] {
            let want = BigInt::from(q) * BigInt::from(x) / BigInt::from(d);
            assert_eq!(BigInt::from(scaled(q, x, d)), want, "x = {x}");
        }
    }

    #[test]
    fn apportion_keys_sums_and_breaks_ties_by_key_content() {
        let keys = vec![
            AttrKey {
                external_id: Some(2),
                process_id: None,
                source_tenant: None,
            },
            AttrKey {
                external_id: Some(1),
                process_id: None,
                source_tenant: None,
            },
        ];
        // Equal weights, one unit: the key sorting first by content (external id 1, id 1).
        let w = vec![(0, BigInt::from(5)), (1, BigInt::from(5))];
        assert_eq!(apportion_keys(1, &w, &keys), vec![(0, 0), (1, 1)]);
        let w = vec![(0, BigInt::from(1)), (1, BigInt::from(2))];
        let out = apportion_keys(100, &w, &keys);
        assert_eq!(out, vec![(0, 33), (1, 67)]);
    }
}
