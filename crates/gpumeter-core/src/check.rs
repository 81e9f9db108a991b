//! The checks every reader of a usage report makes: merge (`--format usage`),
//! rating (`preview`), finalization, usage events and the C ABI all call [`check_report`]
//! before they trust a report, whoever wrote it.
//!
//! A report passes when:
//!
//! * its `schema` is `gpumeter.usage/v1`, its `sha256` matches its content, and its
//!   `window_seconds` is a window size gpumeter meters with (over 0, dividing a day);
//! * every usage row's `window_start` is RFC 3339 on an edge of the report's windows (a
//!   multiple of the window size since the Unix epoch), its quantity is not 0 (the meter
//!   writes no zero row: one could only make a tenant appear, and trigger an invoice
//!   minimum, without usage), its device is listed in `devices` under the same id, and no two
//!   rows have one (tenant, device, window, meter) key (the same hour twice would be billed
//!   twice, and sent as one event of twice the quantity);
//! * `totals` are the rows' sums: one row per (tenant, device, meter) with a non-zero sum,
//!   nothing more, nothing less;
//! * per device and window, the quantities are within what the device can do in a window of
//!   `W` ns: `gpu_busy_ns` ≤ `W`; `sm_ns` ≤ `W` × the device's SM count (a device with
//!   `sm_ns` must have a known SM count above 0); `kernel_ns` ≤ `W` ×
//!   [`MAX_RESIDENT_GRIDS`] (the kernels one device runs at once). `memory_byte_ns` has no
//!   bound yet: no report carries a device's memory size;
//! * every tenant (usage, totals, open allocations) is `unattributed`, `idle` or a tenant
//!   name ([`TenantName::parse`]), and no two tenants of the report are confusable (the same
//!   UTS #39 skeleton, [`TenantName::skeleton`]: Latin `acme` and Cyrillic `аcme` would be two
//!   invoices whose headers read alike);
//! * a report that says `"complete": true` has no snapshot source and no unfinished
//!   recording ([`UsageReport::derived_complete`]).
//!
//! Errors name the row or field (`usage[12]`); the caller adds the report's name.

use std::collections::{BTreeMap, HashMap};

use crate::meter::MAX_RESIDENT_GRIDS;
use crate::report::{MeterKind, UsageReport, STREAM_SNAPSHOT_FORMAT, USAGE_SCHEMA};
use crate::tenant::{TenantName, IDLE, UNATTRIBUTED};
use crate::text::printable;
use crate::time::{parse_rfc3339, rfc3339, WindowSize, NS_PER_SECOND};

