//! Building the report: drain, finish, per-cell integer quantities (exact rationals, largest remainder).

use super::*;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use std::sync::atomic::Ordering as AtomicOrdering;

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{ToPrimitive, Zero};

use crate::device::DeviceInfo;
use crate::report::{
    DeviceEntry, LossEntry, MeterKind, NotMeterable, OpenAllocation, Quantity, RecordCounts,
    TotalRow, UsageReport, UsageRow, METERING_POLICY, USAGE_SCHEMA,
};
use crate::tenant::UNATTRIBUTED;
use crate::time::{rfc3339, rfc3339_ns};
use crate::warning::{NotMeterableCode, Warning, WarningCode};

/// Per meter, per tenant quantities: (meter, [(tenant, quantity)]).
pub(super) type CellQuantities = Vec<(MeterKind, Vec<(String, u128)>)>;

/// Per meter, per tenant integer quantities of one cell, in meter order then tenant order.
///
/// # Errors
/// The meter whose per-tenant sum (several attribution keys of one tenant) exceeds
/// `u128::MAX`.
pub(super) fn cell_quantities(
    cell: &Cell,
    slots: &Slots,
    tenants: &[String],
    sm_count: Option<u32>,
    warp_sm_count: Option<u32>,
    sets: &[Arc<[u32]>],
) -> Result<CellQuantities, MeterKind> {
    let mut out: BTreeMap<MeterKind, BTreeMap<String, u128>> = BTreeMap::new();
    // gpu_busy_ns: each set's length divided equally among its distinct tenants: integer
    // sums per (tenant, number of distinct tenants D), then one rational Σ_D sum / D per
    // tenant (never a rational per set and tenant).
    let mut per_d: BTreeMap<&String, BTreeMap<usize, u128>> = BTreeMap::new();
    let mut busy_total: u128 = 0;
    let (mut sm_exact, mut sm_capped) = (Vec::new(), Vec::new());
    let (mut warp_exact, mut warp_capped) = (Vec::new(), Vec::new());
    // Every sum below is by tenant (and meter, D or factor) in ordered maps: the cell's
    // first-touch order of its slots changes no quantity.
    for (slot, q) in cell.iter() {
        match slots.what[slot as usize] {
            Slot::Int(key, meter) => {
                let t = out
                    .entry(meter)
                    .or_default()
                    .entry(tenants[key as usize].clone())
                    .or_insert(0);
                *t = t.checked_add(q).ok_or(meter)?;
            }
            Slot::Busy(set) => {
                busy_total += q;
                let ts: BTreeSet<&String> = sets[set as usize]
                    .iter()
                    .map(|&k| &tenants[k as usize])
                    .collect();
                let d = ts.len();
                for t in ts {
                    *per_d.entry(t).or_default().entry(d).or_insert(0) += q;
                }
            }
            Slot::Idle(meter) => {
                let t = out
                    .entry(meter)
                    .or_default()
                    .entry(crate::tenant::IDLE.to_string())
                    .or_insert(0);
                *t = t.checked_add(q).ok_or(meter)?;
            }
            Slot::SmExact(key) => sm_exact.push((key, q)),
            Slot::WarpExact(key) => warp_exact.push((key, q)),
            Slot::SmCapped(key, f) => sm_capped.push((key, slots.factors[f as usize], q)),
            Slot::WarpCapped(key, f) => warp_capped.push((key, slots.factors[f as usize], q)),
        }
    }
    let busy: BTreeMap<String, BigRational> = per_d
        .into_iter()
        .map(|(t, by_d)| {
            let share = by_d.into_iter().fold(BigRational::zero(), |acc, (d, sum)| {
                acc + BigRational::new(BigInt::from(sum), BigInt::from(d))
            });
            (t.clone(), share)
        })
        .collect();
    if busy_total > 0 {
        out.insert(MeterKind::GpuBusyNs, largest_remainder(busy, busy_total));
    }
    if sm_count.is_some() {
        // Σ over tenants is an integer when only the device caps: per elementary interval the
        // capped shares sum to len × SMs. Partition caps can leave a fraction: floored.
        if let Some(q) = capped_shares(&sm_exact, &sm_capped, tenants) {
            out.insert(MeterKind::SmNs, q);
        }
    }
    if warp_sm_count.is_some() {
        // Σ over tenants may be fractional when capped: the cell's total is its floor.
        if let Some(q) = capped_shares(&warp_exact, &warp_capped, tenants) {
            out.insert(MeterKind::WarpNs, q);
        }
    }
    Ok(out
        .into_iter()
        .map(|(m, per)| (m, per.into_iter().collect()))
        .collect())
}

