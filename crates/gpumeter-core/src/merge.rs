//! Merging usage reports (`gpumeter usage --format usage`): node agents meter their GPUs into
//! `gpumeter.usage/v1` reports and a central biller merges them into one report to rate.
//!
//! [`merge_reports`] checks every report (schema, its own `sha256`, one metering policy and
//! window size), refuses a source that two different reports metered (it would be billed
//! twice) — except the drained pieces of one stream of CUPTI buffers (format
//! [`crate::STREAM_FORMAT`], one source SHA-256) whose (device, window) cells are disjoint —,
//! counts a report given twice once, and sums usage exactly (`u128`, checked). The
//! result does not depend on the order of the inputs: reports are taken in the order of their
//! names (then digests), rows are sorted as [`crate::Meter::finish`] sorts them, and the merged
//! report is sealed with its own digest. Each input is recorded under
//! `extensions.merged_reports` (`[{"name", "sha256"}]`, [`MERGED_REPORTS_KEY`]).
//!
//! What cannot be merged exactly is said in the warnings: when two reports both have usage on
//! one device in one window, each applied the SM cap and the busy-time union on its own,
//! so the merged `sm_ns`/`gpu_busy_ns` of that window may exceed what one report of all the
//! inputs would give.

use std::collections::{BTreeMap, BTreeSet};

use crate::check::{check_report, ReportCheckError};
use crate::record::LossReason;
use crate::report::STREAM_FORMAT;
use crate::report::{
    DeviceEnd, DeviceEntry, DigestError, Extensions, LossEntry, MeterKind, NotMeterable,
    OpenAllocation, Quantity, RecordCounts, RecordingEnds, SourceEntry, TotalRow, UsageReport,
    UsageRow, USAGE_SCHEMA,
};
use crate::time::{parse_rfc3339, rfc3339_ns};
use crate::warning::{Warning, WarningCode};

/// The key under a merged report's `extensions` that lists the reports it merged:
/// `[{"name": <file name>, "sha256": <the report's own sha256>}]`, in merge order (by name,
/// then digest).
pub const MERGED_REPORTS_KEY: &str = "merged_reports";

/// Why usage reports cannot be merged. Every variant names the report (by the name the caller
/// gave it, usually its file name) and the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// No report was given.
    #[error("no usage report to merge")]
    Empty,
    /// A report's `schema` is not `gpumeter.usage/v1`.
    #[error("{name}: schema `{found}` is not {USAGE_SCHEMA}")]
    Schema {
        /// The report.
        name: String,
        /// Its `schema`.
        found: String,
    },
    /// A report's `sha256` does not match its content: it was edited or damaged.
    #[error(
        "{name}: its sha256 does not match its content (the report was edited or damaged); \
         it is not merged"
    )]
    Digest {
        /// The report.
        name: String,
    },
    /// Two reports differ in `metering_policy` or `window_seconds`: their rows are not
    /// comparable (re-windowing is not supported).
    #[error(
        "{name}: {field} is {found}, but {first} has {expected}: reports merge only with the \
         same {field}"
    )]
    Mismatch {
        /// The report that differs.
        name: String,
        /// `metering_policy` or `window_seconds`.
        field: &'static str,
        /// Its value.
        found: String,
        /// The report compared with (the first in merge order).
        first: String,
        /// That report's value.
        expected: String,
    },
    /// One source (by SHA-256) was metered by two different reports: merging them would bill
    /// it twice (for drained pieces of one stream: two pieces hold one device's window, or a
    /// snapshot is among them).
    #[error(
        "source {source_name} (sha256 {sha256}) was metered by two different reports, {first} \
         and {second}: merging them would bill it twice"
    )]
    SharedSource {
        /// The source's file name (as the first report gives it).
        source_name: String,
        /// The source's SHA-256.
        sha256: String,
        /// One report.
        first: String,
        /// The other.
        second: String,
    },
    /// Two reports describe one `device_key` differently (name, SM count or compute
    /// capability): one of them is wrong, and the price or `sm_ns` would depend on which.
    #[error("{0}")]
    DeviceConflict(Box<DeviceConflict>),
    /// A field of a report cannot be read (a `window_start` or time that is not RFC 3339).
    #[error("{name}: {field}: {reason}")]
    BadField {
        /// The report.
        name: String,
        /// The field, with its index (`usage[3].window_start`).
        field: String,
        /// Why.
        reason: String,
    },
    /// A sum exceeds its integer type (`u128` quantities, `u64` record counts): never clamped.
    #[error("{name}: adding its {what} overflows ({limit}); the reports are not merged")]
    Overflow {
        /// The report whose value overflowed the sum.
        name: String,
        /// What was summed (`usage of sm_ns on GPU-… at …`, `records.kernel`, …).
        what: String,
        /// `u128` or `u64`.
        limit: &'static str,
    },
    /// A report fails the checks every reader makes ([`crate::check_report`]: one row per
    /// key, no zero rows, rows on window edges, totals equal to the rows, quantities a device
    /// can do, tenant names, completeness), or the merged report would: reports whose rows of
    /// one device and window sum past what the device can do hold the same usage twice.
    #[error("{name}: {error}")]
    Check {
        /// The report (`the merged report` for the result).
        name: String,
        /// What is wrong, naming the row.
        #[source]
        error: Box<ReportCheckError>,
    },
    /// The merged report cannot be sealed.
    #[error(transparent)]
    Seal(#[from] DigestError),
}