/// Why a usage report is refused by [`check_report`]. Each names the row or field at fault;
/// tenant names and other text from the report are shown escaped ([`printable`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReportCheckError {
    /// `schema` is not [`USAGE_SCHEMA`].
    #[error("schema `{found}` is not {USAGE_SCHEMA}")]
    Schema {
        /// The `schema` read.
        found: String,
    },
    /// `sha256` does not match the content: edited or damaged.
    #[error("its sha256 does not match its content (the report was edited or damaged)")]
    Digest,
    /// `window_seconds` is not a window size (over 0 s, dividing one day).
    #[error("window_seconds is {seconds}: {reason}")]
    WindowSeconds {
        /// The value read.
        seconds: u64,
        /// Why it is not a window size.
        reason: String,
    },
    /// A field of a row cannot be read or breaks a rule of its own (a `window_start` that is
    /// not RFC 3339 or not on a window edge, a zero quantity, a device not listed).
    #[error("{place}: {reason}")]
    Row {
        /// The row and field (`usage[3].window_start`).
        place: String,
        /// What is wrong.
        reason: String,
    },
    /// Two usage rows with one (tenant, device, window, meter) key.
    #[error(
        "usage[{row}] has the tenant, device, window and meter of usage[{first}] (tenant \
         `{tenant}`, device {device_key}, window {window_start}, {meter}): one hour would be \
         billed twice"
    )]
    DuplicateRow {
        /// The later row.
        row: usize,
        /// The earlier row with the same key.
        first: usize,
        /// The tenant, escaped.
        tenant: String,
        /// The device key, escaped.
        device_key: String,
        /// The window start, RFC 3339 UTC.
        window_start: String,
        /// The meter.
        meter: MeterKind,
    },
    /// `totals` are not the sums of the usage rows.
    #[error(
        "{place}: the total of {meter} on {device_key} for tenant `{tenant}` is {totals} in \
         totals but the usage rows sum to {rows}"
    )]
    Totals {
        /// The total row (`totals[2]`), or `totals` when the rows' sum has no total row.
        place: String,
        /// The tenant, escaped.
        tenant: String,
        /// The device key, escaped.
        device_key: String,
        /// The meter.
        meter: MeterKind,
        /// What `totals` says (0 when it has no row).
        totals: u128,
        /// What the usage rows sum to (0 when they have none).
        rows: u128,
    },
    /// Usage a device cannot do in a window.
    #[error(transparent)]
    Impossible(Box<ImpossibleUsage>),
    /// A tenant that is not a tenant name.
    #[error("{place}.tenant = \"{tenant}\": {reason}")]
    Tenant {
        /// The row (`usage[3]`, `totals[0]`, `open_allocations[1]`).
        place: String,
        /// The tenant, escaped ([`TenantName::escaped`]: everything outside printable ASCII
        /// as `\u{…}`).
        tenant: String,
        /// Why it is not a tenant name.
        reason: String,
    },
    /// Two tenants that look alike.
    #[error(
        "{place}.tenant `{tenant}` looks like `{other}` of {other_place} (the same UTS #39 \
         confusable skeleton) but is another name: their invoices would read alike"
    )]
    Confusable {
        /// The later row.
        place: String,
        /// Its tenant, escaped ([`TenantName::escaped`]).
        tenant: String,
        /// The earlier row with the look-alike.
        other_place: String,
        /// That tenant, escaped.
        other: String,
    },
    /// `"complete": true` on a report with a snapshot source or an unfinished recording.
    #[error(
        "complete is true, but {why}: a report with a snapshot or an unfinished recording is \
         not complete"
    )]
    FalselyComplete {
        /// What makes it incomplete.
        why: String,
    },
}

/// Usage a device cannot do in a window ([`ReportCheckError::Impossible`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "usage[{row}]: {meter} of device {device_key} in the window starting {window_start} is \
     {quantity} over all tenants, more than the device can do in {window_seconds} s ({limit}: \
     {why})"
)]
pub struct ImpossibleUsage {
    /// The first row of the (device, window, meter) cell.
    pub row: usize,
    /// The device key, escaped.
    pub device_key: String,
    /// The window start, RFC 3339 UTC.
    pub window_start: String,
    /// The window size, seconds.
    pub window_seconds: u64,
    /// The meter.
    pub meter: MeterKind,
    /// The cell's quantity, all tenants together.
    pub quantity: u128,
    /// The bound.
    pub limit: u128,
    /// How the bound is made (`the window`, `the window × 132 SMs`, …).
    pub why: String,
}

/// Checks a usage report as every reader must before trusting it (module docs).
///
/// # Errors
/// The first [`ReportCheckError`] found, in the order of the module docs.
pub fn check_report(report: &UsageReport) -> Result<(), ReportCheckError> {
    if report.schema != USAGE_SCHEMA {
        return Err(ReportCheckError::Schema {
            found: printable(&report.schema).into_owned(),
        });
    }
    if !report.verify_digest() {
        return Err(ReportCheckError::Digest);
    }
    let window = WindowSize::from_seconds(report.window_seconds).map_err(|reason| {
        ReportCheckError::WindowSeconds {
            seconds: report.window_seconds,
            reason,
        }
    })?;
    check_tenants(report)?;
    let cells = check_rows(report, window)?;
    check_totals(report)?;
    check_bounds(report, window, &cells)?;
    if report.complete == Some(true) && !report.derived_complete() {
        let why = if report
            .sources
            .iter()
            .any(|s| s.format == STREAM_SNAPSHOT_FORMAT)
        {
            "a source is a snapshot of a stream (format cupti-stream-snapshot)"
        } else {
            "a warning says a recording has no end frame (unfinished_recording)"
        };
        return Err(ReportCheckError::FalselyComplete { why: why.into() });
    }
    Ok(())
}

impl UsageReport {
    /// Checks the report as every reader must before trusting it ([`check_report`]:
    /// schema, digest, one row per key, no zero rows, rows on window edges, totals equal to
    /// the rows, quantities a device can do, tenant names, completeness).
    ///
    /// # Errors
    /// The first [`ReportCheckError`] found.
    pub fn check(&self) -> Result<(), ReportCheckError> {
        check_report(self)
    }
}

