//! Rating: a usage report and a price book become one invoice per tenant and period.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::{
    MeterKind, Quantity, UsageReport, WindowSize, IDLE, METERING_POLICY, USAGE_SCHEMA,
};
use gpumeter_core::{Warning, WarningCode};
use num_bigint::BigUint;
use num_traits::Zero;
use rust_decimal::Decimal;

use crate::book::{Band, PriceBook, Rate};
pub use crate::error::{BandEdge, RatingError};
pub use crate::invoice::{CarriedFragments, FragmentKey};
use crate::invoice::{
    Fragment, IdleRow, IdleUsage, Invoice, InvoiceDocument, InvoiceExtensions, Line,
    LineExtensions, LineKind, Period, PriceBookRef, Unpriced,
};
use crate::model::{RateModel, Terms};
use crate::money::{amount_minor_units, exact_product, minor_units_to_decimal, quantity_in_unit};

/// Decimal places of `quantity_in_pricing_unit` (shown to 9 decimals, for people).
pub const PRICING_UNIT_DECIMALS: u32 = 9;

/// Where a device's usage goes.
#[derive(Clone)]
enum Pricing {
    /// Rated under the SKU at this index of `book.skus()`.
    Sku(usize),
    /// Listed as unpriced, for this reason.
    Unpriced(String),
}

/// Usage rows of the report that an explicit period leaves out (the default period leaves
/// none out): counted, with the earliest and latest window start, so that every invoice says
/// that they exist and are on none of the period's invoices.
#[derive(Default)]
struct LeftOut<'a> {
    /// Rows left out.
    rows: usize,
    /// The earliest and latest window start of those rows, ns.
    span: Option<(u64, u64)>,
    /// Rows left out per tenant.
    by_tenant: HashMap<&'a str, usize>,
}

impl<'a> LeftOut<'a> {
    fn add(&mut self, tenant: &'a str, window_start: u64) {
        self.rows += 1;
        *self.by_tenant.entry(tenant).or_insert(0) += 1;
        self.span = Some(match self.span {
            None => (window_start, window_start),
            Some((lo, hi)) => (lo.min(window_start), hi.max(window_start)),
        });
    }

    /// The warning of `tenant`'s invoice for the period `[from, to)`, `None` when no row was
    /// left out.
    fn warning(&self, tenant: &str, (from, to): (u64, u64)) -> Option<Warning> {
        let (lo, hi) = self.span?;
        let n = self.rows;
        let own = self.by_tenant.get(tenant).copied().unwrap_or(0);
        let (rows, verb, is) = if n == 1 {
            ("row", "lies", "is")
        } else {
            ("rows", "lie", "are")
        };
        let windows = if lo == hi {
            format!("in the window starting {}", rfc3339(lo))
        } else {
            format!("in windows starting {} to {}", rfc3339(lo), rfc3339(hi))
        };
        Some(Warning::new(
            WarningCode::UsageOutsidePeriod,
            format!(
            "usage outside the period: {n} usage {rows} of the usage report ({own} of them this \
             tenant's), {windows}, {verb} outside [{}, {}) and {is} on no invoice of this period",
            rfc3339(from),
            rfc3339(to)
        ),
        ))
    }
}

#[derive(Default)]
struct TenantUsage<'a> {
    /// Canonical quantity per (SKU index, meter) and window start (ns), for windows with a
    /// rate in force; a series of a carried-in fragment may have no window.
    series: BTreeMap<(usize, MeterKind), BTreeMap<u64, u128>>,
    /// Carried-in fragment per (SKU index, meter).
    fragments_in: BTreeMap<(usize, MeterKind), u128>,
    /// Unpriced quantity per (device key, meter, reason).
    unpriced: BTreeMap<(&'a str, MeterKind, String), u128>,
    /// Meters of this tenant's usage that its SKUs have no rate for (not billed, not listed).
    unrated: BTreeSet<MeterKind>,
}