/// One device described two ways by two reports ([`MergeError::DeviceConflict`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "device {device_key}: {field} is {first_value} in {first} but {second_value} in {second}: \
     the reports describe one device differently"
)]
pub struct DeviceConflict {
    /// The device.
    pub device_key: String,
    /// `name`, `sm_count` or `compute_capability`.
    pub field: &'static str,
    /// The first report (in merge order).
    pub first: String,
    /// Its value.
    pub first_value: String,
    /// The second report.
    pub second: String,
    /// Its value.
    pub second_value: String,
}

/// Merges usage reports into one sealed `gpumeter.usage/v1` report.
///
/// `inputs` are `(name, report)` pairs; the name (a file name, no directories) appears in
/// errors, warnings and `extensions.merged_reports`. The result:
///
/// * `sources`: every report's sources (each still identified by its own SHA-256), a
///   stream's drained pieces as one source;
/// * `devices`: one entry per `device_key`; fields one report knows and another does not are
///   taken from the one that knows; `not_meterable` has one entry per meter that any report
///   could not meter there, its reason each such report's, prefixed by the report's name
///   (`a.json: …; b.json: …`). The same key under
///   two device ids (one GPU seen by two processes with other `CUDA_VISIBLE_DEVICES`) takes the
///   smallest id everywhere, with a warning;
/// * `usage`: rows with the same (tenant, device_key, window_start, meter) summed; `totals`
///   recomputed from them; `records` and `loss` summed; `open_allocations` unioned, except
///   those of a report that another input continues (`--opening`: all its sources are in the
///   other's `extensions.earlier_sources`), which that report carries on;
/// * `warnings`: each report's, prefixed by its name, then the merge's own (a report given
///   twice, usage of one device and window in two reports, dropped extension keys);
/// * `extensions`: `recordings` and `earlier_sources` unioned (so a later `--opening` chain
///   bills nothing twice), and [`MERGED_REPORTS_KEY`].
///
/// A report given twice (same `sha256`) is counted once, with a warning. The output is the
/// same bytes whatever the order of `inputs`.
///
/// # Errors
/// [`MergeError::Empty`] without reports; [`MergeError::Schema`] / [`MergeError::Digest`] for
/// a report that is not a sealed `gpumeter.usage/v1` report; [`MergeError::Mismatch`] for
/// another metering policy or window size; [`MergeError::SharedSource`];
/// [`MergeError::DeviceConflict`]; [`MergeError::BadField`] for an unreadable time;
/// [`MergeError::Overflow`]; [`MergeError::Seal`]; [`MergeError::Check`] for a report that
/// fails the checks of every reader, or a merged report that would.
///
/// The merged report is `complete` when every input is ([`UsageReport::is_complete`]).
pub fn merge_reports(inputs: &[(String, UsageReport)]) -> Result<UsageReport, MergeError> {
    for (name, r) in inputs {
        check_sealed(name, r)?;
    }
    let mut warnings = Vec::new();
    let reports = distinct_reports(inputs, &mut warnings);
    let Some(&(first_name, first)) = reports.first() else {
        return Err(MergeError::Empty);
    };
    for &(name, r) in &reports {
        same(
            name,
            "metering_policy",
            &r.metering_policy,
            first_name,
            &first.metering_policy,
        )?;
        same(
            name,
            "window_seconds",
            &r.window_seconds,
            first_name,
            &first.window_seconds,
        )?;
    }
    let sources = merge_sources(&reports)?;
    let (devices, ids) = merge_devices(&reports, &mut warnings)?;
    let id_of = |key: &str, id: u32| ids.get(key).copied().unwrap_or(id);
    let records = merge_records(&reports)?;
    let loss = merge_loss(&reports, &id_of)?;
    let usage = merge_usage(&reports, &id_of, &mut warnings)?;
    let totals = totals_of(&usage)?;
    let open_allocations = merge_open_allocations(&reports, &id_of);
    let extensions = merge_extensions(&reports, &sources, &mut warnings)?;
    let mut carried: Vec<Warning> = reports
        .iter()
        .flat_map(|(name, r)| {
            r.warnings
                .iter()
                .map(move |w| w.prefixed(&format!("{name}: ")))
        })
        .collect();
    carried.append(&mut warnings);
    let mut report = UsageReport {
        schema: USAGE_SCHEMA.to_string(),
        metering_policy: first.metering_policy.clone(),
        window_seconds: first.window_seconds,
        complete: Some(reports.iter().all(|(_, r)| r.is_complete())),
        sources,
        devices,
        records,
        loss,
        usage,
        totals,
        open_allocations,
        warnings: carried,
        extensions,
        sha256: String::new(),
    };
    report.seal()?;
    // What the merge wrote passes every reader's checks, or it is not written: rows of two
    // reports that sum past what a device can do in a window hold the same usage twice, and
    // tenants of two reports may look alike.
    check_report(&report).map_err(|error| MergeError::Check {
        name: "the merged report".to_string(),
        error: Box::new(error),
    })?;
    Ok(report)
}