/// (device key, window start ns, meter) → (first row, Σ over tenants).
type Cells<'a> = BTreeMap<(&'a str, u64, MeterKind), (usize, u128)>;

fn row_error(place: String, reason: String) -> ReportCheckError {
    ReportCheckError::Row { place, reason }
}

/// Each usage row on its own, then one row per key; the (device, window, meter) sums.
fn check_rows(report: &UsageReport, window: WindowSize) -> Result<Cells<'_>, ReportCheckError> {
    let ids: HashMap<&str, u32> = report
        .devices
        .iter()
        .map(|d| (d.device_key.as_str(), d.device))
        .collect();
    let mut keys: HashMap<(&str, &str, u64, MeterKind), usize> =
        HashMap::with_capacity(report.usage.len());
    let mut cells = Cells::new();
    for (i, u) in report.usage.iter().enumerate() {
        let start = parse_rfc3339(&u.window_start)
            .map_err(|reason| row_error(format!("usage[{i}].window_start"), reason))?;
        if start % window.ns() != 0 {
            return Err(row_error(
                format!("usage[{i}].window_start"),
                format!(
                    "`{}` is not on an edge of the report's {} s windows (windows are aligned \
                     to multiples of their size from the Unix epoch)",
                    printable(&u.window_start),
                    report.window_seconds
                ),
            ));
        }
        if u.quantity.0 == 0 {
            return Err(row_error(
                format!("usage[{i}].quantity"),
                "is 0: a report has no zero rows (one could bill a tenant that used nothing, \
                 an invoice minimum say)"
                    .into(),
            ));
        }
        match ids.get(u.device_key.as_str()) {
            Some(&id) if id == u.device => {}
            Some(&id) => {
                return Err(row_error(
                    format!("usage[{i}].device"),
                    format!(
                        "is {} but devices lists {} as device {id}",
                        u.device,
                        printable(&u.device_key)
                    ),
                ))
            }
            None => {
                return Err(row_error(
                    format!("usage[{i}].device_key"),
                    format!(
                        "{} is not among the report's devices",
                        printable(&u.device_key)
                    ),
                ))
            }
        }
        let key = (u.tenant.as_str(), u.device_key.as_str(), start, u.meter);
        if let Some(&first) = keys.get(&key) {
            return Err(ReportCheckError::DuplicateRow {
                row: i,
                first,
                tenant: printable(&u.tenant).into_owned(),
                device_key: printable(&u.device_key).into_owned(),
                window_start: rfc3339(start),
                meter: u.meter,
            });
        }
        keys.insert(key, i);
        let cell = cells
            .entry((u.device_key.as_str(), start, u.meter))
            .or_insert((i, 0));
        // A sum past u128 is past every bound too.
        cell.1 = cell.1.saturating_add(u.quantity.0);
    }
    Ok(cells)
}

/// `totals` equal to the rows' sums, one row per (tenant, device, meter).
fn check_totals(report: &UsageReport) -> Result<(), ReportCheckError> {
    type Key<'a> = (&'a str, &'a str, MeterKind);
    let mut sums: BTreeMap<Key<'_>, u128> = BTreeMap::new();
    for u in &report.usage {
        let s = sums
            .entry((u.tenant.as_str(), u.device_key.as_str(), u.meter))
            .or_insert(0);
        *s = s.saturating_add(u.quantity.0);
    }
    let mut seen: HashMap<Key<'_>, usize> = HashMap::with_capacity(report.totals.len());
    for (i, t) in report.totals.iter().enumerate() {
        let key = (t.tenant.as_str(), t.device_key.as_str(), t.meter);
        let rows = sums.get(&key).copied().unwrap_or(0);
        let wrong = |rows: u128| ReportCheckError::Totals {
            place: format!("totals[{i}]"),
            tenant: printable(&t.tenant).into_owned(),
            device_key: printable(&t.device_key).into_owned(),
            meter: t.meter,
            totals: t.quantity.0,
            rows,
        };
        if seen.insert(key, i).is_some() {
            // A second total row for one key: the two together are not the sum.
            return Err(wrong(rows));
        }
        if rows != t.quantity.0 || rows == 0 {
            return Err(wrong(rows));
        }
        let device_ok = report
            .usage
            .iter()
            .find(|u| u.device_key == t.device_key)
            .is_some_and(|u| u.device == t.device);
        if !device_ok {
            return Err(row_error(
                format!("totals[{i}].device"),
                format!(
                    "is {} but the usage rows of {} have another device id",
                    t.device,
                    printable(&t.device_key)
                ),
            ));
        }
    }
    if let Some(((tenant, device_key, meter), rows)) =
        sums.iter().find(|(k, _)| !seen.contains_key(*k))
    {
        return Err(ReportCheckError::Totals {
            place: "totals".into(),
            tenant: printable(tenant).into_owned(),
            device_key: printable(device_key).into_owned(),
            meter: *meter,
            totals: 0,
            rows: *rows,
        });
    }
    Ok(())
}