/// Rates `usage` with `book`: one invoice per tenant that has usage (or a carried-in fragment)
/// in the period, sorted by tenant name (bytewise), in a `gpumeter.invoice/v1` document.
/// [`gpumeter_core::IDLE`] is a report tenant, never invoiced: its usage in the period is summed
/// per device and meter under the document's `extensions.idle` with an `idle_not_invoiced`
/// warning, and a carried-in fragment of `idle` is ignored; a document without idle usage
/// has no `extensions`.
/// Preview and finalization share this one function; `carried_in` holds the
/// fragments the bank carried from the previous period (empty without a bank).
///
/// `period` is `(from, to)` in ns since the Unix epoch, half-open; both must fall on edges of
/// the report's windows. `None`: the usage's span rounded out to whole windows (earliest
/// `window_start` to the latest one plus `window_seconds`); a report without usage then gives a
/// document with no invoices. A usage row counts when its `window_start` lies in the period;
/// when a given period leaves rows of the report out, every invoice warns how many (and how
/// many of them its tenant's), with the earliest and latest window start left out.
///
/// Per tenant, SKU and meter, usage is summed over the devices the SKU matches per window and
/// rated in window order:
/// - each window is priced by the rate in force at its start and the band (time of use) that
///   holds there in the band's zone (local weekday and time at window start); a band edge
///   inside a window is [`RatingError::BandEdgeNotOnWindow`];
/// - the carried-in fragment counts first, as usage of the period's first window;
/// - the billing increment (one canonical unit without one) applies once to the period's
///   total plus the carried-in fragment: the billable quantity is its whole increments, and
///   the rest, the tail of the time-ordered usage, is `fragment_carried` on the lines it
///   comes from and is carried out ([`InvoiceDocument::fragments_out`]);
/// - the rate's model ([`crate::model`]) splits the billable quantity into tiers (graduated
///   consumption accumulates across the period, so a tier edge may split a window) or
///   packages; flat fees of the tiers reached (graduated) or chosen (volume) are lines of
///   their own, from the rate in force where the tier is first reached.
///
/// Lines are per (SKU, meter, rate, tier, band), each amount rounded once
/// (`round(billable × unit_price × multiplier ÷ factor)`). What is not billed:
/// - usage of a meter for which the device's SKU has no rate at all is not billed and not
///   listed (the book chose not to price that meter);
/// - usage on a device with no name, not listed in the report's `devices`, or matched by no
///   SKU, and usage in a window in which none of its SKU's rates for that meter is in force,
///   goes to the invoice's `unpriced` block with a warning, never dropped.
///
/// If the book has an invoice minimum and the usage and flat-fee lines sum to less, a
/// `minimum` line tops them up; the minimum applies to priced usage only (an invoice without
/// a usage line has no `minimum` line and a warning that says why). `subtotal` = Σ lines; `total` = subtotal (credits come with the
/// bank); `ledger_head` null; `usage_sha256` is the report's own `sha256`, copied, or computed
/// here when it is empty (an unsealed report). Every invoice is sealed ([`Invoice::seal`]).
/// The same inputs give byte-identical JSON, whatever the order of the usage rows.
///
/// # Errors
/// [`RatingError::Usage`] for a report of another schema or policy, a bad window size or a
/// `window_start` that is not an RFC 3339 window edge, or (without `period`) a window that
/// ends after the latest time a `u64` of ns holds, naming its row (`usage[i].window_start`);
/// [`RatingError::Period`] for an empty given period or one off window edges;
/// [`RatingError::EdgeNotOnWindow`] for a rate validity edge inside a window;
/// [`RatingError::BandEdgeNotOnWindow`] for a band edge inside a window that has usage;
/// [`RatingError::AmbiguousSku`]; [`RatingError::Fragment`] for a carried-in fragment of an
/// unknown SKU, or carried-in fragments without a period when the report has no usage; [`RatingError::QuantityOverflow`] and [`RatingError::AmountOverflow`] when a
/// quantity or an amount exceeds what the invoice can hold; [`RatingError::Unrateable`],
/// [`RatingError::BandOverlap`] (guards the price book's validation already enforces);
/// [`RatingError::Digest`].
pub fn rate(
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<(u64, u64)>,
    carried_in: &CarriedFragments,
) -> Result<InvoiceDocument, RatingError> {
    check_report(usage)?;
    let window =
        WindowSize::from_seconds(usage.window_seconds).map_err(|reason| RatingError::Usage {
            field: "window_seconds".into(),
            value: usage.window_seconds.to_string(),
            reason,
        })?;
    let starts = window_starts(usage, window)?;

    let (from, to) = match period {
        Some((from, to)) => {
            check_period(from, to, window)?;
            (from, to)
        }
        None => match default_period(usage, &starts, window)? {
            Some(p) => p,
            None => {
                // No usage, so no period to derive. Carried-in fragments cannot be dropped
                // silently: they need a period to be billed in or carried on from.
                if let Some((key, q)) = carried_in.iter().find(|(_, &q)| q > 0) {
                    return Err(RatingError::Fragment {
                        tenant: key.tenant.clone(),
                        reason: format!(
                            "{q} units of {} on sku `{}` are carried in, but the usage report \
                             has no usage to derive a period from; give the period",
                            key.meter, key.sku
                        ),
                    });
                }
                return Ok(InvoiceDocument::new(Vec::new()));
            }
        },
    };

    let sku_index: HashMap<&str, usize> = book
        .skus()
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut rates_of: HashMap<(usize, MeterKind), Vec<&Rate>> = HashMap::new();
    for r in book.rates() {
        if let Some(&s) = sku_index.get(r.sku.as_str()) {
            rates_of.entry((s, r.meter)).or_default().push(r);
        }
    }

    let mut pricing: HashMap<&str, Pricing> = HashMap::new();
    let mut tenants: BTreeMap<&str, TenantUsage<'_>> = BTreeMap::new();
    let mut left_out = LeftOut::default();
    // `idle` is a report tenant, never invoiced (DESIGN §6): its usage in the period is
    // summed per (device key, meter) and listed apart.
    let mut idle: BTreeMap<(&str, MeterKind), u128> = BTreeMap::new();
    for (row, &ws) in usage.usage.iter().zip(&starts) {
        if ws < from || ws >= to {
            left_out.add(&row.tenant, ws);
            continue;
        }
        if row.tenant == IDLE {
            let slot = idle
                .entry((row.device_key.as_str(), row.meter))
                .or_insert(0);
            *slot =
                slot.checked_add(row.quantity.0)
                    .ok_or_else(|| RatingError::QuantityOverflow {
                        tenant: IDLE.to_string(),
                        sku: "(idle)".into(),
                        meter: row.meter,
                    })?;
            continue;
        }
        let p = match pricing.get(row.device_key.as_str()) {
            Some(p) => p.clone(),
            None => {
                let p = resolve_device(usage, book, &row.device_key)?;
                pricing.insert(row.device_key.as_str(), p.clone());
                p
            }
        };
        let acc = tenants.entry(row.tenant.as_str()).or_default();
        let q = row.quantity.0;
        match p {
            Pricing::Sku(s) => {
                let Some(candidates) = rates_of.get(&(s, row.meter)) else {
                    // The SKU does not price this meter: not billed, not listed.
                    acc.unrated.insert(row.meter);
                    continue;
                };
                check_rate_edges(book, candidates, ws, window)?;
                if candidates.iter().any(|r| r.valid_at(ws)) {
                    let slot = acc
                        .series
                        .entry((s, row.meter))
                        .or_default()
                        .entry(ws)
                        .or_insert(0);
                    *slot = slot
                        .checked_add(q)
                        .ok_or_else(|| RatingError::QuantityOverflow {
                            tenant: row.tenant.clone(),
                            sku: book
                                .skus()
                                .get(s)
                                .map_or_else(String::new, |k| k.id.clone()),
                            meter: row.meter,
                        })?;
                } else {
                    let sku = book.skus().get(s).map_or("", |k| k.id.as_str());
                    let reason = format!(
                        "no rate of sku `{sku}` for {} is in force in some of its windows",
                        row.meter
                    );
                    add_unpriced(acc, &row.device_key, row.meter, reason, q, &row.tenant)?;
                }
            }
            Pricing::Unpriced(reason) => {
                add_unpriced(acc, &row.device_key, row.meter, reason, q, &row.tenant)?;
            }
        }
    }
    for (key, &q) in carried_in {
        // `idle` carries nothing: it is never invoiced (a fragment of an older bank's `idle`
        // stays where it is).
        if q == 0 || key.tenant == IDLE {
            continue;
        }
        let &s = sku_index
            .get(key.sku.as_str())
            .ok_or_else(|| RatingError::Fragment {
                tenant: key.tenant.clone(),
                reason: format!(
                    "{} units of {} on sku `{}`, which the price book does not have",
                    q, key.meter, key.sku
                ),
            })?;
        let acc = tenants.entry(key.tenant.as_str()).or_default();
        acc.series.entry((s, key.meter)).or_default();
        acc.fragments_in.insert((s, key.meter), q);
    }

    let common_warnings = report_warnings(usage);
    let usage_sha256 = if usage.sha256.is_empty() {
        // An unsealed report: cite the digest it would have.
        let v = serde_json::to_value(usage).map_err(|e| RatingError::Digest(e.to_string()))?;
        gpumeter_core::document_sha256(&v, "sha256")
            .map_err(|e| RatingError::Digest(e.to_string()))?
    } else {
        usage.sha256.clone()
    };
    let ctx = Context {
        usage,
        book,
        terms: rate_terms(book),
        rates_of,
        bands: BandCache::new(book, window),
        period: (from, to),
        usage_sha256,
    };
    let mut ctx = ctx;
    let mut invoices = Vec::with_capacity(tenants.len());
    for (tenant, acc) in tenants {
        // Loss and the report's warnings, then the usage the period leaves out.
        let mut warnings = common_warnings.clone();
        warnings.extend(left_out.warning(tenant, (from, to)));
        let mut inv = build_invoice(&mut ctx, tenant, acc, &warnings)?;
        inv.seal()?;
        invoices.push(inv);
    }
    let mut doc = InvoiceDocument::new(invoices);
    doc.extensions.idle = idle_usage(usage, &idle, (from, to));
    Ok(doc)
}