/// The checks of every reader ([`check_report`]), a schema or digest fault as its own variant.
fn check_sealed(name: &str, r: &UsageReport) -> Result<(), MergeError> {
    check_report(r).map_err(|error| match error {
        ReportCheckError::Schema { .. } => MergeError::Schema {
            name: name.to_string(),
            found: r.schema.clone(),
        },
        ReportCheckError::Digest => MergeError::Digest {
            name: name.to_string(),
        },
        error => MergeError::Check {
            name: name.to_string(),
            error: Box::new(error),
        },
    })
}

fn same<T: PartialEq + std::fmt::Display>(
    name: &str,
    field: &'static str,
    found: &T,
    first: &str,
    expected: &T,
) -> Result<(), MergeError> {
    if found == expected {
        return Ok(());
    }
    Err(MergeError::Mismatch {
        name: name.to_string(),
        field,
        found: found.to_string(),
        first: first.to_string(),
        expected: expected.to_string(),
    })
}

/// One report per digest (the name that sorts first; the others are warned about), in merge
/// order: by name, then digest.
fn distinct_reports<'a>(
    inputs: &'a [(String, UsageReport)],
    warnings: &mut Vec<Warning>,
) -> Vec<(&'a str, &'a UsageReport)> {
    let mut by_digest: BTreeMap<&str, Vec<(&str, &UsageReport)>> = BTreeMap::new();
    for (name, r) in inputs {
        by_digest
            .entry(r.sha256.as_str())
            .or_default()
            .push((name.as_str(), r));
    }
    let mut out = Vec::with_capacity(by_digest.len());
    for (sha, mut same) in by_digest {
        same.sort_by(|a, b| a.0.cmp(b.0));
        let kept = same[0];
        for (name, _) in &same[1..] {
            warnings.push(Warning::new(
                WarningCode::DuplicateReport,
                format!(
                    "{name} is the same report as {} (sha256 {sha}): counted once",
                    kept.0
                ),
            ));
        }
        out.push(kept);
    }
    out.sort_by(|a, b| (a.0, &a.1.sha256).cmp(&(b.0, &b.1.sha256)));
    out
}

