//! The bank's operations: grants, reservations, expiry, balances, finalization
//! (preview = finalize, rolled back) and contract close, each one ledger transaction.
//!
//! One module per operation; what several of them share (the bank's currency, fragment
//! balances, digests, times) is here.

mod asof;
mod balance;
mod close;
mod expire;
mod fees;
mod finalize;
mod grant;
mod period;
mod refusal;
mod reserve;
mod settle;
mod sources;

pub use balance::{balance, Balance, CreditBalance, FragmentBalance};
pub use close::{close, Closed, ClosedLine};
pub use expire::expire;
pub use finalize::{
    finalization_key, finalize, finalize_with, FinalizeOptions, Finalized, Outcome,
};
pub use grant::{check_grant, grant, GrantRequest};
pub use refusal::FinalizeRefusal;
pub use reserve::{check_reservation, reserve, ReserveRequest};

use std::collections::{BTreeMap, BTreeSet};

use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::{MeterKind, Quantity, UsageReport, UsageRow, Warning, WarningCode};
use gpumeter_rating::money::{amount_minor_units, minor_units_to_decimal};
use gpumeter_rating::{
    rate, unpriced_change, CarriedFragments, CreditApplied, FragmentKey, Invoice, InvoiceDocument,
    InvoiceKind, Line, LineKind, PeriodLines, PriceBook, PricingUnit,
};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::accounts;
use crate::grants::{grants, reservations, Grant, GrantBalance, GrantKind, Reservation};
use crate::ledger::{
    Appended, BankError, Ledger, LedgerTx, NewTransaction, Posting, StoredTransaction, CREDITS,
};
use asof::{check_fragments, fragment_booking};
use fees::{
    all_reservations, conversions_and_takebacks, reservation_lines, reservation_periods,
    BilledReservation, Converted, Measured,
};
use period::{
    cumulative_report, finalizations, place, stored_invoice, Earlier, Place, StoredUsage,
};
use settle::{credits_and_totals, signed_minor, Settled};
use sources::{billed_sources, claims_of, lock_sources, BilledSources};

