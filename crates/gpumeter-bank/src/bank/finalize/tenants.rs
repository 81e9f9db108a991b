//! Which tenants a finalization bills: those with usage in the report, and those owing a
//! reservation's fee for the period without usage in it.

use super::*;

/// The rows of `inv`'s tenant in its period.
pub(super) fn rows_of<'u>(usage: &'u UsageReport, inv: &Invoice) -> Vec<&'u UsageRow> {
    let (Ok(from), Ok(to)) = (parse_time(&inv.period.from), parse_time(&inv.period.to)) else {
        return vec![];
    };
    usage
        .usage
        .iter()
        .filter(|r| {
            r.tenant == inv.tenant
                && parse_rfc3339(&r.window_start).is_ok_and(|w| from <= w && w < to)
        })
        .collect()
}

/// The tenants this finalization bills ([`tenants_to_bill`]), each held
/// ([`LedgerTx::lock_tenants`]). Which they are depends on the reservations in the ledger:
/// find them, hold them, then find them again under the locks, until every tenant found was
/// found while it was held (a tenant added in between was found before its lock: another
/// finalizer may have billed it meanwhile). A deadlock the later locks may cause is retried
/// by the ledger.
pub(super) fn hold_tenants(
    t: &mut dyn LedgerTx,
    usage: &UsageReport,
    book: &PriceBook,
    plain: &InvoiceDocument,
    period: Option<(u64, u64)>,
) -> Result<Vec<Invoice>, BankError> {
    let mut held: Option<BTreeSet<String>> = None;
    loop {
        let found = tenants_to_bill(t, usage, book, plain, period)?;
        let names: Vec<&str> = found.iter().map(|i| i.tenant.as_str()).collect();
        if let Some(held) = &held {
            if names.iter().all(|n| held.contains(*n)) {
                return Ok(found);
            }
        }
        t.lock_tenants(&names)?;
        held.get_or_insert_with(BTreeSet::new)
            .extend(names.iter().map(|n| (*n).to_string()));
    }
}

/// The invoices a finalization starts from, by tenant: the tenants with usage in the
/// report, and those owing a reservation's fee for the period without usage in it.
fn tenants_to_bill(
    t: &dyn LedgerTx,
    usage: &UsageReport,
    book: &PriceBook,
    plain: &InvoiceDocument,
    period: Option<(u64, u64)>,
) -> Result<Vec<Invoice>, BankError> {
    let mut tenants: Vec<Invoice> = plain.invoices.clone();
    // Tenants with a reservation whose span holds the period owe its fee even without
    // usage in this report (the period must be known: given, or the report's), unless the
    // fee of that period was billed already.
    let known = match (plain.invoices.first(), period) {
        (Some(first), _) => Some((
            first.clone(),
            parse_time(&first.period.from)?,
            parse_time(&first.period.to)?,
        )),
        (None, Some((from, to))) => Some((empty_invoice(usage, book, (from, to))?, from, to)),
        (None, None) => None,
    };
    if let Some((template, from, to)) = known {
        for r in all_reservations(t)? {
            let holds = parse_time(&r.from)? <= from && to <= parse_time(&r.to)?;
            let billed = reservation_periods(t, &r.tenant, &r.reservation)?
                .into_iter()
                .any(|b| b.from < to && from < b.to);
            // A rerun returns the fee-only invoice finalized then.
            let done = t
                .find(&format!(
                    "finalize:{}",
                    finalization_key(
                        &r.tenant,
                        (&template.period.from, &template.period.to),
                        &template.usage_sha256,
                        &template.price_book.sha256,
                    )?
                ))?
                .is_some();
            let billed = billed && !done;
            // A tenant whose own finalized periods overlap this one without being equal (its
            // periods run mid-month, say) cannot take a fee-only invoice for it: another
            // tenant's report must not be refused for that. Its fee is billed with its own
            // periods (those inside the reservation's span).
            let fits = || -> Result<bool, BankError> {
                Ok(place(&r.tenant, (from, to), finalizations(t, &r.tenant)?).is_ok())
            };
            if holds && !billed && !tenants.iter().any(|i| i.tenant == r.tenant) && fits()? {
                let mut empty = template.clone();
                empty.tenant = r.tenant.clone();
                empty.lines.clear();
                empty.unpriced.clear();
                empty.warnings.clear();
                empty.extensions = Default::default();
                tenants.push(empty);
            }
        }
        tenants.sort_by(|a, b| a.tenant.cmp(&b.tenant));
    }
    Ok(tenants)
}

/// An invoice of no lines for `period`: the template of a tenant billed only a reservation
/// fee when the report has no usage in the period.
fn empty_invoice(
    usage: &UsageReport,
    book: &PriceBook,
    (from, to): (u64, u64),
) -> Result<Invoice, BankError> {
    let currency = book.currency();
    let zero = Decimal::new(0, currency.scale());
    let usage_sha256 = if usage.sha256.is_empty() {
        let v = serde_json::to_value(usage).map_err(|e| refused(e.to_string()))?;
        gpumeter_core::document_sha256(&v, "sha256").map_err(|e| refused(e.to_string()))?
    } else {
        usage.sha256.clone()
    };
    Ok(Invoice {
        tenant: String::new(),
        currency: currency.code().to_string(),
        period: gpumeter_rating::Period {
            from: rfc3339(from),
            to: rfc3339(to),
        },
        price_book: gpumeter_rating::PriceBookRef {
            version: book.version().to_string(),
            sha256: book.sha256().to_string(),
        },
        lines: vec![],
        unpriced: vec![],
        subtotal: zero,
        credits_applied: vec![],
        total: zero,
        warnings: vec![],
        usage_sha256,
        ledger_head: None,
        sha256: String::new(),
        extensions: Default::default(),
    })
}
