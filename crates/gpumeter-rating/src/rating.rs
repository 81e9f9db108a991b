//! Rating v0: a usage report and a price book become one invoice per tenant and period
//! (DESIGN §5, §7).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::{
    MeterKind, Quantity, UsageReport, WindowSize, IDLE, METERING_POLICY, USAGE_SCHEMA,
};
use num_bigint::BigUint;
use num_traits::Zero;

use crate::book::{PriceBook, Rate};
use crate::invoice::{Invoice, InvoiceDocument, Line, LineKind, Period, PriceBookRef, Unpriced};
use crate::money::{line_amount_minor_units, minor_units_to_decimal, quantity_in_unit};

/// Decimal places of `quantity_in_pricing_unit` (DESIGN §5: shown to 9 decimals, for people).
pub const PRICING_UNIT_DECIMALS: u32 = 9;

/// Errors rating a usage report. No error yields a partial invoice (DESIGN §11).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RatingError {
    /// The usage report is not one rating can read.
    #[error("usage report: {field} = {value}: {reason}")]
    Usage {
        /// The field (`schema`, `window_seconds`, `usage[12].window_start`).
        field: String,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// The requested period (the caller's, never a default derived from the usage) is empty or
    /// not on window edges.
    #[error("period [{from}, {to}): {reason}")]
    Period {
        /// Start, RFC 3339 UTC.
        from: String,
        /// End (exclusive), RFC 3339 UTC.
        to: String,
        /// What is wrong.
        reason: String,
    },
    /// A rate's validity edge lies inside a usage window, so that window would have two
    /// prices (DESIGN §5: rate validity edges must fall on window edges).
    #[error(
        "{book}: rate[{rate}].{field} = {value} is not on an edge of the usage's {window_seconds} s \
         windows (UTC multiples of the window size from the epoch)"
    )]
    EdgeNotOnWindow {
        /// The price book's file name.
        book: String,
        /// The rate's index among `[[rate]]`, from 0.
        rate: usize,
        /// `valid_from` or `valid_to`.
        field: String,
        /// The edge, RFC 3339 UTC.
        value: String,
        /// The usage report's window size, seconds.
        window_seconds: u64,
    },
    /// Two SKUs match a device name equally well (DESIGN §5: a validation error).
    #[error("device `{device}` matches sku `{first}` and sku `{second}` equally well")]
    AmbiguousSku {
        /// The device name.
        device: String,
        /// One SKU id.
        first: String,
        /// The other SKU id.
        second: String,
    },
    /// A line's canonical quantity exceeds `u128`.
    #[error(
        "tenant `{tenant}`: the total {meter} on sku `{sku}` exceeds 2^128 − 1 canonical units"
    )]
    QuantityOverflow {
        /// The tenant.
        tenant: String,
        /// The SKU id.
        sku: String,
        /// The meter.
        meter: MeterKind,
    },
    /// An amount exceeds what a `rust_decimal::Decimal` holds (a 96-bit mantissa, about
    /// 7.9 × 10^28 minor units).
    #[error(
        "tenant `{tenant}`: {what}: the amount, {minor_units} minor units of {currency}, exceeds \
         what a decimal can hold (about 7.9e28 minor units)"
    )]
    AmountOverflow {
        /// The tenant.
        tenant: String,
        /// Which amount (`sku h100 sm_ns`, `subtotal`).
        what: String,
        /// The amount in minor units, exactly.
        minor_units: String,
        /// The currency code.
        currency: String,
    },
    /// The invoice could not be serialized for its digest.
    #[error("cannot compute the invoice digest: {0}")]
    Digest(String),
}

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
    fn warning(&self, tenant: &str, (from, to): (u64, u64)) -> Option<String> {
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
        Some(format!(
            "usage outside the period: {n} usage {rows} of the usage report ({own} of them this \
             tenant's), {windows}, {verb} outside [{}, {}) and {is} on no invoice of this period",
            rfc3339(from),
            rfc3339(to)
        ))
    }
}

#[derive(Default)]
struct TenantUsage<'a> {
    /// Canonical quantity per rate index.
    lines: BTreeMap<usize, u128>,
    /// Unpriced quantity per (device key, meter, reason).
    unpriced: BTreeMap<(&'a str, MeterKind, String), u128>,
    /// Meters of this tenant's usage that its SKUs have no rate for (not billed, not listed).
    unrated: BTreeSet<MeterKind>,
}