/// Per tenant integer shares of a capped time meter: `exact` (key, value) plus, per (key,
/// distinct cap factor `num / den`, value), `value × num / den` (a key or (key, factor) may
/// come more than once: its values add); exact rationals, the cell's total
/// floored, then largest remainder. `None` when the total is 0.
///
/// Values are first summed per (tenant, factor) as integers. The rationals are then formed
/// over one common denominator `L`, the least common multiple of the cell's distinct `den`s:
/// a tenant's share is `N / L` with `N = Σ value × num × (L / den)`, so no rational is ever
/// reduced (adding fractions one by one costs a gcd of ever larger numbers per term, which
/// made cells with thousands of distinct factors take minutes). Floors, the total and the
/// order of fractional parts are those of the exact rationals: the same numbers.
pub(super) fn capped_shares(
    exact: &[(u32, u128)],
    capped: &[(u32, Factor, u128)],
    tenants: &[String],
) -> Option<BTreeMap<String, u128>> {
    let mut whole: BTreeMap<&String, BigInt> = BTreeMap::new();
    for &(k, q) in exact {
        *whole.entry(&tenants[k as usize]).or_default() += q;
    }
    // Per tenant and denominator: Σ value × num (an integer).
    let mut per_den: BTreeMap<&String, BTreeMap<u128, BigInt>> = BTreeMap::new();
    for &(k, (num, den), v) in capped {
        *per_den
            .entry(&tenants[k as usize])
            .or_default()
            .entry(den)
            .or_default() += BigInt::from(v) * BigInt::from(num);
    }
    let dens: BTreeSet<u128> = per_den.values().flat_map(|m| m.keys().copied()).collect();
    let mut lcm = BigInt::from(1u8);
    for &d in &dens {
        let d = BigInt::from(d);
        let g = num_integer::Integer::gcd(&lcm, &d);
        lcm = lcm / g * d;
    }
    let mut numerators: BTreeMap<String, BigInt> = BTreeMap::new();
    for (t, w) in whole {
        numerators.insert(t.clone(), w * &lcm);
    }
    for (t, by_den) in per_den {
        let e = numerators.entry(t.clone()).or_default();
        for (den, v) in by_den {
            *e += v * (&lcm / BigInt::from(den));
        }
    }
    let sum: BigInt = numerators.values().sum();
    let total = (sum / &lcm).to_u128().filter(|&t| t > 0)?;
    Some(largest_remainder_over(numerators, &lcm, total))
}

/// [`largest_remainder`] for shares `N / den` over one denominator `den > 0`: the same
/// floors and the same order of fractional parts, compared as the integers `N mod den`.
fn largest_remainder_over(
    numerators: BTreeMap<String, BigInt>,
    den: &BigInt,
    total: u128,
) -> BTreeMap<String, u128> {
    hand_out(
        numerators.into_iter().map(|(t, n)| {
            let (q, r) = num_integer::Integer::div_mod_floor(&n, den);
            (t, q.to_u128().unwrap_or(0), r)
        }),
        total,
    )
}

/// Turns exact rational shares summing to `total` into integers summing to `total`: floors,
/// then one unit each to the largest fractional parts, ties to the tenant name that sorts first
/// (bytewise).
pub(crate) fn largest_remainder(
    shares: BTreeMap<String, BigRational>,
    total: u128,
) -> BTreeMap<String, u128> {
    hand_out(
        shares.into_iter().map(|(t, r)| {
            let f = r.floor();
            let fi = f.to_integer().to_u128().unwrap_or(0);
            (t, fi, r - f)
        }),
        total,
    )
}

/// The largest-remainder rule over (tenant, floor, fractional part): the floors, then one
/// unit each to the largest fractional parts until the floors sum to `total`, equal
/// fractions to the name that sorts first.
fn hand_out<F: Ord>(
    shares: impl Iterator<Item = (String, u128, F)>,
    total: u128,
) -> BTreeMap<String, u128> {
    let mut floors: BTreeMap<String, u128> = BTreeMap::new();
    let mut fracs: Vec<(F, String)> = Vec::new();
    let mut sum: u128 = 0;
    for (t, fi, frac) in shares {
        sum += fi;
        fracs.push((frac, t.clone()));
        floors.insert(t, fi);
    }
    let mut left = total.saturating_sub(sum);
    // Largest fraction first; equal fractions: name ascending.
    fracs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    for (_, t) in fracs {
        if left == 0 {
            break;
        }
        if let Some(v) = floors.get_mut(&t) {
            *v += 1;
            left -= 1;
        }
    }
    floors
}