fn merge_sources(reports: &[(&str, &UsageReport)]) -> Result<Vec<SourceEntry>, MergeError> {
    // Per source: the first report that has it, and the (device, window) cells of every
    // report that has it so far.
    let mut seen: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    let mut cells: BTreeMap<&str, BTreeSet<(&str, &str)>> = BTreeMap::new();
    let mut out = Vec::new();
    for &(name, r) in reports {
        let mine: BTreeSet<(&str, &str)> = r
            .usage
            .iter()
            .map(|u| (u.device_key.as_str(), u.window_start.as_str()))
            .collect();
        for s in &r.sources {
            match seen.get(s.sha256.as_str()) {
                Some(&(other, source_name)) if other != name => {
                    // Drained pieces of one stream of CUPTI buffers: each holds windows no
                    // other piece holds. Any other source, or pieces that overlap, would be
                    // billed twice.
                    let taken = cells.entry(&s.sha256).or_default();
                    let piece = s.format == STREAM_FORMAT
                        && out.iter().any(|o: &SourceEntry| {
                            o.sha256 == s.sha256 && o.format == STREAM_FORMAT
                        });
                    if !piece || !taken.is_disjoint(&mine) {
                        return Err(MergeError::SharedSource {
                            source_name: source_name.to_string(),
                            sha256: s.sha256.clone(),
                            first: other.to_string(),
                            second: name.to_string(),
                        });
                    }
                    taken.extend(mine.iter().copied());
                }
                // Listed twice by one report: it was metered once there.
                Some(_) => continue,
                None => {
                    seen.insert(&s.sha256, (name, &s.name));
                    cells
                        .entry(&s.sha256)
                        .or_default()
                        .extend(mine.iter().copied());
                    out.push(s.clone());
                }
            }
        }
    }
    Ok(out)
}