/// Rates `usage` with `book`: one invoice per tenant that has usage in the period, sorted
/// by tenant name (bytewise), in a `gpumeter.invoice/v1` document (DESIGN §5, §7).
///
/// `period` is `(from, to)` in ns since the Unix epoch, half-open; both must fall on edges of
/// the report's windows. `None`: the usage's span rounded out to whole windows (earliest
/// `window_start` to the latest one plus `window_seconds`); a report without usage then gives a
/// document with no invoices. A usage row counts when its `window_start` lies in the period;
/// when a given period leaves rows of the report out, every invoice warns how many (and how
/// many of them its tenant's), with the earliest and latest window start left out. (A tenant
/// whose usage lies wholly outside gets no invoice; the others' warnings count its rows.)
///
/// Per tenant, usage is summed over windows and over the devices each SKU matches, exactly
/// (`u128`), into one line per (SKU, meter, rate in force) for every rate of that SKU and
/// meter; a window is priced by the rate in force at its start. Each line's amount is rounded
/// once ([`crate::money::line_amount`]). What is not billed:
/// - usage of a meter for which the device's SKU has no rate at all is not billed and not
///   listed (the book chose not to price that meter);
/// - usage on a device with no name, not listed in the report's `devices`, or matched by no
///   SKU, and usage in a window in which none of its SKU's rates for that meter is in force,
///   goes to the invoice's `unpriced` block with a warning, never dropped.
///
/// If the book has an invoice minimum and the usage lines sum to less, a `minimum` line tops
/// them up; the minimum applies to priced usage only, so an invoice without a usage line (all
/// of its usage unpriced or of meters the book does not rate) has no `minimum` line and a
/// warning that says why (a usage line of amount 0 still gets the top-up). The invoice of
/// [`gpumeter_core::IDLE`] (the energy of windows no tenant used) never gets a `minimum` line:
/// `idle` is not a customer, and its invoice says so in a warning; `unattributed` is billed as
/// any tenant (a single-tenant preview without `--tenant` is billed as `unattributed`).
/// `subtotal` = Σ lines; `total` = subtotal (no credits in v0); `ledger_head` null;
/// `usage_sha256` is the report's own `sha256`, copied (callers verify the report), or the
/// report's digest computed here when its `sha256` is empty (an unsealed report). Warnings:
/// loss in the report, the report's own warnings (prefixed `usage report:`), usage rows the
/// given period leaves out, each unpriced device, and a minimum that does not apply. Every
/// invoice is sealed ([`Invoice::seal`]). The same inputs give byte-identical
/// JSON.
///
/// # Errors
/// [`RatingError::Usage`] for a report of another schema or policy, a bad window size or a
/// `window_start` that is not an RFC 3339 window edge, or (without `period`) a window that
/// ends after the latest time a `u64` of ns holds, naming its row (`usage[i].window_start`);
/// [`RatingError::Period`] for an empty given period or one off window edges (only a given
/// `period` yields it); [`RatingError::EdgeNotOnWindow`] for a rate validity edge
/// inside a window; [`RatingError::AmbiguousSku`]; [`RatingError::QuantityOverflow`] and
/// [`RatingError::AmountOverflow`] when a quantity or an amount exceeds what the invoice can
/// hold; [`RatingError::Digest`].
pub fn rate(
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<(u64, u64)>,
) -> Result<InvoiceDocument, RatingError> {
    check_report(usage)?;
    let window =
        WindowSize::from_seconds(usage.window_seconds).map_err(|reason| RatingError::Usage {
            field: "window_seconds".into(),
            value: usage.window_seconds.to_string(),
            reason,
        })?;
    check_rate_edges(book, window)?;
    let starts = window_starts(usage, window)?;

    let (from, to) = match period {
        Some((from, to)) => {
            check_period(from, to, window)?;
            (from, to)
        }
        None => match default_period(usage, &starts, window)? {
            Some(p) => p,
            None => return Ok(InvoiceDocument::new(Vec::new())),
        },
    };

    // Rates by (SKU index, meter).
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
    for (row, &ws) in usage.usage.iter().zip(&starts) {
        if ws < from || ws >= to {
            left_out.add(&row.tenant, ws);
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
                match candidates.iter().find(|r| r.valid_at(ws)) {
                    Some(r) => {
                        let slot = acc.lines.entry(r.index).or_insert(0);
                        *slot =
                            slot.checked_add(q)
                                .ok_or_else(|| RatingError::QuantityOverflow {
                                    tenant: row.tenant.clone(),
                                    sku: r.sku.clone(),
                                    meter: r.meter,
                                })?;
                    }
                    None => {
                        let sku = book.skus().get(s).map_or("", |k| k.id.as_str());
                        let reason = format!(
                            "no rate of sku `{sku}` for {} is in force in some of its windows",
                            row.meter
                        );
                        add_unpriced(acc, &row.device_key, row.meter, reason, q, &row.tenant)?;
                    }
                }
            }
            Pricing::Unpriced(reason) => {
                add_unpriced(acc, &row.device_key, row.meter, reason, q, &row.tenant)?;
            }
        }
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
    let mut invoices = Vec::with_capacity(tenants.len());
    for (tenant, acc) in tenants {
        // Loss and the report's warnings, then the usage the period leaves out.
        let mut warnings = common_warnings.clone();
        warnings.extend(left_out.warning(tenant, (from, to)));
        let mut inv = build_invoice(
            usage,
            book,
            tenant,
            acc,
            (from, to),
            &warnings,
            &usage_sha256,
        )?;
        inv.seal()?;
        invoices.push(inv);
    }
    Ok(InvoiceDocument::new(invoices))
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
            reason: format!("rating v0 rates metering policy \"{METERING_POLICY}\" only"),
        });
    }
    Ok(())
}