/// Whether each PM-sampled meter ([`PM_METERS`]) is meterable on device `d`, with the
/// `not_meterable` entries and warnings of those that are not, and the device's warnings of
/// PM sample overflow and invalid samples. `apportionable`: `sm_ns` is meterable on the device
/// or it ran no kernel (everything is idle).
fn pm_meterability(
    d: &DeviceState,
    apportionable: bool,
    not_meterable: &mut Vec<NotMeterable>,
    warnings: &mut Vec<Warning>,
) -> [bool; 2] {
    let info = &d.info;
    let sampled = d.pm.carrying.iter().any(|&n| n > 0);
    let mut out = [false; 2];
    for (i, &meter) in PM_METERS.iter().enumerate() {
        let counters = match meter {
            MeterKind::SmActiveNs => "sm_active_cycles and sm_elapsed_cycles",
            _ => "dram_read_bytes and dram_write_bytes",
        };
        let (code, why) = if d.pm.carrying[i] > 0 {
            if apportionable {
                out[i] = true;
                continue;
            }
            (
                NotMeterableCode::SmNsNotMeterable,
                format!(
                    "{} is apportioned to tenants by sm_ns, which is not meterable on this device",
                    meter.as_str()
                ),
            )
        } else if sampled {
            (
                NotMeterableCode::NotSampled,
                format!("no PM sample of this device carries {counters}"),
            )
        } else {
            continue;
        };
        warnings.push(Warning::new(
            WarningCode::NotMeterable,
            format!(
                "{} is not meterable on device {} ({}): {why}",
                meter.as_str(),
                info.id,
                info.key
            ),
        ));
        not_meterable.push(NotMeterable {
            meter,
            code,
            reason: why,
        });
    }
    if d.pm.overflows > 0 {
        warnings.push(Warning::new(
            WarningCode::PmSampleOverflow,
            format!(
                "CUPTI PM sampling's hardware buffer overflowed {} {} on device {} ({}): the \
                 samples it overwrote are not metered (sm_active_ns and dram_bytes miss what \
                 they measured); at least {} lost (loss pm_sample_overflow)",
                d.pm.overflows,
                if d.pm.overflows == 1 { "time" } else { "times" },
                info.id,
                info.key,
                d.pm.overflows
            ),
        ));
    }
    if let Some(first) = &d.pm.first_invalid {
        warnings.push(Warning::new(
            WarningCode::InvalidField,
            format!(
                "{} PM samples of device {} ({}) have a field that cannot be metered and are \
                 lost as invalid_field; the first: {first}",
                d.pm.invalid, info.id, info.key
            ),
        ));
    }
    out
}

impl Meter {
    /// Hands over and forgets the windows that end at or before `before_ns`: the
    /// returned report holds their usage; the meter keeps the later windows, the records
    /// still inside the reordering horizon and the allocations still held.
    ///
    /// Windows are those of [`MeterConfig::window`]; the edge is `before_ns` rounded down to a
    /// window boundary. What the drain does, in order:
    /// - every device's sweep moves to the edge (at least): the records buffered before it are
    ///   booked, and from now on a record starting before it — on any device, also one
    ///   registered later — is loss `late` (it would change a window already handed over);
    /// - PM samples ([`Meter::push_pm_sample`]) are apportioned per piece (a sample's part in
    ///   one window), so the pieces before the edge are handed over and a sample across the
    ///   edge keeps its later pieces for the next report: exact, as for work;
    /// - allocations still held are billed up to the edge (they are held at least that long:
    ///   a release before it would now be late) and stay held from there; with `before_ns =
    ///   u64::MAX` (everything: the meter's end; every window is handed over, also the last
    ///   one before the end of time, which ends past `u64::MAX`) up to the report's end, as
    ///   [`Meter::finish`] bills them;
    /// - the report is built from the windows before the edge, with the loss, skipped counts,
    ///   record counts and warnings gathered since the last drain, which the meter then
    ///   forgets; a device's meterability (`not_meterable`) is not forgotten. Kernels the
    ///   sweep has not started (buffered, or starting at the edge itself) are counted in the
    ///   next report, which meters them or counts them as loss `concurrent_kernel_limit`.
    ///
    /// So the drained reports of a meter and its final report sum, row by row, to the report
    /// the meter would have built without draining (when no record arrives late because of a
    /// drain, and no allocation is still held past the latest work at a drain: such memory
    /// is billed up to the drain's edge, which an undrained report does not know of), and no
    /// quantity is handed over twice. The report has no `open_allocations`
    /// (the meter still holds them), except the drain of everything (`u64::MAX`), which lists
    /// them as [`Meter::finish`] does (billed to the report's end) and forgets them: the next
    /// report takes them as opening state. Drained windows free their cells in the
    /// [`MeterConfig::max_cells`] budget.
    ///
    /// # Errors
    /// [`MeterError::DrainWithEnergy`] when the meter holds energy samples (energy is
    /// apportioned over whole runs of samples and cannot be drained yet); otherwise as
    /// [`Meter::finish`]. On an error the meter is left exactly as it was (nothing handed
    /// over, forgotten or moved).
    pub fn drain(&mut self, before_ns: u64) -> Result<UsageReport, MeterError> {
        if self.devices.iter().any(|d| !d.energy.is_empty()) {
            return Err(MeterError::DrainWithEnergy);
        }
        // A drain that fails (memory held up to an edge past the cell budget, a quantity past
        // 128 bits) leaves the meter exactly as it was: usable, nothing moved.
        let mut before = self.deep_clone();
        for (b, d) in before.devices.iter_mut().zip(&self.devices) {
            b.dups = d.dups.full_copy();
        }
        match self.drain_now(before_ns) {
            Ok(report) => Ok(report),
            Err(e) => {
                *self = before;
                Err(e)
            }
        }
    }

