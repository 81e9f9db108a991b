//! One tenant's invoice from its series' lines: fragments, the invoice minimum, unpriced
//! usage and the warnings every invoice carries; and the document's `idle` usage.

use std::collections::{BTreeMap, BTreeSet};

use gpumeter_core::time::rfc3339;
use gpumeter_core::{MeterKind, Quantity, UsageReport, Warning, WarningCode, IDLE};
use num_bigint::BigUint;
use num_traits::Zero;
use rust_decimal::Decimal;

use crate::book::PriceBook;
use crate::currency::Currency;
use crate::error::RatingError;
use crate::invoice::{
    Fragment, IdleRow, IdleUsage, Invoice, InvoiceExtensions, Line, Period, PriceBookRef, Unpriced,
};
use crate::money::minor_units_to_decimal;

use super::series::rate_series;
use super::{Context, TenantUsage};

/// One tenant's invoice for the period, unsealed: its series' lines, the invoice minimum,
/// unpriced usage, and `common_warnings` followed by its own.
pub(super) fn build_invoice(
    ctx: &mut Context<'_>,
    tenant: &str,
    acc: TenantUsage<'_>,
    common_warnings: &[Warning],
) -> Result<Invoice, RatingError> {
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
    let (mut lines, usage_sum, extensions) = usage_lines(ctx, tenant, &acc, &mut warnings)?;
    let (subtotal_minor, minimum_waived) = apply_minimum(book, &mut lines, &usage_sum, overflow)?;
    let subtotal = minor_units_to_decimal(&subtotal_minor, &currency)
        .ok_or_else(|| overflow("subtotal".into(), &subtotal_minor))?;

    let unpriced = unpriced_usage(ctx.usage, &acc, &mut warnings);
    if let Some(minimum) = minimum_waived {
        warnings.push(minimum_waived_warning(
            minimum,
            currency,
            !unpriced.is_empty(),
            &acc,
        ));
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

/// The lines of the tenant's series in (SKU id, meter) order, the sum of their amounts in
/// minor units, and the fragments carried in and out (the invoice's `extensions`).
fn usage_lines(
    ctx: &mut Context<'_>,
    tenant: &str,
    acc: &TenantUsage<'_>,
    warnings: &mut Vec<Warning>,
) -> Result<(Vec<Line>, BigUint, InvoiceExtensions), RatingError> {
    let book = ctx.book;
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
        let series = rate_series(ctx, tenant, key, windows, fragment_in, warnings)?;
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
    Ok((lines, usage_sum, extensions))
}

/// Applies the book's invoice minimum to the usage lines summing `usage_sum` minor units: a
/// `minimum` line tops them up; with no usage line it does not apply. Returns the subtotal in
/// minor units and, when the minimum does not apply, its amount (for the warning).
fn apply_minimum(
    book: &PriceBook,
    lines: &mut Vec<Line>,
    usage_sum: &BigUint,
    overflow: impl Fn(String, &BigUint) -> RatingError,
) -> Result<(BigUint, Option<Decimal>), RatingError> {
    let currency = book.currency();
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
        } else if *usage_sum < min_minor {
            let top_up = &min_minor - usage_sum;
            let amount = minor_units_to_decimal(&top_up, &currency)
                .ok_or_else(|| overflow("minimum".into(), &top_up))?;
            lines.push(Line::minimum(amount));
            subtotal_minor = min_minor;
        }
    }
    Ok((subtotal_minor, minimum_waived))
}

/// The invoice's `unpriced` block, with one warning per (device, reason).
fn unpriced_usage(
    usage: &UsageReport,
    acc: &TenantUsage<'_>,
    warnings: &mut Vec<Warning>,
) -> Vec<Unpriced> {
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
    unpriced
}

/// The warning of an invoice whose minimum does not apply (no priced usage), saying why.
fn minimum_waived_warning(
    minimum: Decimal,
    currency: Currency,
    has_unpriced: bool,
    acc: &TenantUsage<'_>,
) -> Warning {
    let mut why = Vec::new();
    if has_unpriced {
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
    Warning::new(WarningCode::MinimumNotApplied, w)
}

/// Warnings every invoice from this report carries: loss, then the report's own warnings.
pub(super) fn report_warnings(usage: &UsageReport) -> Vec<Warning> {
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

/// `extensions.idle` of the document: `idle`'s quantities in the period per (device key,
/// meter), with the warning that says why they are on no invoice; `None` without any.
pub(super) fn idle_usage(
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