/// `extensions.idle` of the document: `idle`'s quantities in the period per (device key,
/// meter), with the warning that says why they are on no invoice; `None` without any.
fn idle_usage(
    usage: &UsageReport,
    idle: &BTreeMap<(&str, MeterKind), u128>,
    (from, to): (u64, u64),
) -> Option<IdleUsage> {
    if idle.is_empty() {
        return None;
    }
    let rows: Vec<IdleRow> = idle
        .iter()
        .map(|(&(device_key, meter), &q)| {
            let entry = usage.device(device_key);
            IdleRow {
                device: entry.map_or(0, |d| d.device),
                device_key: device_key.to_string(),
                name: entry.and_then(|d| d.name.clone()),
                meter,
                quantity: Quantity(q),
            }
        })
        .collect();
    let meters: BTreeSet<&str> = rows.iter().map(|r| r.meter.as_str()).collect();
    let devices: BTreeSet<&str> = rows.iter().map(|r| r.device_key.as_str()).collect();
    let warning = Warning::new(
        WarningCode::IdleNotInvoiced,
        format!(
            "usage of `{IDLE}` ({} on {} device{}) is listed apart and not invoiced: it is what \
             the GPU measured while no tenant's kernel ran (energy, PM-sampled SM activity and \
             DRAM bytes), gpumeter's own report tenant, not a customer",
            meters.into_iter().collect::<Vec<_>>().join(", "),
            devices.len(),
            if devices.len() == 1 { "" } else { "s" }
        ),
    );
    Some(IdleUsage {
        period: Period {
            from: rfc3339(from),
            to: rfc3339(to),
        },
        usage: rows,
        warnings: vec![warning],
    })
}

/// What every invoice of one rating shares.
struct Context<'a> {
    usage: &'a UsageReport,
    book: &'a PriceBook,
    /// Canonical terms of each rate, by rate index.
    terms: Vec<Terms<'a>>,
    rates_of: HashMap<(usize, MeterKind), Vec<&'a Rate>>,
    bands: BandCache<'a>,
    period: (u64, u64),
    usage_sha256: String,
}

/// Each rate's tier edges and package size in canonical units, as the price book's
/// validation computed them.
fn rate_terms(book: &PriceBook) -> Vec<Terms<'_>> {
    book.rates()
        .iter()
        .map(|r| Terms {
            rate: r,
            edges: r.tiers.iter().map(|t| t.up_to_canonical).collect(),
            package: r.package_size_canonical,
        })
        .collect()
}

