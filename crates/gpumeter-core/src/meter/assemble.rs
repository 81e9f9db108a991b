//! Building the report: drain and finish, as named steps — the opening state of devices no
//! input named, allocations still held, per device its meterability ([`super::meterable`]),
//! loss and usage rows (a cell's quantities from [`super::shares`]), then the report's totals
//! and warnings.

use super::*;

use std::collections::{BTreeMap, BTreeSet};

use std::sync::atomic::Ordering as AtomicOrdering;

use crate::device::DeviceInfo;
use crate::report::{
    DeviceEntry, LossEntry, MeterKind, OpenAllocation, Quantity, RecordCounts, TotalRow,
    UsageReport, UsageRow, METERING_POLICY, USAGE_SCHEMA,
};
use crate::tenant::UNATTRIBUTED;
use crate::time::{rfc3339, rfc3339_ns};
use crate::warning::{Warning, WarningCode};

use super::meterable::{
    energy_meterability, instruction_meterability, ops_meterability, pm_meterability,
    sm_meterability, warp_meterability, Meterable,
};
use super::shares::{cell_quantities, CellQuantities};

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
        let bill_to = if end { self.report_end() } else { edge };
        self.hold_open_to(bill_to);
        // Kernels still buffered (not yet started by the sweep) were counted at arrival, but
        // they may yet be lost to the concurrent-kernel limit, which takes their count back:
        // they are counted in the report that meters them, the next one, not in this one.
        let carried: Vec<u64> = self
            .devices
            .iter()
            .map(|d| d.pending.iter().filter(|p| p.0.is_kernel()).count() as u64)
            .collect();
        // The handed-over part: the windows before the edge and what was gathered since the
        // last drain, nothing buffered; at the end (`u64::MAX`) the allocations still held,
        // listed in `open_allocations` for the next report's opening state.
        let part = self.handed_over(edge, end, &carried);
        let report = part.finish()?;
        self.forget_handed_over(edge, end, &carried);
        Ok(report)
    }

    /// Bills the allocations still held up to `bill_to` (from then on they are held from it).
    fn hold_open_to(&mut self, bill_to: u64) {
        let window = self.config.window;
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
    }

    /// The handed-over part of a drain to `edge` (`end`: the drain of everything): a copy of
    /// the meter with the windows before the edge and what was gathered since the last drain,
    /// nothing buffered, less the `carried` kernels (per device) counted in the next report;
    /// at the end the allocations still held, listed in `open_allocations` for the next
    /// report's opening state.
    fn handed_over(&self, edge: u64, end: bool, carried: &[u64]) -> Meter {
        let carried_total: u64 = carried.iter().sum();
        let mut part = self.deep_clone();
        part.counts.kernel = part.counts.kernel.saturating_sub(carried_total);
        for (d, &c) in part.devices.iter_mut().zip(carried) {
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
        part
    }

    /// Forgets what a drain to `edge` handed over: the windows before it (freeing their cells
    /// in the budget), loss, counts and warnings; the `carried` kernels stay counted.
    fn forget_handed_over(&mut self, edge: u64, end: bool, carried: &[u64]) {
        let mut freed = 0u64;
        for (d, &c) in self.devices.iter_mut().zip(carried) {
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
            kernel: carried.iter().sum(),
            ..RecordCounts::default()
        };
        self.unplaced.clear();
        self.warnings.clear();
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
        self.register_opening_devices();
        for d in &mut self.devices {
            d.advance(u64::MAX, window, &self.keys);
        }
        let report_end = self.report_end();
        let tenants: Vec<String> = self.keys.iter().map(|k| self.tenant_of(k)).collect();
        let open_allocations = self.bill_open_allocations(report_end, &tenants);
        for d in &self.devices {
            if let Some(f) = d.fault {
                return Err(d.error(f, window));
            }
        }
        let mut parts = ReportParts {
            warnings: std::mem::take(&mut self.warnings),
            ..ReportParts::default()
        };
        let mut order: Vec<&DeviceState> = self.devices.iter().collect();
        order.sort_by(|a, b| (a.info.id, &a.info.key).cmp(&(b.info.id, &b.info.key)));
        for d in order {
            if d.nothing_to_report() {
                continue;
            }
            parts.add_device(d, window, &tenants)?;
        }
        self.add_unplaced_loss(&mut parts);
        let totals = parts
            .totals
            .into_iter()
            .map(|((tenant, device, device_key, meter), q)| TotalRow {
                tenant,
                device,
                device_key,
                meter,
                quantity: Quantity(q),
            })
            .collect();
        let mut warnings = parts.warnings;
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
        self.skip_billed_by_opening(&mut warnings);
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
            devices: parts.devices,
            records: self.counts,
            loss: parts.loss,
            usage: parts.usage,
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

    /// Opening state of devices no input named: each on a device entry of its own.
    fn register_opening_devices(&mut self) {
        let mut leftover: Vec<String> = self.opening.keys().cloned().collect();
        leftover.sort();
        for key in leftover {
            let id = self.opening_ids.get(&key).copied().unwrap_or(0);
            self.register_device(DeviceInfo::bare(key, id));
        }
    }

    /// The report's end: the latest end of accepted work when there is any (a memory or
    /// energy timestamp cannot stretch it: one bad value would bill every open allocation
    /// to it), else the latest memory, energy or opening time.
    fn report_end(&self) -> u64 {
        match self.devices.iter().map(|d| d.work_end).max() {
            Some(w) if w > 0 => w,
            _ => self.devices.iter().map(|d| d.last_ns).max().unwrap_or(0),
        }
    }

    /// Bills every allocation still held up to `report_end` and lists it for
    /// `open_allocations`; the devices hold none afterwards.
    fn bill_open_allocations(
        &mut self,
        report_end: u64,
        tenants: &[String],
    ) -> Vec<OpenAllocation> {
        let window = self.config.window;
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
        open_allocations
    }

    /// Loss on devices the sources do not tell: a loss entry and a warning each.
    fn add_unplaced_loss(&self, parts: &mut ReportParts) {
        for ((source, reason), n) in &self.unplaced {
            parts.loss.push(LossEntry {
                device: None,
                device_key: source.clone(),
                reason: reason.as_str().to_string(),
                records: n.records,
                lower_bound: n.lower_bound,
            });
            parts.warnings.push(Warning::new(
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
    }

    /// Records an earlier report of the chain metered (before the time it read recordings up
    /// to): counted as skipped `billed_by_opening_report`, with a warning.
    fn skip_billed_by_opening(&mut self, warnings: &mut Vec<Warning>) {
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

impl DeviceState {
    /// Whether the device has nothing for the report: no record, loss, memory event, energy
    /// sample or cell.
    fn nothing_to_report(&self) -> bool {
        let lost: u64 = self
            .loss
            .values()
            .fold(0u64, |a, l| a.saturating_add(l.records));
        self.records == 0
            && lost == 0
            && self.memory_events == 0
            && self.energy.is_empty()
            && self.cells.is_empty()
    }

    /// Energy per window ([`energy_per_window`]) with the windows it adds taken from the cell
    /// budget: (energy per window start, counter resets, gaps, unobserved stretches).
    fn energy_windows(&self, window: WindowSize) -> Result<EnergyWindows, MeterError> {
        let left = self.budget.limit.saturating_sub(self.budget.used());
        let energy = energy_per_window(&self.energy, &self.energy_spans, window, &self.cells, left)
            .map_err(|(from, to, windows)| {
                self.error(
                    DeviceFault::TooManyCells {
                        what: "energy samples",
                        from,
                        to,
                        windows,
                    },
                    window,
                )
            })?;
        self.budget.used.fetch_add(
            energy
                .0
                .keys()
                .filter(|&&w| !self.cells.contains(w))
                .count() as u64,
            AtomicOrdering::Relaxed,
        );
        Ok(energy)
    }

    /// The warnings of energy not billed: counter resets, stretches no recording observed,
    /// implausible gaps.
    fn energy_warnings(
        &self,
        (resets, gaps, unobserved): (u64, u64, u64),
        warnings: &mut Vec<Warning>,
    ) {
        let info = &self.info;
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
    }
    /// The warning of allocations made at an address still held (the earlier one closed there).
    fn reallocation_warning(&self, warnings: &mut Vec<Warning>) {
        if self.reallocations > 0 {
            warnings.push(Warning::new(
                WarningCode::Reallocation,
                format!(
                    "{} allocations on device {} ({}) were made at an address still held: the \
                 earlier allocation was closed there (a release record missing?)",
                    self.reallocations, self.info.id, self.info.key
                ),
            ));
        }
    }
}

/// The parts of a report gathered device by device.
#[derive(Default)]
struct ReportParts {
    devices: Vec<DeviceEntry>,
    loss: Vec<LossEntry>,
    usage: Vec<UsageRow>,
    /// Per (tenant, device, device key, meter): the sum of its usage rows.
    totals: BTreeMap<(String, u32, String, MeterKind), u128>,
    warnings: Vec<Warning>,
}

impl ReportParts {
    /// Device `d`'s entry (with the meters it cannot meter), its loss and its usage rows.
    fn add_device(
        &mut self,
        d: &DeviceState,
        window: WindowSize,
        tenants: &[String],
    ) -> Result<(), MeterError> {
        let info = &d.info;
        let warnings = &mut self.warnings;
        let mut not_meterable = Vec::new();
        // Without kernels there is no sm_ns or warp_ns to be unsure of.
        let has_kernels = d.kernels > 0;
        let sm = sm_meterability(d, &mut not_meterable, warnings);
        let warp = warp_meterability(d, &mut not_meterable, warnings);
        let instructions = instruction_meterability(d, &mut not_meterable, warnings);
        let ops = ops_meterability(d, &mut not_meterable, warnings);
        let (energy, resets, gaps, unobserved) = d.energy_windows(window)?;
        // A device without kernels has no sm_ns anywhere: its energy is all idle.
        let apportionable = sm || !has_kernels;
        let energy_ok = energy_meterability(
            d,
            !energy.is_empty(),
            apportionable,
            &mut not_meterable,
            warnings,
        );
        d.energy_warnings((resets, gaps, unobserved), warnings);
        let pm = pm_meterability(d, apportionable, &mut not_meterable, warnings);
        d.reallocation_warning(warnings);
        self.devices.push(DeviceEntry {
            device: info.id,
            device_key: info.key.clone(),
            name: info.name.clone(),
            sm_count: info.sm_count,
            compute_capability: info.compute_capability.map(|c| c.to_string()),
            not_meterable,
        });
        self.add_loss(d);
        let meterable = Meterable {
            sm,
            warp,
            instructions,
            ops,
            pm,
            energy: energy_ok,
        };
        self.add_usage(d, tenants, &energy, &meterable)
    }

    /// Device `d`'s loss entries and, for loss other than PM sample overflow (which has its
    /// own warning: a count of overflows, not of samples), a warning.
    fn add_loss(&mut self, d: &DeviceState) {
        let info = &d.info;
        for (reason, n) in &d.loss {
            self.loss.push(LossEntry {
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
            self.warnings.push(Warning::new(
                WarningCode::RecordsLost,
                format!(
                    "{at_least}{lost_others} {what} lost on device {} ({}); see `loss`",
                    info.id, info.key
                ),
            ));
        }
    }

    /// Device `d`'s usage rows, window by window (the windows of its cells and, when
    /// meterable, of its energy), with the meters it cannot meter left out.
    fn add_usage(
        &mut self,
        d: &DeviceState,
        tenants: &[String],
        energy: &BTreeMap<u64, u128>,
        meterable: &Meterable,
    ) -> Result<(), MeterError> {
        let info = &d.info;
        let empty = Cell::default();
        let windows: BTreeSet<u64> = d
            .cells
            .windows()
            .chain(energy.keys().copied().filter(|_| meterable.energy))
            .collect();
        for w in windows {
            let cell = d.cells.get(w).unwrap_or(&empty);
            let ws = rfc3339(w);
            let sms = info.sm_count.filter(|_| meterable.sm);
            let warp_sms = info.sm_count.filter(|_| meterable.warp);
            let mut quantities = cell_quantities(cell, &d.slots, tenants, sms, warp_sms, &d.sets)
                .map_err(|meter| MeterError::QuantityOverflow {
                device: info.id,
                device_key: info.key.clone(),
                meter,
                window_start: Some(ws.clone()),
            })?;
            meterable.retain(&mut quantities);
            if let Some(&e) = energy.get(&w).filter(|_| meterable.energy) {
                let sm = quantities
                    .iter()
                    .find(|(m, _)| *m == MeterKind::SmNs)
                    .map(|(_, per)| per.as_slice())
                    .unwrap_or(&[]);
                if e > 0 {
                    quantities.push((MeterKind::EnergyMj, apportion_energy(e, sm)));
                }
            }
            self.add_rows(info, &ws, quantities)?;
        }
        Ok(())
    }

    /// One window's usage rows of device `info` (quantities of 0 left out), added to the
    /// totals.
    fn add_rows(
        &mut self,
        info: &DeviceInfo,
        ws: &str,
        quantities: CellQuantities,
    ) -> Result<(), MeterError> {
        for (meter, per_tenant) in quantities {
            for (tenant, q) in per_tenant {
                if q == 0 {
                    continue;
                }
                let t = self
                    .totals
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
                self.usage.push(UsageRow {
                    tenant,
                    device: info.id,
                    device_key: info.key.clone(),
                    window_start: ws.to_string(),
                    meter,
                    quantity: Quantity(q),
                });
            }
        }
        Ok(())
    }
}