fn check_rate_edges(book: &PriceBook, window: WindowSize) -> Result<(), RatingError> {
    for r in book.rates() {
        for (field, edge) in [("valid_from", r.valid_from), ("valid_to", r.valid_to)] {
            if let Some(t) = edge {
                if t % window.ns() != 0 {
                    return Err(RatingError::EdgeNotOnWindow {
                        book: book.name().to_string(),
                        rate: r.index,
                        field: field.into(),
                        value: rfc3339(t),
                        window_seconds: window.seconds(),
                    });
                }
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
fn report_warnings(usage: &UsageReport) -> Vec<String> {
    let mut out = Vec::new();
    if !usage.loss.is_empty() {
        let total: u128 = usage.loss.iter().map(|l| u128::from(l.records)).sum();
        let parts: Vec<String> = usage
            .loss
            .iter()
            .map(|l| format!("{} {} on {}", l.records, l.reason, l.device_key))
            .collect();
        out.push(format!(
            "usage has loss: {total} records lost ({}); lost records count in no meter, so this \
             invoice may bill less than was used",
            parts.join(", ")
        ));
    }
    out.extend(usage.warnings.iter().map(|w| format!("usage report: {w}")));
    out
}

fn build_invoice(
    usage: &UsageReport,
    book: &PriceBook,
    tenant: &str,
    acc: TenantUsage<'_>,
    (from, to): (u64, u64),
    common_warnings: &[String],
    usage_sha256: &str,
) -> Result<Invoice, RatingError> {
    let currency = book.currency();
    let overflow = |what: String, minor: &BigUint| RatingError::AmountOverflow {
        tenant: tenant.to_string(),
        what,
        minor_units: minor.to_string(),
        currency: currency.code().to_string(),
    };

    let mut usage_lines: Vec<(&Rate, u128)> = acc
        .lines
        .iter()
        .filter_map(|(&i, &q)| book.rates().get(i).map(|r| (r, q)))
        .collect();
    usage_lines.sort_by(|(a, _), (b, _)| {
        (&a.sku, a.meter, a.valid_from, a.index).cmp(&(&b.sku, b.meter, b.valid_from, b.index))
    });

    let mut lines = Vec::with_capacity(usage_lines.len() + 1);
    let mut usage_sum = BigUint::zero();
    for (r, q) in usage_lines {
        let what = format!("sku {} {}", r.sku, r.meter);
        let minor = line_amount_minor_units(q, r.unit_price, &r.unit, &currency, book.rounding())
            .ok_or_else(|| overflow(what.clone(), &BigUint::zero()))?;
        let amount =
            minor_units_to_decimal(&minor, &currency).ok_or_else(|| overflow(what, &minor))?;
        usage_sum += &minor;
        lines.push(Line {
            kind: LineKind::Usage,
            sku: Some(r.sku.clone()),
            meter: Some(r.meter),
            band: None,
            tier: None,
            quantity: Some(Quantity(q)),
            unit: Some(r.meter.canonical_unit().to_string()),
            pricing_unit: Some(r.unit.name().to_string()),
            quantity_in_pricing_unit: Some(quantity_in_unit(q, &r.unit, PRICING_UNIT_DECIMALS)),
            billable_quantity: Some(Quantity(q)),
            fragment_carried: Some(Quantity(0)),
            unit_price: Some(r.unit_price),
            amount,
        });
    }

    // The minimum tops up priced usage only: an invoice without a usage line (all of its
    // usage unpriced, or of meters the book does not rate) has nothing to top up, and says so.
    // `idle` (the energy of windows no tenant used) is gpumeter's own tenant, not a customer:
    // it is never topped up either, and says so.
    let idle = tenant == IDLE;
    let mut subtotal_minor = usage_sum.clone();
    let mut minimum_waived = None;
    if let Some(min_minor) = book.invoice_minimum_minor_units() {
        let min_minor = BigUint::from(min_minor);
        if lines.is_empty() || idle {
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

    let mut warnings = common_warnings.to_vec();
    let mut unpriced = Vec::with_capacity(acc.unpriced.len());
    let mut warned: BTreeSet<(&str, &str)> = BTreeSet::new();
    for ((device_key, meter, reason), q) in &acc.unpriced {
        let entry = usage.device(device_key);
        let name = entry.and_then(|d| d.name.clone());
        let device = entry.map_or(0, |d| d.device);
        if warned.insert((device_key, reason.as_str())) {
            warnings.push(format!(
                "usage on device {device_key} ({}) is not priced: {reason}; it is listed under \
                 `unpriced` and not billed",
                name.as_deref().unwrap_or("no name")
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
    match minimum_waived {
        Some(minimum) if idle => warnings.push(format!(
            "the invoice minimum of {minimum} {} does not apply: `{IDLE}` is the energy of \
             windows no tenant used, gpumeter's own tenant, not a customer",
            currency.code()
        )),
        Some(minimum) => {
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
            warnings.push(w);
        }
        None => {}
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
        usage_sha256: usage_sha256.to_string(),
        ledger_head: None,
        sha256: String::new(),
    })
}