/// Which bands hold in which windows, checked to hold for whole windows (band
/// edges fall on window edges), cached per (band, window start).
struct BandCache<'a> {
    book: &'a PriceBook,
    window: WindowSize,
    held: HashMap<(usize, u64), bool>,
}

/// Nanoseconds in one minute: band hours are whole local minutes.
const NS_PER_MINUTE: u64 = 60_000_000_000;

impl<'a> BandCache<'a> {
    fn new(book: &'a PriceBook, window: WindowSize) -> Self {
        BandCache {
            book,
            window,
            held: HashMap::new(),
        }
    }

    /// Whether `band` holds at instant `t` (ns since the epoch): the local weekday at `t` is
    /// one of its days (or it has none) and the local time of day is in its end-exclusive
    /// hours, which may wrap midnight. `None` when the zone's offset at `t` is not a whole
    /// number of minutes (local-mean-time offsets before standard time), where band edges
    /// fall between minutes.
    fn holds_at(band: &Band, t: u64) -> Option<bool> {
        use chrono::{Datelike, Offset, TimeZone, Timelike};
        let utc = gpumeter_core::time::ns_to_utc(t);
        let offset = band.tz.offset_from_utc_datetime(&utc.naive_utc()).fix();
        if offset.local_minus_utc() % 60 != 0 {
            return None;
        }
        let local = utc.with_timezone(&band.tz);
        let minute = local.hour() * 60 + local.minute();
        Some(band.holds_at(local.weekday(), minute))
    }

    /// Whether band `b` holds over the window starting `ws`; an error when it begins or ends
    /// inside the window. The band can only change at a local minute boundary, which (with
    /// whole-minute offsets) is a UTC minute boundary: each one inside the window is checked.
    fn holds(&mut self, b: usize, ws: u64) -> Result<bool, RatingError> {
        if let Some(&h) = self.held.get(&(b, ws)) {
            return Ok(h);
        }
        let Some(band) = self.book.bands().get(b) else {
            return Ok(false);
        };
        let (line, column) = self
            .book
            .place_of(&format!("band[{b}]"), "hours")
            .unwrap_or((1, 1));
        let edge_err = |edge: u64| {
            RatingError::BandEdgeNotOnWindow(Box::new(BandEdge {
                book: self.book.name().to_string(),
                line,
                column,
                band: b,
                name: band.name.clone(),
                tz: band.tz.name().to_string(),
                edge: rfc3339(edge),
                window_start: rfc3339(ws),
                window_seconds: self.window.seconds(),
            }))
        };
        let at_start = Self::holds_at(band, ws).ok_or_else(|| edge_err(ws))?;
        let end = ws.saturating_add(self.window.ns());
        let mut m = (ws / NS_PER_MINUTE + 1).saturating_mul(NS_PER_MINUTE);
        while m < end {
            if Self::holds_at(band, m) != Some(at_start) {
                return Err(edge_err(m));
            }
            m = m.saturating_add(NS_PER_MINUTE);
        }
        self.held.insert((b, ws), at_start);
        Ok(at_start)
    }

    /// The band that prices `sku`'s `meter` in the window starting `ws`, `None` outside
    /// every band.
    fn band_for(
        &mut self,
        sku: &str,
        meter: MeterKind,
        ws: u64,
    ) -> Result<Option<usize>, RatingError> {
        let mut found: Option<usize> = None;
        for b in 0..self.book.bands().len() {
            let Some(band) = self.book.bands().get(b) else {
                continue;
            };
            let applies = (band.meters.is_empty() || band.meters.contains(&meter))
                && (band.skus.is_empty() || band.skus.iter().any(|s| s == sku));
            if !applies || !self.holds(b, ws)? {
                continue;
            }
            if let Some(first) = found {
                return Err(RatingError::BandOverlap {
                    book: self.book.name().to_string(),
                    first,
                    second: b,
                    sku: sku.to_string(),
                    meter,
                    window_start: rfc3339(ws),
                });
            }
            found = Some(b);
        }
        Ok(found)
    }
}

fn check_report(usage: &UsageReport) -> Result<(), RatingError> {
    if usage.schema != USAGE_SCHEMA {
        return Err(RatingError::Usage {
            field: "schema".into(),
            value: format!("\"{}\"", usage.schema),
            reason: format!("expected \"{USAGE_SCHEMA}\""),
        });
    }
    if usage.metering_policy != METERING_POLICY {
        return Err(RatingError::Usage {
            field: "metering_policy".into(),
            value: format!("\"{}\"", usage.metering_policy),
            reason: format!("rating rates metering policy \"{METERING_POLICY}\" only"),
        });
    }
    Ok(())
}

/// Refuses a validity edge of `rates` strictly inside the window starting `ws` (validity
/// edges fall on window edges), so no window with usage has two prices. Only the
/// rates of a SKU and meter that have usage in the window are asked: an edge elsewhere in the
/// book does not concern this usage.
fn check_rate_edges(
    book: &PriceBook,
    rates: &[&Rate],
    ws: u64,
    window: WindowSize,
) -> Result<(), RatingError> {
    let end = ws.saturating_add(window.ns());
    for r in rates {
        for (field, edge) in [("valid_from", r.valid_from), ("valid_to", r.valid_to)] {
            if let Some(t) = edge.filter(|&t| ws < t && t < end) {
                let (line, column) = book
                    .place_of(&format!("rate[{}]", r.index), field)
                    .unwrap_or((1, 1));
                return Err(RatingError::EdgeNotOnWindow {
                    book: book.name().to_string(),
                    line,
                    column,
                    rate: r.index,
                    field: field.into(),
                    value: rfc3339(t),
                    window_seconds: window.seconds(),
                });
            }
        }
    }
    Ok(())
}

