//! A tenant's invoice rated for a finalization, before the bank's lines and credits: as the
//! period's first invoice (with the carried-in fragments), or as a supplement of the invoices
//! finalized for the period before (the cumulative usage less what they billed).

use super::*;
use crate::bank::close::{paid_packages, PaidPackages};
use gpumeter_rating::Fragment;

/// A tenant's invoice rated for this finalization, before the bank's lines and credits.
pub(super) struct Rated {
    /// The invoice: a first invoice as rating made it, or a supplement's changes.
    pub(super) invoice: Invoice,
    /// The fragments this finalization draws (−) and deposits (+), per (SKU, meter).
    pub(super) fragments: BTreeMap<(String, MeterKind), i128>,
    pub(super) measured: Measured,
    /// The last package span of the period's cumulative rating, per (SKU, meter) (what a
    /// close reads of the packages paid for).
    pub(super) paid: Vec<PaidPackages>,
}

/// An invoice of no lines for `plain`'s tenant and period.
fn no_lines(plain: &Invoice) -> Invoice {
    let mut i = plain.clone();
    i.lines.clear();
    i.unpriced.clear();
    i.extensions = Default::default();
    i
}

/// The tenant's first invoice of the period: its rows rated with the carried-in fragments,
/// the tenant's whole fragment balance (none without rows: they stay for the next period).
pub(super) fn rate_first(
    t: &dyn LedgerTx,
    call: &Call<'_>,
    plain: &Invoice,
    rows: &[&UsageRow],
) -> Result<Rated, BankError> {
    let tenant = plain.tenant.as_str();
    let period = (
        parse_time(&plain.period.from)?,
        parse_time(&plain.period.to)?,
    );
    let carried: CarriedFragments = if rows.is_empty() {
        CarriedFragments::new()
    } else {
        carried_balance(t, tenant)?
    };
    let invoice = if rows.is_empty() {
        no_lines(plain)
    } else {
        let mut mine = call.usage.clone();
        mine.usage = rows.iter().map(|r| (*r).clone()).collect();
        rate(&mine, call.book, Some(period), &carried)?
            .invoices
            .into_iter()
            .find(|i| i.tenant == tenant)
            .unwrap_or_else(|| no_lines(plain))
    };
    let mut fragments: BTreeMap<(String, MeterKind), i128> = BTreeMap::new();
    for (k, q) in &carried {
        *fragments.entry((k.sku.clone(), k.meter)).or_insert(0) -= to_i128(*q)?;
    }
    for f in &invoice.extensions.fragments_out {
        *fragments.entry((f.sku.clone(), f.meter)).or_insert(0) += to_i128(f.quantity.0)?;
    }
    let measured = Measured {
        before: BTreeMap::new(),
        now: measured_in(
            &PeriodLines::of(&invoice)?,
            &invoice.extensions.fragments_in,
        ),
    };
    let paid = paid_packages(&invoice);
    Ok(Rated {
        invoice,
        fragments,
        measured,
        paid,
    })
}

/// The tenant's whole fragment balance, as the fragments a first invoice carries in.
fn carried_balance(t: &dyn LedgerTx, tenant: &str) -> Result<CarriedFragments, BankError> {
    Ok(fragment_balances(t, tenant)?
        .into_iter()
        .map(|((sku, meter), q)| {
            (
                FragmentKey {
                    tenant: tenant.to_string(),
                    sku,
                    meter,
                },
                q,
            )
        })
        .collect())
}

