//! Contract close: the remaining fragments billed (`gpumeter bank close`).

use super::*;

/// What `close` billed: one line per fragment, and the transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Closed {
    /// The tenant.
    pub tenant: String,
    /// The currency.
    pub currency: String,
    /// `(sku, meter, quantity, unit_price, amount)` per fragment billed.
    pub lines: Vec<ClosedLine>,
    /// Σ amounts.
    pub total: Decimal,
}

/// One fragment billed at contract close.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosedLine {
    /// The SKU.
    pub sku: String,
    /// The meter.
    pub meter: MeterKind,
    /// Canonical units billed (the whole fragment).
    pub quantity: Quantity,
    /// The last unit price of the SKU and meter (the rate with the latest validity).
    pub unit_price: Decimal,
    /// The pricing unit.
    pub pricing_unit: String,
    /// round(quantity × unit_price ÷ unit), once.
    pub amount: Decimal,
}

/// Contract close: bills each of `tenant`'s remaining fragments at the last unit
/// price of its SKU and meter in `book` (the rate with the latest `valid_from`; its
/// `unit_price`), rounded once per fragment, and empties them.
///
/// # Errors
/// [`BankError::Refused`] for a fragment whose SKU and meter the book has no rate for;
/// [`BankError::Storage`].
pub fn close<L: Ledger>(
    ledger: &mut L,
    tenant: &str,
    book: &PriceBook,
    at: u64,
) -> Result<Closed, BankError> {
    let currency = book.currency();
    ledger.atomically(true, |t| {
        // The currency first: a bank without one yet is held whole before the tenant is.
        check_currency(t, book)?;
        t.lock_tenants(&[tenant])?;
        let mut lines = Vec::new();
        let mut postings = Vec::new();
        let mut total = Decimal::ZERO;
        for ((sku, meter), q) in fragment_balances(t, tenant)? {
            if q == 0 {
                continue;
            }
            let last = book
                .rates()
                .iter()
                .filter(|r| r.sku == sku && r.meter == meter)
                .max_by_key(|r| (r.valid_from.unwrap_or(0), r.index))
                .ok_or_else(|| {
                    refused(format!(
                        "{}: no rate of sku `{sku}` for {meter} to bill the fragment with",
                        book.name()
                    ))
                })?;
            let m = amount_minor_units(
                q,
                last.unit_price,
                (last.unit.factor_num(), last.unit.factor_den()),
                &currency,
                book.rounding(),
            )
            .ok_or_else(|| refused("the fragment's amount cannot be computed"))?;
            let amount = minor_units_to_decimal(&m, &currency)
                .ok_or_else(|| refused("the fragment's amount exceeds a decimal"))?;
            let qd = Decimal::try_from_i128_with_scale(to_i128(q)?, 0)
                .map_err(|_| refused("a fragment exceeds a decimal"))?;
            postings.push(Posting::new(
                accounts::fragments(tenant, &sku, meter),
                meter.canonical_unit(),
                -qd,
            ));
            postings.push(Posting::new(
                accounts::FRAGMENTS,
                meter.canonical_unit(),
                qd,
            ));
            total = crate::ledger::exact_add(total, amount).ok_or_else(|| {
                refused(format!(
                    "closing `{tenant}`: the fragments' amounts sum past what a decimal holds"
                ))
            })?;
            lines.push(ClosedLine {
                sku,
                meter,
                quantity: Quantity(q),
                unit_price: last.unit_price,
                pricing_unit: last.unit.name().to_string(),
                amount,
            });
        }
        let closed = Closed {
            tenant: tenant.to_string(),
            currency: currency.code().to_string(),
            lines,
            total,
        };
        if !postings.is_empty() {
            postings.push(Posting::new(
                accounts::receivable(tenant),
                currency.code(),
                total,
            ));
            postings.push(Posting::new(accounts::REVENUE, currency.code(), -total));
            t.append(NewTransaction {
                key: format!("close:{tenant}:{}", t.head()?.unwrap_or_default()),
                kind: "close".into(),
                at: rfc3339(at),
                tenant: Some(tenant.to_string()),
                postings,
                memo: serde_json::to_value(&closed).map_err(|e| refused(e.to_string()))?,
            })?;
        }
        Ok(closed)
    })
}