/// The usage's span rounded out to whole windows, `None` without usage. A window that ends
/// after the latest time a `u64` of ns holds (2554-07-21T23:34:33.709551615Z) is a fault of
/// the usage report (its row is named), not of the command line: no period was given.
fn default_period(
    usage: &UsageReport,
    starts: &[u64],
    window: WindowSize,
) -> Result<Option<(u64, u64)>, RatingError> {
    let (Some(&lo), Some(&hi)) = (starts.iter().min(), starts.iter().max()) else {
        return Ok(None);
    };
    if let Some(end) = hi.checked_add(window.ns()) {
        return Ok(Some((lo, end)));
    }
    let i = starts
        .iter()
        .position(|&s| s.checked_add(window.ns()).is_none())
        .unwrap_or_default();
    let value = usage
        .usage
        .get(i)
        .map_or_else(String::new, |r| format!("\"{}\"", r.window_start));
    Err(RatingError::Usage {
        field: format!("usage[{i}].window_start"),
        value,
        reason: format!(
            "its {} s window ends after {}, the latest time gpumeter holds (2^64 − 1 ns after the \
             Unix epoch), so the usage's period cannot end; rate an explicit period that ends \
             before this window",
            window.seconds(),
            rfc3339(u64::MAX)
        ),
    })
}

fn check_period(from: u64, to: u64, window: WindowSize) -> Result<(), RatingError> {
    let err = |reason: String| RatingError::Period {
        from: rfc3339(from),
        to: rfc3339(to),
        reason,
    };
    if from >= to {
        return Err(err("the start must be before the end".into()));
    }
    for (name, t) in [("start", from), ("end", to)] {
        if t % window.ns() != 0 {
            return Err(err(format!(
                "the {name} is not on an edge of the usage's {} s windows (UTC multiples of the \
                 window size from the epoch), so a window would straddle the period",
                window.seconds()
            )));
        }
    }
    Ok(())
}

/// Each usage row's window start in ns, checked to be on a window edge.
fn window_starts(usage: &UsageReport, window: WindowSize) -> Result<Vec<u64>, RatingError> {
    let mut cache: HashMap<&str, u64> = HashMap::new();
    let mut out = Vec::with_capacity(usage.usage.len());
    for (i, row) in usage.usage.iter().enumerate() {
        let text = row.window_start.as_str();
        let t = match cache.get(text) {
            Some(&t) => t,
            None => {
                let bad = |reason: String| RatingError::Usage {
                    field: format!("usage[{i}].window_start"),
                    value: format!("\"{text}\""),
                    reason,
                };
                let t = parse_rfc3339(text).map_err(bad)?;
                if t % window.ns() != 0 {
                    return Err(bad(format!(
                        "not the start of a {} s window",
                        window.seconds()
                    )));
                }
                cache.insert(text, t);
                t
            }
        };
        out.push(t);
    }
    Ok(out)
}

fn resolve_device(
    usage: &UsageReport,
    book: &PriceBook,
    device_key: &str,
) -> Result<Pricing, RatingError> {
    let Some(dev) = usage.device(device_key) else {
        return Ok(Pricing::Unpriced(
            "the device is not listed in the usage report's devices, so it has no name".into(),
        ));
    };
    let Some(name) = dev.name.as_deref() else {
        return Ok(Pricing::Unpriced(
            "the device has no name, so no SKU can match it".into(),
        ));
    };
    match book.sku_for(name)? {
        Some(sku) => Ok(Pricing::Sku(sku.index)),
        None => Ok(Pricing::Unpriced(format!(
            "no SKU of the price book matches the device name \"{name}\""
        ))),
    }
}

fn add_unpriced<'a>(
    acc: &mut TenantUsage<'a>,
    device_key: &'a str,
    meter: MeterKind,
    reason: String,
    q: u128,
    tenant: &str,
) -> Result<(), RatingError> {
    let slot = acc.unpriced.entry((device_key, meter, reason)).or_insert(0);
    *slot = slot
        .checked_add(q)
        .ok_or_else(|| RatingError::QuantityOverflow {
            tenant: tenant.to_string(),
            sku: "(unpriced)".into(),
            meter,
        })?;
    Ok(())
}