/// One field of a device entry merged: the known value; two known values must agree.
fn agree<T: PartialEq + Clone + std::fmt::Debug>(
    key: &str,
    field: &'static str,
    (first, a): (&str, &mut Option<T>),
    (second, b): (&str, &Option<T>),
) -> Result<(), MergeError> {
    match (a.as_ref(), b) {
        (Some(x), Some(y)) if x != y => Err(MergeError::DeviceConflict(Box::new(DeviceConflict {
            device_key: key.to_string(),
            field,
            first: first.to_string(),
            first_value: format!("{x:?}"),
            second: second.to_string(),
            second_value: format!("{y:?}"),
        }))),
        (None, Some(y)) => {
            *a = Some(y.clone());
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Devices by key, sorted as the meter sorts them (device id, key), and the id each key takes.
#[allow(clippy::type_complexity)]
fn merge_devices(
    reports: &[(&str, &UsageReport)],
    warnings: &mut Vec<Warning>,
) -> Result<(Vec<DeviceEntry>, BTreeMap<String, u32>), MergeError> {
    let mut by_key: BTreeMap<&str, (DeviceEntry, Vec<&str>, BTreeSet<u32>)> = BTreeMap::new();
    for &(name, r) in reports {
        for d in &r.devices {
            let Some((m, from, ids)) = by_key.get_mut(d.device_key.as_str()) else {
                let mut first = d.clone();
                for n in &mut first.not_meterable {
                    n.reason = format!("{name}: {}", n.reason);
                }
                by_key.insert(
                    &d.device_key,
                    (first, vec![name], BTreeSet::from([d.device])),
                );
                continue;
            };
            let first = from[0];
            let key = d.device_key.as_str();
            agree(key, "name", (first, &mut m.name), (name, &d.name))?;
            agree(
                key,
                "sm_count",
                (first, &mut m.sm_count),
                (name, &d.sm_count),
            )?;
            agree(
                key,
                "compute_capability",
                (first, &mut m.compute_capability),
                (name, &d.compute_capability),
            )?;
            for n in &d.not_meterable {
                match m.not_meterable.iter_mut().find(|x| x.meter == n.meter) {
                    None => m.not_meterable.push(NotMeterable {
                        meter: n.meter,
                        code: n.code.clone(),
                        reason: format!("{name}: {}", n.reason),
                    }),
                    Some(x) => {
                        x.reason = format!("{}; {name}: {}", x.reason, n.reason);
                        // A report written before codes has none to give: a later report's
                        // code is kept rather than lost.
                        if x.code.is_uncoded() {
                            x.code = n.code.clone();
                        }
                    }
                }
            }
            from.push(name);
            ids.insert(d.device);
        }
    }
    let mut ids_of = BTreeMap::new();
    let mut devices = Vec::with_capacity(by_key.len());
    for (key, (mut d, from, ids)) in by_key {
        if ids.len() > 1 {
            let list: Vec<String> = ids.iter().map(u32::to_string).collect();
            warnings.push(Warning::new(
                WarningCode::DeviceIdsDiffer,
                format!(
                    "device {key} has device ids {} in the reports {}: it is listed as device {}",
                    list.join(", "),
                    from.join(", "),
                    ids.first().copied().unwrap_or(d.device)
                ),
            ));
        }
        d.device = ids.first().copied().unwrap_or(d.device);
        d.not_meterable.sort_by_key(|n| n.meter);
        ids_of.insert(key.to_string(), d.device);
        devices.push(d);
    }
    devices.sort_by(|a, b| (a.device, &a.device_key).cmp(&(b.device, &b.device_key)));
    Ok((devices, ids_of))
}

fn add_u64(a: u64, b: u64, name: &str, what: &str) -> Result<u64, MergeError> {
    a.checked_add(b).ok_or_else(|| MergeError::Overflow {
        name: name.to_string(),
        what: what.to_string(),
        limit: "u64",
    })
}

fn merge_records(reports: &[(&str, &UsageReport)]) -> Result<RecordCounts, MergeError> {
    let mut out = RecordCounts::default();
    for &(name, r) in reports {
        let c = &r.records;
        out.kernel = add_u64(out.kernel, c.kernel, name, "records.kernel")?;
        out.memcpy = add_u64(out.memcpy, c.memcpy, name, "records.memcpy")?;
        out.memset = add_u64(out.memset, c.memset, name, "records.memset")?;
        for (k, &n) in &c.skipped {
            let v = out.skipped.entry(k.clone()).or_insert(0);
            *v = add_u64(*v, n, name, &format!("records.skipped.{k}"))?;
        }
    }
    Ok(out)
}

/// Loss rows summed per (device, device_key, reason), in the meter's order: rows of devices by
/// (device id, key) and reason, then rows without a device by (source label, reason).
fn merge_loss(
    reports: &[(&str, &UsageReport)],
    id_of: &dyn Fn(&str, u32) -> u32,
) -> Result<Vec<LossEntry>, MergeError> {
    type Key = (bool, u32, String, usize, String);
    let mut rows: BTreeMap<Key, LossEntry> = BTreeMap::new();
    for &(name, r) in reports {
        for l in &r.loss {
            let device = l.device.map(|d| id_of(&l.device_key, d));
            let rank = LossReason::ALL
                .iter()
                .position(|x| x.as_str() == l.reason)
                .unwrap_or(LossReason::ALL.len());
            let key = (
                device.is_none(),
                device.unwrap_or(0),
                l.device_key.clone(),
                rank,
                l.reason.clone(),
            );
            match rows.get_mut(&key) {
                Some(m) => {
                    m.records = add_u64(
                        m.records,
                        l.records,
                        name,
                        &format!("loss of {} ({})", l.device_key, l.reason),
                    )?;
                    m.lower_bound |= l.lower_bound;
                }
                None => {
                    let mut m = l.clone();
                    m.device = device;
                    rows.insert(key, m);
                }
            }
        }
    }
    Ok(rows.into_values().collect())
}

/// Usage rows summed per (tenant, device_key, window, meter), sorted as the meter sorts them
/// (device id, key, window, meter, tenant); warns per device whose windows have usage from
/// more than one report.
fn merge_usage(
    reports: &[(&str, &UsageReport)],
    id_of: &dyn Fn(&str, u32) -> u32,
    warnings: &mut Vec<Warning>,
) -> Result<Vec<UsageRow>, MergeError> {
    type Key = (u32, String, u64, MeterKind, String);
    let mut rows: BTreeMap<Key, UsageRow> = BTreeMap::new();
    let mut cells: BTreeMap<(String, u64), BTreeSet<&str>> = BTreeMap::new();
    for &(name, r) in reports {
        for (i, u) in r.usage.iter().enumerate() {
            let window = parse_rfc3339(&u.window_start).map_err(|reason| MergeError::BadField {
                name: name.to_string(),
                field: format!("usage[{i}].window_start"),
                reason,
            })?;
            let device = id_of(&u.device_key, u.device);
            let key = (
                device,
                u.device_key.clone(),
                window,
                u.meter,
                u.tenant.clone(),
            );
            cells
                .entry((u.device_key.clone(), window))
                .or_default()
                .insert(name);
            match rows.get_mut(&key) {
                Some(m) => {
                    m.quantity.0 = m.quantity.0.checked_add(u.quantity.0).ok_or_else(|| {
                        MergeError::Overflow {
                            name: name.to_string(),
                            what: format!(
                                "usage of {} on {} at {} for {}",
                                u.meter, u.device_key, u.window_start, u.tenant
                            ),
                            limit: "u128",
                        }
                    })?;
                }
                None => {
                    let mut m = u.clone();
                    m.device = device;
                    rows.insert(key, m);
                }
            }
        }
    }
    let mut shared: BTreeMap<&str, (usize, BTreeSet<&str>)> = BTreeMap::new();
    for ((key, _), names) in &cells {
        if names.len() > 1 {
            let e = shared.entry(key.as_str()).or_default();
            e.0 += 1;
            e.1.extend(names.iter().copied());
        }
    }
    for (key, (n, names)) in shared {
        let names: Vec<&str> = names.into_iter().collect();
        warnings.push(Warning::new(
            WarningCode::SharedWindows,
            format!(
                "device {key}: {n} windows have usage in more than one report ({}): each report \
             applied the SM cap (the SMs the device has) and the busy-time union (an instant \
             busy in several intervals counts once) to its own work only, so the merged \
             sm_ns, warp_ns and gpu_busy_ns of those windows may exceed what one report of \
             all the inputs would give",
                names.join(", ")
            ),
        ));
    }
    Ok(rows.into_values().collect())
}

impl UsageReport {
    /// Recomputes `totals` from `usage` (one row per tenant, device and meter with a non-zero
    /// sum, in the meter's order) and seals the report: for a program that builds or edits a
    /// report's rows (a converter, a test), so that it passes [`crate::check_report`]'s totals
    /// and digest checks. It does not make other rows valid: zero rows, duplicate keys and
    /// impossible quantities are still refused by every reader.
    ///
    /// # Errors
    /// [`MergeError::Overflow`] when a total exceeds `u128`; [`MergeError::Seal`].
    pub fn seal_with_totals(&mut self) -> Result<(), MergeError> {
        self.totals = totals_of(&self.usage)?;
        self.seal()?;
        Ok(())
    }
}

/// One row per (tenant, device, meter) with a non-zero quantity, in the meter's order.
fn totals_of(usage: &[UsageRow]) -> Result<Vec<TotalRow>, MergeError> {
    let mut totals: BTreeMap<(&str, u32, &str, MeterKind), u128> = BTreeMap::new();
    for u in usage {
        let t = totals
            .entry((&u.tenant, u.device, &u.device_key, u.meter))
            .or_insert(0);
        *t = t
            .checked_add(u.quantity.0)
            .ok_or_else(|| MergeError::Overflow {
                name: "the merged report".to_string(),
                what: format!("total of {} on {} for {}", u.meter, u.device_key, u.tenant),
                limit: "u128",
            })?;
    }
    Ok(totals
        .into_iter()
        .filter(|(_, q)| *q > 0)
        .map(|((tenant, device, device_key, meter), q)| TotalRow {
            tenant: tenant.to_string(),
            device,
            device_key: device_key.to_string(),
            meter,
            quantity: Quantity(q),
        })
        .collect())
}

/// Whether another report continues `r` (`--opening`): all of `r`'s sources are among its
/// `extensions.earlier_sources`.
fn continued(r: &UsageReport, reports: &[(&str, &UsageReport)]) -> bool {
    !r.sources.is_empty()
        && reports.iter().any(|(_, other)| {
            !std::ptr::eq(*other, r)
                && r.sources
                    .iter()
                    .all(|s| other.extensions.earlier_sources.contains(&s.sha256))
        })
}

fn merge_open_allocations(
    reports: &[(&str, &UsageReport)],
    id_of: &dyn Fn(&str, u32) -> u32,
) -> Vec<OpenAllocation> {
    let mut out: Vec<OpenAllocation> = reports
        .iter()
        .filter(|(_, r)| !continued(r, reports))
        .flat_map(|(_, r)| r.open_allocations.iter())
        .map(|a| {
            let mut a = a.clone();
            a.device = id_of(&a.device_key, a.device);
            a
        })
        .collect();
    out.sort_by(|a, b| {
        let key = |x: &OpenAllocation| {
            (
                x.device,
                x.device_key.clone(),
                x.address.clone(),
                x.allocated_at.clone(),
                x.billed_to.clone(),
                x.tenant.clone(),
                x.process_id,
                x.external_id,
                x.bytes,
            )
        };
        key(a).cmp(&key(b))
    });
    out
}

fn merge_extensions(
    reports: &[(&str, &UsageReport)],
    sources: &[SourceEntry],
    warnings: &mut Vec<Warning>,
) -> Result<Extensions, MergeError> {
    let mut ends: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
    let mut earlier: BTreeSet<&str> = BTreeSet::new();
    let mut dropped: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for &(name, r) in reports {
        for (i, rec) in r.extensions.recordings.iter().enumerate() {
            for (j, e) in rec.device_ends.iter().enumerate() {
                let t = parse_rfc3339(&e.end).map_err(|reason| MergeError::BadField {
                    name: name.to_string(),
                    field: format!("extensions.recordings[{i}].device_ends[{j}].end"),
                    reason,
                })?;
                let v = ends
                    .entry(&rec.recording)
                    .or_default()
                    .entry(&e.device_key)
                    .or_insert(t);
                *v = (*v).max(t);
            }
        }
        earlier.extend(r.extensions.earlier_sources.iter().map(String::as_str));
        for k in r.extensions.other.keys() {
            if k != MERGED_REPORTS_KEY {
                dropped.entry(k).or_default().push(name);
            }
        }
    }
    for s in sources {
        earlier.remove(s.sha256.as_str());
    }
    for (k, names) in dropped {
        warnings.push(Warning::new(
            WarningCode::ExtensionNotMerged,
            format!(
                "extensions.{k} of {} is not merged (gpumeter does not know how to merge it)",
                names.join(", ")
            ),
        ));
    }
    let merged: Vec<serde_json::Value> = reports
        .iter()
        .map(|(name, r)| serde_json::json!({"name": name, "sha256": r.sha256}))
        .collect();
    let mut other = serde_json::Map::new();
    other.insert(
        MERGED_REPORTS_KEY.to_string(),
        serde_json::Value::Array(merged),
    );
    Ok(Extensions {
        recordings: ends
            .into_iter()
            .map(|(recording, per)| RecordingEnds {
                recording: recording.to_string(),
                device_ends: per
                    .into_iter()
                    .map(|(device_key, t)| DeviceEnd {
                        device_key: device_key.to_string(),
                        end: rfc3339_ns(t),
                    })
                    .collect(),
            })
            .collect(),
        earlier_sources: earlier.into_iter().map(str::to_string).collect(),
        other,
    })
}