/// What each (device, window, meter) cell can hold at most.
fn check_bounds(
    report: &UsageReport,
    window: WindowSize,
    cells: &Cells<'_>,
) -> Result<(), ReportCheckError> {
    let w = u128::from(window.ns());
    let seconds = window.ns() / NS_PER_SECOND;
    for (&(device_key, start, meter), &(row, quantity)) in cells {
        let (limit, why) = match meter {
            MeterKind::GpuBusyNs => (w, "the window".to_string()),
            MeterKind::KernelNs => (
                w * u128::from(MAX_RESIDENT_GRIDS),
                format!("the window × {MAX_RESIDENT_GRIDS} kernels resident at once"),
            ),
            MeterKind::SmNs => {
                let sms = report.device(device_key).and_then(|d| d.sm_count);
                match sms {
                    Some(n) if n > 0 => (w * u128::from(n), format!("the window × {n} SMs")),
                    other => {
                        return Err(row_error(
                            format!("usage[{row}]"),
                            format!(
                                "sm_ns on device {} whose SM count is {}: SM time cannot be \
                                 bounded (or done) without SMs",
                                printable(device_key),
                                other.map_or_else(|| "unknown".to_string(), |n| n.to_string())
                            ),
                        ))
                    }
                }
            }
            _ => continue,
        };
        if quantity > limit {
            return Err(ReportCheckError::Impossible(Box::new(ImpossibleUsage {
                row,
                device_key: printable(device_key).into_owned(),
                window_start: rfc3339(start),
                window_seconds: seconds,
                meter,
                quantity,
                limit,
                why,
            })));
        }
    }
    Ok(())
}

/// Every tenant a valid name, and no two confusable.
fn check_tenants(report: &UsageReport) -> Result<(), ReportCheckError> {
    let named = report
        .usage
        .iter()
        .enumerate()
        .map(|(i, r)| (("usage", i), r.tenant.as_str()))
        .chain(
            report
                .totals
                .iter()
                .enumerate()
                .map(|(i, r)| (("totals", i), r.tenant.as_str())),
        )
        .chain(
            report
                .open_allocations
                .iter()
                .enumerate()
                .map(|(i, r)| (("open_allocations", i), r.tenant.as_str())),
        );
    // Skeleton → (first place, name); each distinct name is parsed once.
    let mut by_skeleton: HashMap<String, ((&str, usize), &str)> = HashMap::new();
    let mut parsed: HashMap<&str, ()> = HashMap::new();
    for (place, tenant) in named {
        if parsed.contains_key(tenant) {
            continue;
        }
        let skeleton = if tenant == UNATTRIBUTED || tenant == IDLE {
            unicode_security::skeleton(tenant).collect()
        } else {
            match TenantName::parse(tenant) {
                Ok(name) => name.skeleton(),
                Err(e) => {
                    return Err(ReportCheckError::Tenant {
                        place: format!("{}[{}]", place.0, place.1),
                        // Every character outside printable ASCII as `\u{…}`: a zero-width
                        // space is as invisible in a message as in an invoice.
                        tenant: crate::tenant::escaped_text(tenant),
                        reason: e.to_string(),
                    });
                }
            }
        };
        parsed.insert(tenant, ());
        if let Some(&(other_place, other)) = by_skeleton.get(&skeleton) {
            return Err(ReportCheckError::Confusable {
                place: format!("{}[{}]", place.0, place.1),
                tenant: crate::tenant::escaped_text(tenant),
                other_place: format!("{}[{}]", other_place.0, other_place.1),
                other: crate::tenant::escaped_text(other),
            });
        }
        by_skeleton.insert(skeleton, (place, tenant));
    }
    Ok(())
}