/// Warnings every invoice from this report carries: loss, then the report's own warnings.
fn report_warnings(usage: &UsageReport) -> Vec<Warning> {
    let mut out = Vec::new();
    if !usage.loss.is_empty() {
        // PM-sampling overflows count overflows, not samples: said apart. The other reasons
        // are shared by records and PM samples, so a PM-sampled report's count may hold both.
        let overflow = |l: &&gpumeter_core::LossEntry| l.reason == "pm_sample_overflow";
        let sampled = usage.loss.iter().any(|l| overflow(&l))
            || usage
                .usage
                .iter()
                .any(|r| matches!(r.meter, MeterKind::SmActiveNs | MeterKind::DramBytes));
        let what = if sampled {
            "records or PM samples"
        } else {
            "records"
        };
        let part = |l: &gpumeter_core::LossEntry| {
            let least = if l.lower_bound { "at least " } else { "" };
            format!("{least}{} {} on {}", l.records, l.reason, l.device_key)
        };
        let others: Vec<&gpumeter_core::LossEntry> =
            usage.loss.iter().filter(|l| !overflow(l)).collect();
        let mut said = Vec::new();
        if !others.is_empty() {
            let total: u128 = others.iter().map(|l| u128::from(l.records)).sum();
            let least = if others.iter().any(|l| l.lower_bound) {
                "at least "
            } else {
                ""
            };
            let parts: Vec<String> = others.iter().map(|l| part(l)).collect();
            said.push(format!(
                "{least}{total} {what} lost ({}); lost {what} count in no meter",
                parts.join(", ")
            ));
        }
        let overflows: u128 = usage
            .loss
            .iter()
            .filter(overflow)
            .map(|l| u128::from(l.records))
            .sum();
        if overflows > 0 {
            said.push(format!(
                "PM sampling's hardware buffer overflowed {overflows} {}: the samples it \
                 overwrote are not metered; at least {overflows} lost",
                if overflows == 1 { "time" } else { "times" }
            ));
        }
        out.push(Warning::new(
            WarningCode::UsageLoss,
            format!(
                "usage has loss: {}, so this invoice may bill less than was used",
                said.join("; ")
            ),
        ));
    }
    // Each copied warning keeps its code (an uncoded one of an old report stays uncoded).
    out.extend(usage.warnings.iter().map(|w| w.prefixed("usage report: ")));
    // Issue 30 item 12: a snapshot's or an unfinished recording's windows may still grow.
    if let Some(why) = usage.incomplete_because() {
        out.push(Warning::new(
            WarningCode::IncompleteUsage,
            format!(
                "the usage report is incomplete ({why}): its last windows may still grow, so \
                 this invoice may bill less than will have been used"
            ),
        ));
    }
    out
}

/// One invoice line being summed: canonical quantities and the priced count.
struct LineAcc {
    quantity: u128,
    billable: u128,
    count: u128,
    /// Unit price times the band's multiplier, exactly.
    unit_price: Decimal,
    factor: (u128, u128),
}

/// The lines of one (tenant, SKU, meter) series, and its fragment carried out.
struct SeriesLines {
    lines: Vec<Line>,
    /// Sum of the lines' amounts, minor units.
    minor: BigUint,
    fragment_out: u128,
}