    /// [`Meter::drain`]'s work; on an error the meter is half-changed (the caller restores it).
    pub(super) fn drain_now(&mut self, before_ns: u64) -> Result<UsageReport, MeterError> {
        let window = self.config.window;
        let end = before_ns == u64::MAX;
        // Everything: every window, also the last one before the end of time, which ends past
        // u64::MAX (rounding u64::MAX down to its start left that window out of the report and
        // in the meter, where nothing could ever hand it over).
        let edge = if end {
            u64::MAX
        } else {
            window.start_of(before_ns)
        };
        for d in &mut self.devices {
            if !d.started || d.swept_to < edge {
                d.started = true;
                d.advance(edge, window, &self.keys);
            }
        }
        self.drained_to = self.drained_to.max(edge);
        // Memory held across the edge is held up to it: no release before the edge can be
        // accepted any more (it would be late), and the windows before it are handed over
        // now, so a later release must not book into them. Draining everything
        // (`u64::MAX`) is the end: held memory is billed to the report's end as `finish`
        // bills it, and nothing can follow (every later record is late).
        let bill_to = if end {
            match self.devices.iter().map(|d| d.work_end).max() {
                Some(w) if w > 0 => w,
                _ => self.devices.iter().map(|d| d.last_ns).max().unwrap_or(0),
            }
        } else {
            edge
        };
        for d in &mut self.devices {
            let held: Vec<HeldAt> = d
                .open
                .iter()
                .filter(|(_, a)| a.since < bill_to)
                .map(|(k, _)| *k)
                .collect();
            for k in held {
                if let Some(a) = d.open.get(&k).copied() {
                    if d.hold(a, bill_to, window) {
                        if let Some(open) = d.open.get_mut(&k) {
                            open.since = bill_to;
                        }
                    }
                }
            }
        }
        // Kernels still buffered (not yet started by the sweep) were counted at arrival, but
        // they may yet be lost to the concurrent-kernel limit, which takes their count back:
        // they are counted in the report that meters them, the next one, not in this one.
        let carried: Vec<u64> = self
            .devices
            .iter()
            .map(|d| d.pending.iter().filter(|p| p.0.is_kernel()).count() as u64)
            .collect();
        let carried_total: u64 = carried.iter().sum();
        // The handed-over part: the windows before the edge and what was gathered since the
        // last drain, nothing buffered; at the end (`u64::MAX`) the allocations still held,
        // listed in `open_allocations` for the next report's opening state.
        let mut part = self.deep_clone();
        part.counts.kernel = part.counts.kernel.saturating_sub(carried_total);
        for (d, &c) in part.devices.iter_mut().zip(&carried) {
            d.records = d.records.saturating_sub(c);
            d.kernels = d.kernels.saturating_sub(c);
            let later = d.cells.split_off(edge);
            drop(later);
            d.pending.clear();
            d.run.clear();
            d.mem_pending.clear();
            // PM samples still held: their pieces before the edge are booked (the sweep passed
            // them); the rest belongs to the next report.
            d.pm.clear_held();
            if !end {
                d.open.clear();
            }
            d.clear_dups();
        }
        part.opening.clear();
        let report = part.finish()?;
        // Forget what was handed over.
        let mut freed = 0u64;
        for (d, &c) in self.devices.iter_mut().zip(&carried) {
            let later = d.cells.split_off(edge);
            freed += d.cells.len() as u64;
            d.cells = later;
            d.loss.clear();
            d.records = c;
            d.kernels = c;
            d.kernels_over_limit = 0;
            d.memory_events = 0;
            d.reallocations = 0;
            d.pm.forget_counts();
            if end {
                d.open.clear();
            }
        }
        self.budget
            .used
            .fetch_sub(freed.min(self.budget.used()), AtomicOrdering::Relaxed);
        self.counts = RecordCounts {
            kernel: carried_total,
            ..RecordCounts::default()
        };
        self.unplaced.clear();
        self.warnings.clear();
        Ok(report)
    }