/// A supplement of the period finalized as `earlier` (its finalizations, the first one first):
/// the period's cumulative usage rated with the first invoice's book and the period's
/// carried-in fragments, less what `earlier` billed.
///
/// The period draws the tenant's fragment pool once, as its first finalization with rows (a
/// first invoice with rows, or the first supplement with rows after fee-only invoices): the
/// fragments that finalization's invoice carried in (`fragments_in`) are the period's. When
/// no earlier finalization of the period had rows, this supplement draws the tenant's whole
/// fragment balance as a first invoice would (none when the cumulative usage has no rows
/// either), and its invoice's `fragments_in` records it.
pub(super) fn rate_supplement(
    t: &dyn LedgerTx,
    call: &Call<'_>,
    plain: &Invoice,
    rows: &[&UsageRow],
    earlier: &[Earlier],
) -> Result<Rated, BankError> {
    let tenant = plain.tenant.as_str();
    let period = (
        parse_time(&plain.period.from)?,
        parse_time(&plain.period.to)?,
    );
    let Some(first) = earlier.first() else {
        return Err(refused("a supplement of no invoice"));
    };
    if first.invoice.price_book.sha256 != call.book.sha256() {
        return Err(FinalizeRefusal::OtherBook {
            tenant: tenant.to_string(),
            from: plain.period.from.clone(),
            to: plain.period.to.clone(),
            first_version: first.invoice.price_book.version.clone(),
            first_sha256: first.invoice.price_book.sha256.clone(),
            version: call.book.version().to_string(),
            sha256: call.book.sha256().to_string(),
        }
        .into());
    }
    let merged = cumulative_report(call.usage, tenant, period, rows, earlier)?;
    // The finalization that drew the period's carried-in fragments: the first with rows.
    let drew = earlier
        .iter()
        .find(|e| e.usage.as_ref().is_some_and(|u| !u.rows.is_empty()));
    let draws = drew.is_none() && !merged.usage.is_empty();
    let carried: CarriedFragments = match drew {
        Some(e) => e
            .invoice
            .extensions
            .fragments_in
            .iter()
            .map(|f| {
                (
                    FragmentKey {
                        tenant: tenant.to_string(),
                        sku: f.sku.clone(),
                        meter: f.meter,
                    },
                    f.quantity.0,
                )
            })
            .collect(),
        None if draws => carried_balance(t, tenant)?,
        None => CarriedFragments::new(),
    };
    let cumulative = rate(&merged, call.book, Some(period), &carried)?
        .invoices
        .into_iter()
        .find(|i| i.tenant == tenant)
        .unwrap_or_else(|| no_lines(plain));
    let mut before = PeriodLines::new();
    for e in earlier {
        before.add(&e.invoice)?;
    }
    let invoices: Vec<&Invoice> = earlier.iter().map(|e| &e.invoice).collect();
    let mut invoice = Invoice {
        lines: before.supplement_lines(&cumulative)?,
        unpriced: unpriced_change(&invoices, &cumulative),
        warnings: cumulative.warnings.clone(),
        usage_sha256: plain.usage_sha256.clone(),
        extensions: Default::default(),
        ..cumulative.clone()
    };
    invoice.extensions.fragments_out = cumulative.extensions.fragments_out.clone();
    if draws {
        invoice.extensions.fragments_in = cumulative.extensions.fragments_in.clone();
    }
    invoice.extensions.supplement_of = Some(first.reference(false));
    invoice.extensions.earlier = earlier.iter().map(|e| e.reference(true)).collect();

    let fragments = supplement_fragments(draws.then_some(&carried), earlier, &cumulative)?;
    let measured = Measured {
        before: measured_in(
            &before,
            drew.map_or(&[][..], |e| &e.invoice.extensions.fragments_in),
        ),
        now: measured_in(
            &PeriodLines::of(&cumulative)?,
            &cumulative.extensions.fragments_in,
        ),
    };
    let paid = paid_packages(&cumulative);
    Ok(Rated {
        invoice,
        fragments,
        measured,
        paid,
    })
}

/// The fragments a supplement draws (−) and deposits (+), per (SKU, meter): they move by the
/// change of the period's fragment out (the last invoice's, `earlier`'s last, is what the
/// period carried out so far; `cumulative`'s is what it carries out now), and, when this
/// supplement draws the period's carried-in fragments (`drawn`), by those.
fn supplement_fragments(
    drawn: Option<&CarriedFragments>,
    earlier: &[Earlier],
    cumulative: &Invoice,
) -> Result<BTreeMap<(String, MeterKind), i128>, BankError> {
    let mut fragments: BTreeMap<(String, MeterKind), i128> = BTreeMap::new();
    if let Some(carried) = drawn {
        for (k, q) in carried {
            *fragments.entry((k.sku.clone(), k.meter)).or_insert(0) -= to_i128(*q)?;
        }
    }
    if let Some(last) = earlier.last() {
        for f in &last.invoice.extensions.fragments_out {
            *fragments.entry((f.sku.clone(), f.meter)).or_insert(0) -= to_i128(f.quantity.0)?;
        }
    }
    for f in &cumulative.extensions.fragments_out {
        *fragments.entry((f.sku.clone(), f.meter)).or_insert(0) += to_i128(f.quantity.0)?;
    }
    Ok(fragments)
}

/// The usage measured per (SKU, meter) in `lines`: their usage quantities less the fragments
/// carried into the period (`carried_in`, measured in an earlier period).
fn measured_in(
    lines: &PeriodLines,
    carried_in: &[Fragment],
) -> BTreeMap<(String, MeterKind), u128> {
    let mut out: BTreeMap<(String, MeterKind), u128> = BTreeMap::new();
    for (k, totals) in lines.totals() {
        let (Some(sku), Some(meter)) = (k.sku.as_ref(), k.meter) else {
            continue;
        };
        if k.kind != "usage" {
            continue;
        }
        let q = u128::try_from(totals.quantity.clone()).unwrap_or(0);
        let slot = out.entry((sku.clone(), meter)).or_insert(0);
        *slot = slot.saturating_add(q);
    }
    for f in carried_in {
        if let Some(slot) = out.get_mut(&(f.sku.clone(), f.meter)) {
            *slot = slot.saturating_sub(f.quantity.0);
        }
    }
    out
}