/// Rates one tenant's series of one SKU and meter: window pieces in time order (the carried-in
/// fragment first), the increment on the total, the model's parts, one line per (rate, tier,
/// band), then the flat fees of the tiers reached.
#[allow(clippy::too_many_lines)]
fn rate_series(
    ctx: &mut Context<'_>,
    tenant: &str,
    (s, meter): (usize, MeterKind),
    windows: &BTreeMap<u64, u128>,
    fragment_in: u128,
    warnings: &mut Vec<Warning>,
) -> Result<SeriesLines, RatingError> {
    let book = ctx.book;
    let currency = book.currency();
    let sku = book.skus().get(s).map_or("", |k| k.id.as_str());
    let candidates: Vec<&Rate> = ctx.rates_of.get(&(s, meter)).cloned().unwrap_or_default();
    let overflow = || RatingError::QuantityOverflow {
        tenant: tenant.to_string(),
        sku: sku.to_string(),
        meter,
    };

    // Pieces in time order: (rate index, band, canonical quantity).
    let mut pieces: Vec<(usize, Option<usize>, u128)> = Vec::with_capacity(windows.len() + 1);
    let mut unbilled_in = 0u128;
    if fragment_in > 0 {
        let (from, _) = ctx.period;
        // Usage of the period's first window: the rate in force there, else the first rate
        // in force in a window of the period that has usage.
        let at_start = candidates
            .iter()
            .find(|r| r.valid_at(from))
            .map(|r| (r.index, from));
        let first_used = windows.keys().find_map(|&ws| {
            candidates
                .iter()
                .find(|r| r.valid_at(ws))
                .map(|r| (r.index, ws))
        });
        match at_start.or(first_used) {
            Some((r, ws)) => {
                check_rate_edges(book, &candidates, ws, ctx.bands.window)?;
                let band = ctx.bands.band_for(sku, meter, ws)?;
                pieces.push((r, band, fragment_in));
            }
            None => {
                unbilled_in = fragment_in;
                warnings.push(Warning::new(
                    WarningCode::FragmentNotRated,
                    format!(
                        "a carried-in fragment of {fragment_in} {} of {meter} on sku `{sku}` is \
                     carried on whole: no rate of the sku for the meter is in force in the \
                     period",
                        meter.canonical_unit()
                    ),
                ));
            }
        }
    }
    for (&ws, &q) in windows {
        let Some(r) = candidates.iter().find(|r| r.valid_at(ws)) else {
            continue;
        };
        let band = ctx.bands.band_for(sku, meter, ws)?;
        pieces.push((r.index, band, q));
    }

    // One increment per SKU and meter (the price book refuses rates that differ).
    let increment = candidates
        .iter()
        .find_map(|r| r.increment_canonical)
        .unwrap_or(1)
        .max(1);
    let mut total = 0u128;
    for &(_, _, q) in &pieces {
        total = total.checked_add(q).ok_or_else(overflow)?;
    }
    let billable_total = total - total % increment;

    // Lines keyed by (validity start, rate index, tier, band), so they print in time order.
    let mut accs: BTreeMap<(u64, usize, Option<usize>, Option<usize>), LineAcc> = BTreeMap::new();
    // Flat fees: tier → rate index where first reached.
    // Flat fees, by (validity start, rate index, tier) of the rate where each was charged.
    // Graduated: once per tier reached; volume: once, for the tier chosen (DESIGN §5).
    let mut fees: BTreeSet<(u64, usize, usize)> = BTreeSet::new();
    let mut tiers_reached: BTreeSet<usize> = BTreeSet::new();
    let mut volume_fee_charged = false;
    let mut cum = 0u128;
    // Where the package span in progress began (`None` outside one): a run of pieces priced
    // by package rates, which a piece of usage under another model ends. Packages are
    // counted from the span's start, so usage under another model earlier in the period
    // never fills them.
    let mut span_start: Option<u128> = None;
    for &(ri, band, q) in &pieces {
        let Some(terms) = ctx.terms.get(ri) else {
            continue;
        };
        let r = terms.rate;
        let span = if r.model == RateModel::Package {
            *span_start.get_or_insert(cum)
        } else {
            if q > 0 {
                span_start = None;
            }
            cum
        };
        let multiplier = band.and_then(|b| book.bands().get(b)).map(|b| b.multiplier);
        for part in terms.parts(cum, q, billable_total, span) {
            let unit_price = match multiplier {
                None => part.unit_price,
                Some(m) => {
                    let exact = exact_product(part.unit_price, m).ok_or_else(|| {
                        RatingError::Unrateable {
                            book: book.name().to_string(),
                            table: format!("band[{}]", band.unwrap_or_default()),
                            field: "multiplier".into(),
                            reason: format!(
                                "{m} × {} (rate[{}]) cannot be held exactly in a decimal",
                                part.unit_price, r.index
                            ),
                        }
                    })?;
                    // Shown without the multiplier's trailing zeros, never with fewer
                    // decimals than the book wrote the price with (0.019000 × 0.60 shows
                    // 0.011400); the value is the same exact product.
                    let mut shown = exact.normalize();
                    if shown.scale() < part.unit_price.scale() {
                        shown.rescale(part.unit_price.scale());
                    }
                    shown
                }
            };
            let key = (r.valid_from.unwrap_or(0), r.index, part.tier, band);
            let acc = accs.entry(key).or_insert(LineAcc {
                quantity: 0,
                billable: 0,
                count: 0,
                unit_price,
                factor: part.factor,
            });
            acc.quantity = acc
                .quantity
                .checked_add(part.quantity)
                .ok_or_else(overflow)?;
            acc.billable = acc
                .billable
                .checked_add(part.billable)
                .ok_or_else(overflow)?;
            acc.count = acc.count.checked_add(part.count).ok_or_else(overflow)?;
            if let (Some(k), true) = (part.tier, part.billable > 0) {
                let first = match r.model {
                    RateModel::Volume => !std::mem::replace(&mut volume_fee_charged, true),
                    _ => tiers_reached.insert(k),
                };
                let has_fee = r.tiers.get(k).is_some_and(|t| t.flat_fee.is_some());
                if first && has_fee {
                    fees.insert((r.valid_from.unwrap_or(0), r.index, k));
                }
            }
        }
        cum = cum.checked_add(q).ok_or_else(overflow)?;
    }

    let amount_overflow = |what: String, minor: &BigUint| RatingError::AmountOverflow {
        tenant: tenant.to_string(),
        what,
        minor_units: minor.to_string(),
        currency: currency.code().to_string(),
    };
    let mut lines = Vec::with_capacity(accs.len() + fees.len());
    let mut minor_sum = BigUint::zero();
    let mut fragment_out = unbilled_in;
    for ((_, ri, tier, band), acc) in accs {
        let Some(terms) = ctx.terms.get(ri) else {
            continue;
        };
        let r = terms.rate;
        let what = format!("sku {sku} {meter}");
        let minor = amount_minor_units(
            acc.count,
            acc.unit_price,
            acc.factor,
            &currency,
            book.rounding(),
        )
        .ok_or_else(|| amount_overflow(what.clone(), &BigUint::zero()))?;
        let amount = minor_units_to_decimal(&minor, &currency)
            .ok_or_else(|| amount_overflow(what, &minor))?;
        minor_sum += &minor;
        let fragment = acc.quantity - acc.billable;
        fragment_out = fragment_out.checked_add(fragment).ok_or_else(overflow)?;
        let packages = (r.model == RateModel::Package).then_some(Quantity(acc.count));
        lines.push(Line {
            kind: LineKind::Usage,
            sku: Some(r.sku.clone()),
            meter: Some(meter),
            band: band
                .and_then(|b| book.bands().get(b))
                .map(|b| b.name.clone()),
            tier: tier.map(|k| terms.tier_label(k)),
            quantity: Some(Quantity(acc.quantity)),
            unit: Some(meter.canonical_unit().to_string()),
            pricing_unit: Some(r.unit.name().to_string()),
            quantity_in_pricing_unit: Some(quantity_in_unit(
                acc.billable,
                &r.unit,
                PRICING_UNIT_DECIMALS,
            )),
            billable_quantity: Some(Quantity(acc.billable)),
            fragment_carried: Some(Quantity(fragment)),
            unit_price: Some(acc.unit_price),
            amount,
            extensions: LineExtensions {
                packages,
                ..LineExtensions::default()
            },
        });
    }
    for (_, ri, k) in fees {
        let Some(terms) = ctx.terms.get(ri) else {
            continue;
        };
        let r = terms.rate;
        let Some(fee) = r.tiers.get(k).and_then(|t| t.flat_fee) else {
            continue;
        };
        let what = format!("sku {sku} {meter} flat fee");
        let minor = amount_minor_units(1, fee, (1, 1), &currency, book.rounding())
            .ok_or_else(|| amount_overflow(what.clone(), &BigUint::zero()))?;
        let amount = minor_units_to_decimal(&minor, &currency)
            .ok_or_else(|| amount_overflow(what, &minor))?;
        minor_sum += &minor;
        lines.push(Line {
            kind: LineKind::FlatFee,
            sku: Some(r.sku.clone()),
            meter: Some(meter),
            tier: Some(terms.tier_label(k)),
            unit_price: Some(fee),
            // Every other field null, as on a minimum line.
            ..Line::minimum(amount)
        });
    }
    Ok(SeriesLines {
        lines,
        minor: minor_sum,
        fragment_out,
    })
}

