//! Gathering the report's rows into each tenant's usage: the device's SKU, the rates in force,
//! unpriced usage, `idle` listed apart, rows outside the period counted, carried-in fragments.

use std::collections::{BTreeMap, HashMap};

use gpumeter_core::time::rfc3339;
use gpumeter_core::{MeterKind, UsageReport, Warning, WarningCode, WindowSize, IDLE};

use crate::book::{PriceBook, Rate};
use crate::error::RatingError;
use crate::invoice::CarriedFragments;

use super::checks::check_rate_edges;
use super::TenantUsage;

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
pub(super) struct LeftOut<'a> {
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
    pub(super) fn warning(&self, tenant: &str, (from, to): (u64, u64)) -> Option<Warning> {
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

/// What the report's rows in the period come to: each tenant's usage, the rows the period
/// leaves out, and `idle`'s usage (listed apart).
pub(super) struct Gathered<'a> {
    pub(super) tenants: BTreeMap<&'a str, TenantUsage<'a>>,
    pub(super) left_out: LeftOut<'a>,
    pub(super) idle: BTreeMap<(&'a str, MeterKind), u128>,
}

/// Sums the report's rows in `[from, to)` per tenant into series of (SKU, meter) and window
/// (rows whose SKU has a rate in force), unpriced usage and unrated meters; `idle`'s rows per
/// (device key, meter); rows outside the period counted as left out.
pub(super) fn gather<'a>(
    usage: &'a UsageReport,
    book: &PriceBook,
    starts: &[u64],
    (from, to): (u64, u64),
    window: WindowSize,
    rates_of: &HashMap<(usize, MeterKind), Vec<&Rate>>,
) -> Result<Gathered<'a>, RatingError> {
    let mut pricing: HashMap<&str, Pricing> = HashMap::new();
    let mut tenants: BTreeMap<&str, TenantUsage<'_>> = BTreeMap::new();
    let mut left_out = LeftOut::default();
    // `idle` is a report tenant, never invoiced (docs/BANK.md): its usage in the period is
    // summed per (device key, meter) and listed apart.
    let mut idle: BTreeMap<(&str, MeterKind), u128> = BTreeMap::new();
    for (row, &ws) in usage.usage.iter().zip(starts) {
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
    Ok(Gathered {
        tenants,
        left_out,
        idle,
    })
}

/// Adds the carried-in fragments (but `idle`'s) to their tenants' series, each as the
/// fragment of its (SKU, meter).
pub(super) fn add_carried_in<'a>(
    tenants: &mut BTreeMap<&'a str, TenantUsage<'a>>,
    carried_in: &'a CarriedFragments,
    sku_index: &HashMap<&str, usize>,
) -> Result<(), RatingError> {
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
    Ok(())
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