    /// Books everything still buffered and builds the report, digest included.
    ///
    /// Allocations still held are billed to the report's end (the latest end of accepted work
    /// on any device; without work, the latest memory, energy or opening time) and listed in
    /// `open_allocations`, with a warning.
    ///
    /// # Errors
    /// [`MeterError::QuantityOverflow`] when a quantity exceeds `u128::MAX` (never clamped);
    /// [`MeterError::TooManyCells`] when memory held, energy samples or work would take the
    /// report past [`MeterConfig::max_cells`] cells; [`MeterError::Digest`] when the report
    /// cannot be serialized for its digest.
    pub fn finish(mut self) -> Result<UsageReport, MeterError> {
        let window = self.config.window;
        // Opening state of devices no input named: on a device entry of its own.
        let mut leftover: Vec<String> = self.opening.keys().cloned().collect();
        leftover.sort();
        for key in leftover {
            let id = self.opening_ids.get(&key).copied().unwrap_or(0);
            self.register_device(DeviceInfo::bare(key, id));
        }
        for d in &mut self.devices {
            d.advance(u64::MAX, window, &self.keys);
        }
        // The report's end: the latest end of accepted work when there is any (a memory or
        // energy timestamp cannot stretch it: one bad value would bill every open allocation
        // to it), else the latest memory, energy or opening time.
        let report_end = match self.devices.iter().map(|d| d.work_end).max() {
            Some(w) if w > 0 => w,
            _ => self.devices.iter().map(|d| d.last_ns).max().unwrap_or(0),
        };
        let tenants: Vec<String> = self.keys.iter().map(|k| self.tenant_of(k)).collect();
        let mut open_allocations = Vec::new();
        for d in &mut self.devices {
            let open = std::mem::take(&mut d.open);
            for ((_, address), a) in open {
                if !d.hold(a, report_end, window) {
                    continue;
                }
                // Held since after the report's end (made after the last work): billed 0,
                // carried from its own time.
                let billed_to = report_end.max(a.since);
                let k = &self.keys[a.key as usize];
                open_allocations.push(OpenAllocation {
                    device: d.info.id,
                    device_key: d.info.key.clone(),
                    address: format!("{address:#x}"),
                    bytes: Quantity(u128::from(a.bytes)),
                    tenant: tenants[a.key as usize].clone(),
                    process_id: k.process_id,
                    external_id: k.external_id,
                    allocated_at: rfc3339_ns(a.allocated_at),
                    billed_to: rfc3339_ns(billed_to),
                });
            }
        }
        for d in &self.devices {
            if let Some(f) = d.fault {
                return Err(d.error(f, window));
            }
        }
        let mut devices = Vec::new();
        let mut loss = Vec::new();
        let mut usage = Vec::new();
        let mut totals: BTreeMap<(String, u32, String, MeterKind), u128> = BTreeMap::new();
        let mut warnings = std::mem::take(&mut self.warnings);
        let mut order: Vec<&DeviceState> = self.devices.iter().collect();
        order.sort_by(|a, b| (a.info.id, &a.info.key).cmp(&(b.info.id, &b.info.key)));
        for d in order {
            let lost: u64 = d
                .loss
                .values()
                .fold(0u64, |a, l| a.saturating_add(l.records));
            if d.records == 0
                && lost == 0
                && d.memory_events == 0
                && d.energy.is_empty()
                && d.cells.is_empty()
            {
                continue;
            }
            let info = &d.info;
            let mut not_meterable = Vec::new();
            let sm_meterable = info.sm_count.is_some() && d.kernels_without_grid == 0;
            // Without kernels there is no sm_ns or warp_ns to be unsure of.
            let has_kernels = d.kernels > 0;
            if info.sm_count.is_some() && d.kernels_without_grid > 0 {
                not_meterable.push(NotMeterable {
                    meter: MeterKind::SmNs,
                    code: NotMeterableCode::KernelsWithoutGrid,
                    reason: format!(
                        "{} kernels on this device have no grid (launch configuration), so the \
                         SMs they held are unknown",
                        d.kernels_without_grid
                    ),
                });
                warnings.push(Warning::new(
                    WarningCode::NotMeterable,
                    format!(
                        "sm_ns is not meterable on device {} ({}): {} kernels have no grid",
                        info.id, info.key, d.kernels_without_grid
                    ),
                ));
            }
            if info.sm_count.is_none() && has_kernels {
                not_meterable.push(NotMeterable {
                    meter: MeterKind::SmNs,
                    code: NotMeterableCode::SmCountUnknown,
                    reason: "the source gives no SM count for this device (no device table); \
                             pass --devices with its sm_count (warp_ns, which builds on sm_ns, \
                             is not meterable either)"
                        .to_string(),
                });
                // warp_ns has its own entry, so the entries name the meters the warning names.
                not_meterable.push(NotMeterable {
                    meter: MeterKind::WarpNs,
                    code: NotMeterableCode::SmCountUnknown,
                    reason: "the source gives no SM count for this device (no device table), and \
                             warp_ns builds on sm_ns; pass --devices with its sm_count"
                        .to_string(),
                });
                warnings.push(Warning::new(
                    WarningCode::NotMeterable,
                    format!(
                        "sm_ns and warp_ns are not meterable on device {} ({}): SM count unknown",
                        info.id, info.key
                    ),
                ));
            }
            let warp_meterable = info.sm_count.is_some()
                && info.compute_capability.is_some()
                && d.kernels_without_occupancy == 0;
            // An unknown SM count is reported above, for sm_ns and warp_ns.
            if !warp_meterable && info.sm_count.is_some() && has_kernels {
                let unknown_cc = info
                    .compute_capability
                    .filter(|&cc| crate::occupancy::arch_limits(cc).is_err());
                let code = if info.compute_capability.is_none() {
                    NotMeterableCode::ComputeCapabilityUnknown
                } else if unknown_cc.is_some() {
                    NotMeterableCode::ComputeCapabilityUnsupported
                } else {
                    NotMeterableCode::KernelsWithoutOccupancy
                };
                let why = if info.compute_capability.is_none() {
                    "the compute capability of this device is unknown, so the occupancy \
                     calculator cannot run; pass --devices with its compute_capability"
                        .to_string()
                } else if let Some(cc) = unknown_cc {
                    let known: Vec<String> = crate::occupancy::KNOWN_CAPABILITIES
                        .iter()
                        .map(|(a, b)| format!("{a}.{b}"))
                        .collect();
                    format!(
                        "the device's compute_capability = {cc} is not one the occupancy \
                         calculator knows ({}), so resident warps cannot be computed; check the \
                         source's device properties or the --devices catalog",
                        known.join(", ")
                    )
                } else {
                    format!(
                        "{} kernels on this device have no launch configuration the occupancy \
                         calculator accepts (grid, block, registers per thread, shared memory), \
                         so their resident warps are unknown",
                        d.kernels_without_occupancy
                    )
                };
                warnings.push(Warning::new(
                    WarningCode::NotMeterable,
                    format!(
                        "warp_ns is not meterable on device {} ({}): {why}",
                        info.id, info.key
                    ),
                ));
                not_meterable.push(NotMeterable {
                    meter: MeterKind::WarpNs,
                    code,
                    reason: why,
                });
            }
            // warp_instructions: all or nothing per device (a partial count under-bills).
            let instr_meterable =
                d.kernels_with_instructions > 0 && d.kernels_without_instructions == 0;
            if d.kernels_with_instructions > 0 && d.kernels_without_instructions > 0 {
                let why = format!(
                    "{} of {} kernels on this device have no instruction count (SASS metrics or \
                     INSTRUCTION_EXECUTION data), so the device's total is unknown",
                    d.kernels_without_instructions,
                    d.kernels_with_instructions + d.kernels_without_instructions
                );
                warnings.push(Warning::new(
                    WarningCode::NotMeterable,
                    format!(
                        "warp_instructions is not meterable on device {} ({}): {why}",
                        info.id, info.key
                    ),
                ));
                not_meterable.push(NotMeterable {
                    meter: MeterKind::WarpInstructions,
                    code: NotMeterableCode::KernelsWithoutInstructions,
                    reason: why,
                });
            }
            // The operation meters: each all or nothing per device, as warp_instructions.
            let mut ops_meterable = [false; 4];
            for (i, m) in crate::OP_METERS.iter().enumerate() {
                let (with, without) = (d.kernels_with_ops[i], d.kernels_without_ops[i]);
                ops_meterable[i] = with > 0 && without == 0;
                if with > 0 && without > 0 {
                    let why = format!(
                        "{without} of {} kernels on this device have no {m} count (CUPTI's \
                         SASS op or tensor-path counters of their profiler range), so the \
                         device's total is unknown",
                        with + without
                    );
                    warnings.push(Warning::new(
                        WarningCode::NotMeterable,
                        format!(
                            "{m} is not meterable on device {} ({}): {why}",
                            info.id, info.key
                        ),
                    ));
                    not_meterable.push(NotMeterable {
                        meter: *m,
                        code: NotMeterableCode::KernelsWithoutOpCounts,
                        reason: why,
                    });
                }
            }
            let left = d.budget.limit.saturating_sub(d.budget.used());
            let (energy, resets, gaps, unobserved) =
                energy_per_window(&d.energy, &d.energy_spans, window, &d.cells, left).map_err(
                    |(from, to, windows)| {
                        d.error(
                            DeviceFault::TooManyCells {
                                what: "energy samples",
                                from,
                                to,
                                windows,
                            },
                            window,
                        )
                    },
                )?;
            d.budget.used.fetch_add(
                energy.keys().filter(|&&w| !d.cells.contains(w)).count() as u64,
                AtomicOrdering::Relaxed,
            );
            // A device without kernels has no sm_ns anywhere: its energy is all idle.
            let energy_meterable = !energy.is_empty() && (sm_meterable || !has_kernels);
            if !energy.is_empty() && !energy_meterable {
                let why = "energy is apportioned to tenants by sm_ns, which is not meterable on \
                           this device"
                    .to_string();
                warnings.push(Warning::new(
                    WarningCode::NotMeterable,
                    format!(
                        "energy_mj is not meterable on device {} ({}): {why}",
                        info.id, info.key
                    ),
                ));
                not_meterable.push(NotMeterable {
                    meter: MeterKind::EnergyMj,
                    code: NotMeterableCode::SmNsNotMeterable,
                    reason: why,
                });
            }
            if resets > 0 {
                warnings.push(Warning::new(
                    WarningCode::EnergyCounterReset,
                    format!(
                        "the energy counter of device {} ({}) went down {resets} times (driver \
                     reload?): the energy between those samples is unknown and not billed",
                        info.id, info.key
                    ),
                ));
            }
            if unobserved > 0 {
                warnings.push(Warning::new(
                    WarningCode::EnergyUnobserved,
                    format!(
                    "{unobserved} stretches between energy samples of device {} ({}) lie between \
                     recordings (no recording observed them): their energy is not billed",
                    info.id, info.key
                ),
                ));
            }
            if gaps > 0 {
                warnings.push(Warning::new(
                    WarningCode::EnergyGap,
                    format!(
                    "{gaps} pairs of consecutive energy samples of device {} ({}) are more than \
                     7 days apart or rise faster than 100 kW: the energy between them is not \
                     billed",
                    info.id, info.key
                ),
                ));
            }
            let pm_meterable = pm_meterability(
                d,
                sm_meterable || !has_kernels,
                &mut not_meterable,
                &mut warnings,
            );
            if d.reallocations > 0 {
                warnings.push(Warning::new(
                    WarningCode::Reallocation,
                    format!(
                        "{} allocations on device {} ({}) were made at an address still held: the \
                     earlier allocation was closed there (a release record missing?)",
                        d.reallocations, info.id, info.key
                    ),
                ));
            }
            devices.push(DeviceEntry {
                device: info.id,
                device_key: info.key.clone(),
                name: info.name.clone(),
                sm_count: info.sm_count,
                compute_capability: info.compute_capability.map(|c| c.to_string()),
                not_meterable,
            });
            for (reason, n) in &d.loss {
                loss.push(LossEntry {
                    device: Some(info.id),
                    device_key: info.key.clone(),
                    reason: reason.as_str().to_string(),
                    records: n.records,
                    lower_bound: n.lower_bound,
                });
            }
            // Overflows have their own warning (a count of overflows, not of samples).
            let others = || {
                d.loss
                    .iter()
                    .filter(|(r, _)| **r != LossReason::PmSampleOverflow)
                    .map(|(_, l)| l)
            };
            let lost_others = others().fold(0u64, |a, l| a.saturating_add(l.records));
            if lost_others > 0 {
                let at_least = if others().any(|l| l.lower_bound) {
                    "at least "
                } else {
                    ""
                };
                // Loss reasons are shared by records and PM samples: a sampled device's
                // count may hold both.
                let what = if d.pm.carrying.iter().any(|&n| n > 0) || d.pm.overflows > 0 {
                    "records or PM samples"
                } else {
                    "records"
                };
                warnings.push(Warning::new(
                    WarningCode::RecordsLost,
                    format!(
                        "{at_least}{lost_others} {what} lost on device {} ({}); see `loss`",
                        info.id, info.key
                    ),
                ));
            }
            let empty = Cell::default();
            let windows: BTreeSet<u64> = d
                .cells
                .windows()
                .chain(energy.keys().copied().filter(|_| energy_meterable))
                .collect();
            for w in windows {
                let cell = d.cells.get(w).unwrap_or(&empty);
                let ws = rfc3339(w);
                let sms = info.sm_count.filter(|_| sm_meterable);
                let warp_sms = info.sm_count.filter(|_| warp_meterable);
                let mut quantities = cell_quantities(
                    cell, &d.slots, &tenants, sms, warp_sms, &d.sets,
                )
                .map_err(|meter| MeterError::QuantityOverflow {
                    device: info.id,
                    device_key: info.key.clone(),
                    meter,
                    window_start: Some(ws.clone()),
                })?;
                if !instr_meterable {
                    quantities.retain(|(m, _)| *m != MeterKind::WarpInstructions);
                }
                quantities.retain(
                    |(m, _)| match crate::OP_METERS.iter().position(|o| o == m) {
                        Some(i) => ops_meterable[i],
                        None => true,
                    },
                );
                quantities.retain(|(m, _)| match PM_METERS.iter().position(|p| p == m) {
                    Some(i) => pm_meterable[i],
                    None => true,
                });
                if let Some(&e) = energy.get(&w).filter(|_| energy_meterable) {
                    let sm = quantities
                        .iter()
                        .find(|(m, _)| *m == MeterKind::SmNs)
                        .map(|(_, per)| per.as_slice())
                        .unwrap_or(&[]);
                    if e > 0 {
                        quantities.push((MeterKind::EnergyMj, apportion_energy(e, sm)));
                    }
                }
                for (meter, per_tenant) in quantities {
                    for (tenant, q) in per_tenant {
                        if q == 0 {
                            continue;
                        }
                        let t = totals
                            .entry((tenant.clone(), info.id, info.key.clone(), meter))
                            .or_insert(0);
                        *t = t
                            .checked_add(q)
                            .ok_or_else(|| MeterError::QuantityOverflow {
                                device: info.id,
                                device_key: info.key.clone(),
                                meter,
                                window_start: None,
                            })?;
                        usage.push(UsageRow {
                            tenant,
                            device: info.id,
                            device_key: info.key.clone(),
                            window_start: ws.clone(),
                            meter,
                            quantity: Quantity(q),
                        });
                    }
                }
            }
        }
        for ((source, reason), n) in &self.unplaced {
            loss.push(LossEntry {
                device: None,
                device_key: source.clone(),
                reason: reason.as_str().to_string(),
                records: n.records,
                lower_bound: n.lower_bound,
            });
            warnings.push(Warning::new(
                WarningCode::RecordsLost,
                format!(
                    "{}{} records of source {source} lost as {} on a device the source does not \
                 tell; see `loss`",
                    if n.lower_bound { "at least " } else { "" },
                    n.records,
                    reason.as_str()
                ),
            ));
        }
        let totals = totals
            .into_iter()
            .map(|((tenant, device, device_key, meter), q)| TotalRow {
                tenant,
                device,
                device_key,
                meter,
                quantity: Quantity(q),
            })
            .collect();
        if !open_allocations.is_empty() {
            warnings.push(Warning::new(
                WarningCode::OpenAllocations,
                format!(
                "{} allocations are still held at the report's end: billed to it and listed in \
                 open_allocations (pass this report to the next one with --opening)",
                open_allocations.len()
            ),
            ));
        }
        let (early_work, early_memory, early_pm) = self.before_earlier_end;
        let early = early_work
            .saturating_add(early_memory)
            .saturating_add(early_pm);
        if early > 0 {
            let skipped = self
                .counts
                .skipped
                .entry("billed_by_opening_report".to_string())
                .or_insert(0);
            *skipped = skipped.saturating_add(early);
            let what = if early_pm > 0 {
                format!(
                    "{early_work} work records, {early_memory} memory events and {early_pm} PM \
                     samples"
                )
            } else {
                format!("{early_work} work records and {early_memory} memory events")
            };
            warnings.push(Warning::new(
                WarningCode::BilledByOpeningReport,
                format!(
                    "{what} of recordings that an earlier report of the chain (--opening) read \
                     up to a later time lie before that time: that report metered them, so \
                     they are not metered again (counted as skipped `billed_by_opening_report`)"
                ),
            ));
        }
        // Kernels over the concurrent-kernel limit were counted at arrival; they are loss.
        let over: u64 = self.devices.iter().map(|d| d.kernels_over_limit).sum();
        self.counts.kernel = self.counts.kernel.saturating_sub(over);
        let extensions = self.extensions();
        let mut report = UsageReport {
            schema: USAGE_SCHEMA.to_string(),
            metering_policy: METERING_POLICY.to_string(),
            window_seconds: window.seconds(),
            complete: None,
            sources: self.sources,
            devices,
            records: self.counts,
            loss,
            usage,
            totals,
            open_allocations,
            warnings,
            extensions,
            sha256: String::new(),
        };
        report.complete = Some(report.derived_complete());
        report.seal()?;
        Ok(report)
    }