fn build_invoice(
    ctx: &mut Context<'_>,
    tenant: &str,
    acc: TenantUsage<'_>,
    common_warnings: &[Warning],
) -> Result<Invoice, RatingError> {
    let usage = ctx.usage;
    let book = ctx.book;
    let (from, to) = ctx.period;
    let currency = book.currency();
    let overflow = |what: String, minor: &BigUint| RatingError::AmountOverflow {
        tenant: tenant.to_string(),
        what,
        minor_units: minor.to_string(),
        currency: currency.code().to_string(),
    };
    let mut warnings = common_warnings.to_vec();

    // Series in (SKU id, meter) order.
    let mut keys: Vec<(usize, MeterKind)> = acc.series.keys().copied().collect();
    keys.sort_by(|a, b| {
        let id = |s: usize| book.skus().get(s).map_or("", |k| k.id.as_str());
        (id(a.0), a.1).cmp(&(id(b.0), b.1))
    });
    let mut lines = Vec::new();
    let mut usage_sum = BigUint::zero();
    let mut extensions = InvoiceExtensions::default();
    let empty = BTreeMap::new();
    for key in keys {
        let windows = acc.series.get(&key).unwrap_or(&empty);
        let fragment_in = acc.fragments_in.get(&key).copied().unwrap_or(0);
        let series = rate_series(ctx, tenant, key, windows, fragment_in, &mut warnings)?;
        let sku = book
            .skus()
            .get(key.0)
            .map_or_else(String::new, |k| k.id.clone());
        if fragment_in > 0 {
            extensions.fragments_in.push(Fragment {
                sku: sku.clone(),
                meter: key.1,
                quantity: Quantity(fragment_in),
            });
        }
        if series.fragment_out > 0 {
            extensions.fragments_out.push(Fragment {
                sku,
                meter: key.1,
                quantity: Quantity(series.fragment_out),
            });
        }
        usage_sum += series.minor;
        lines.extend(series.lines);
    }

    // The minimum tops up priced usage only: an invoice without a usage line (all of its
    // usage unpriced, or of meters the book does not rate) has nothing to top up, and says so.
    // (`idle` has no invoice at all: it is listed apart.)
    let mut subtotal_minor = usage_sum.clone();
    let mut minimum_waived = None;
    if let Some(min_minor) = book.invoice_minimum_minor_units() {
        let min_minor = BigUint::from(min_minor);
        if lines.is_empty() {
            if !min_minor.is_zero() {
                let amount = minor_units_to_decimal(&min_minor, &currency)
                    .ok_or_else(|| overflow("minimum".into(), &min_minor))?;
                minimum_waived = Some(amount);
            }
        } else if usage_sum < min_minor {
            let top_up = &min_minor - &usage_sum;
            let amount = minor_units_to_decimal(&top_up, &currency)
                .ok_or_else(|| overflow("minimum".into(), &top_up))?;
            lines.push(Line::minimum(amount));
            subtotal_minor = min_minor;
        }
    }
    let subtotal = minor_units_to_decimal(&subtotal_minor, &currency)
        .ok_or_else(|| overflow("subtotal".into(), &subtotal_minor))?;

    let mut unpriced = Vec::with_capacity(acc.unpriced.len());
    let mut warned: BTreeSet<(&str, &str)> = BTreeSet::new();
    for ((device_key, meter, reason), q) in &acc.unpriced {
        let entry = usage.device(device_key);
        let name = entry.and_then(|d| d.name.clone());
        let device = entry.map_or(0, |d| d.device);
        if warned.insert((device_key, reason.as_str())) {
            warnings.push(Warning::new(
                WarningCode::UsageNotPriced,
                format!(
                    "usage on device {device_key} ({}) is not priced: {reason}; it is listed \
                     under `unpriced` and not billed",
                    name.as_deref().unwrap_or("no name")
                ),
            ));
        }
        unpriced.push(Unpriced {
            device,
            device_key: device_key.to_string(),
            name,
            meter: *meter,
            quantity: Quantity(*q),
            reason: reason.clone(),
        });
    }
    if let Some(minimum) = minimum_waived {
        let mut why = Vec::new();
        if !unpriced.is_empty() {
            why.push("see unpriced".to_string());
        }
        if !acc.unrated.is_empty() {
            let meters: Vec<String> = acc.unrated.iter().map(ToString::to_string).collect();
            why.push(format!(
                "the price book has no rate for {} on this usage's SKUs (not billed)",
                meters.join(", ")
            ));
        }
        let mut w = format!(
            "the invoice minimum of {minimum} {} does not apply: this invoice has no priced \
             usage",
            currency.code()
        );
        for part in why {
            w.push_str("; ");
            w.push_str(&part);
        }
        warnings.push(Warning::new(WarningCode::MinimumNotApplied, w));
    }

    Ok(Invoice {
        tenant: tenant.to_string(),
        currency: currency.code().to_string(),
        period: Period {
            from: rfc3339(from),
            to: rfc3339(to),
        },
        price_book: PriceBookRef {
            version: book.version().to_string(),
            sha256: book.sha256().to_string(),
        },
        lines,
        unpriced,
        subtotal,
        credits_applied: Vec::new(),
        total: subtotal,
        warnings,
        usage_sha256: ctx.usage_sha256.clone(),
        ledger_head: None,
        sha256: String::new(),
        extensions,
    })
}