pub(crate) fn sha(v: &serde_json::Value) -> Result<String, BankError> {
    let bytes = gpumeter_core::canonical_json(v).map_err(|e| BankError::Refused(e.to_string()))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

pub(crate) fn refused(msg: impl Into<String>) -> BankError {
    BankError::Refused(msg.into())
}

/// Refuses [`gpumeter_core::IDLE`] as the tenant of a grant, reservation or close: `idle` is
/// a report tenant, never invoiced.
pub(crate) fn never_idle(tenant: &str) -> Result<(), BankError> {
    if tenant == gpumeter_core::IDLE {
        return Err(refused(format!(
            "tenant `{tenant}`: gpumeter's report tenant (what the GPU measured while no \
             tenant's kernel ran) is never invoiced: it has no credits, reservations or fragments"
        )));
    }
    Ok(())
}

/// Refuses an invoice (or close) of `tenant` worth more than [`crate::grants::MAX_AMOUNT`]
/// or carrying out a fragment above [`crate::grants::MAX_FRAGMENT`]: one request may not take
/// the headroom of `provider:revenue` or `provider:fragments` from every other (issue 30
/// item 10).
pub(crate) fn bounded(tenant: &str, subtotal: Decimal, inv: &Invoice) -> Result<(), BankError> {
    crate::grants::within(
        &format!("tenant `{tenant}`: the invoice's subtotal"),
        subtotal,
        crate::grants::MAX_AMOUNT,
        "one request may be worth",
    )?;
    for f in &inv.extensions.fragments_out {
        if f.quantity.0 > crate::grants::MAX_FRAGMENT {
            return Err(refused(format!(
                "tenant `{tenant}`: a fragment of {} {} of {} on sku `{}` to carry out: more than \
                 {}, the most one finalization may carry (docs/BANK.md, \"Bounds\")",
                f.quantity,
                f.meter.canonical_unit(),
                f.meter,
                f.sku,
                crate::grants::MAX_FRAGMENT
            )));
        }
    }
    Ok(())
}

pub(crate) fn parse_time(s: &str) -> Result<u64, BankError> {
    parse_rfc3339(s).map_err(|e| refused(format!("{s}: {e}")))
}

/// A fragment balance as a whole, non-negative number of canonical units.
pub(crate) fn whole(account: &str, amount: Decimal) -> Result<u128, BankError> {
    let n = amount.normalize();
    if n.scale() != 0 || n.is_sign_negative() {
        return Err(refused(format!(
            "{account}: a fragment balance of {amount} is not a whole, non-negative quantity"
        )));
    }
    u128::try_from(n.mantissa()).map_err(|_| refused(format!("{account}: {amount} is negative")))
}

/// A tenant's fragment balances by (SKU, meter), canonical units.
pub(crate) fn fragment_balances(
    t: &dyn LedgerTx,
    tenant: &str,
) -> Result<BTreeMap<(String, MeterKind), u128>, BankError> {
    let mut out = BTreeMap::new();
    for (account, _, amount) in t.balances(&accounts::tenant_prefix(tenant))? {
        if let Some(key) = accounts::parse_fragments(tenant, &account) {
            out.insert(key, whole(&account, amount)?);
        }
    }
    Ok(out)
}

/// One bank bills in one currency: its grants' rates and reservations' fees are in it. The
/// first finalization or close fixes it; a book of another currency is refused.
///
/// A bank without a currency yet is held whole ([`LedgerTx::lock_all`]) before it is looked at
/// again, so two first finalizations in different currencies cannot both fix it.
pub(crate) fn check_currency(t: &mut dyn LedgerTx, book: &PriceBook) -> Result<(), BankError> {
    if bank_currency(t)?.is_none() {
        t.lock_all()?;
    }
    let code = book.currency().code();
    match bank_currency(t)? {
        Some((used, seq)) if used != code => Err(refused(format!(
            "{}: the price book bills in {code}, but this bank bills in {used} (fixed by \
             transaction {seq}): grants and reservations are valued in the bank's currency",
            book.name()
        ))),
        _ => Ok(()),
    }
}

/// The bank's currency and the transaction that fixed it (the first finalization or close),
/// `None` for a bank that has billed nothing yet.
///
/// # Errors
/// [`BankError::Storage`].
pub fn bank_currency(t: &dyn LedgerTx) -> Result<Option<(String, u64)>, BankError> {
    // The first finalization and the first close, in ledger order: the earlier one fixed the
    // currency. Read alone, not with the whole ledger (every finalization asks).
    let mut first: Vec<StoredTransaction> = [
        t.first_transaction("finalize")?,
        t.first_transaction("close")?,
    ]
    .into_iter()
    .flatten()
    .collect();
    first.sort_by_key(|tx| tx.seq);
    if first.is_empty() {
        return Ok(None);
    }
    // The currency a finalization's invoice or a close names.
    let currency = |tx: &StoredTransaction| {
        let used = match tx.tx.kind.as_str() {
            "finalize" => tx.tx.memo["invoice"]["currency"].as_str(),
            "close" => tx.tx.memo["currency"].as_str(),
            _ => None,
        };
        used.map(|c| (c.to_string(), tx.seq))
    };
    if let Some(found) = first.first().and_then(currency) {
        return Ok(Some(found));
    }
    // The earliest finalization or close names no currency (a damaged memo): the first in the
    // ledger that names one, as before.
    Ok(t.transactions(None)?.iter().find_map(currency))
}

/// `quantity` canonical units as credits: the quantity in `unit`, to 9 decimals, rounded down.
pub(crate) fn credits_of(quantity: u128, unit: &PricingUnit) -> Result<Decimal, BankError> {
    let scaled = quantity
        .checked_mul(10u128.pow(crate::grants::CREDIT_DECIMALS))
        .map(|n| n / unit.factor_num())
        .and_then(|n| i128::try_from(n).ok())
        .ok_or_else(|| refused("a capacity exceeds a decimal"))?;
    Ok(
        Decimal::try_from_i128_with_scale(scaled, crate::grants::CREDIT_DECIMALS)
            .map_err(|_| refused("a capacity exceeds a decimal"))?
            .normalize(),
    )
}

pub(crate) fn to_i128(q: u128) -> Result<i128, BankError> {
    i128::try_from(q).map_err(|_| refused("a fragment exceeds 2^127 canonical units"))
}