    pub(super) fn tenant_of(&self, k: &AttrKey) -> String {
        if let Some(t) = k.external_id.and_then(|e| self.tenant_map.external.get(&e)) {
            return t.as_str().to_string();
        }
        if let Some(t) = k.process_id.and_then(|p| self.tenant_map.pid.get(&p)) {
            return t.as_str().to_string();
        }
        k.source_tenant
            .as_ref()
            .map_or_else(|| UNATTRIBUTED.to_string(), |t| t.as_str().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rustc_hash::FxHashMap;

    pub(super) fn rat(n: i64, d: i64) -> BigRational {
        BigRational::new(BigInt::from(n), BigInt::from(d))
    }

    /// Review: `capped_shares` over one common denominator gives the shares of the exact
    /// rationals summed term by term (`largest_remainder` of `Σ value × num / den` per tenant,
    /// the total the floor of their sum), for random cells with values up to near `u128::MAX`
    /// and denominators sharing factors or not.
    #[test]
    fn capped_shares_equal_the_exact_rationals() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let tenants: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
        for case in 0..400 {
            let mut exact: FxHashMap<u32, u128> = FxHashMap::default();
            let mut capped: FxHashMap<(u32, Factor), u128> = FxHashMap::default();
            let big = case % 4 == 0;
            for _ in 0..(next() % 6) {
                let v = if big {
                    u128::from(next()) << 60
                } else {
                    u128::from(next() % 1000)
                };
                *exact.entry((next() % 5) as u32).or_default() += v;
            }
            for _ in 0..(next() % 12) {
                let den = u128::from(1 + next() % if big { u64::MAX } else { 40 });
                let num = u128::from(1 + next() % 200).min(den);
                let v = if big {
                    u128::from(next()) << 40
                } else {
                    u128::from(next() % 1000)
                };
                *capped.entry(((next() % 5) as u32, (num, den))).or_default() += v;
            }
            let mut shares: BTreeMap<String, BigRational> = BTreeMap::new();
            for (&k, &q) in &exact {
                *shares
                    .entry(tenants[k as usize].clone())
                    .or_insert_with(BigRational::zero) +=
                    BigRational::from_integer(BigInt::from(q));
            }
            for (&(k, (num, den)), &v) in &capped {
                *shares
                    .entry(tenants[k as usize].clone())
                    .or_insert_with(BigRational::zero) +=
                    BigRational::new(BigInt::from(v) * BigInt::from(num), BigInt::from(den));
            }
            let sum: BigRational = shares.values().sum();
            let total = sum.floor().to_integer().to_u128().filter(|&t| t > 0);
            let want = total.map(|t| largest_remainder(shares, t));
            let exact: Vec<(u32, u128)> = exact.into_iter().collect();
            let capped: Vec<(u32, Factor, u128)> =
                capped.into_iter().map(|((k, f), v)| (k, f, v)).collect();
            assert_eq!(
                capped_shares(&exact, &capped, &tenants),
                want,
                "case {case}"
            );
        }
    }

    #[test]
    pub(super) fn largest_remainder_ties_go_to_first_name() {
        let mut m = BTreeMap::new();
        m.insert("bob".to_string(), rat(1, 2));
        m.insert("alice".to_string(), rat(1, 2));
        let r = largest_remainder(m, 1);
        assert_eq!(r["alice"], 1);
        assert_eq!(r["bob"], 0);
    }

    #[test]
    pub(super) fn largest_remainder_largest_fraction_wins() {
        let mut m = BTreeMap::new();
        m.insert("a".to_string(), rat(10, 3)); // 3.333
        m.insert("b".to_string(), rat(17, 3)); // 5.667
        let r = largest_remainder(m, 9);
        assert_eq!((r["a"], r["b"]), (3, 6));
    }
}
