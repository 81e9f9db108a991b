//! Grants and reservations: their terms as the ledger records them, the burn
//! order, and the arithmetic of a burn.

use std::cmp::Ordering;

use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::MeterKind;
use num_bigint::BigUint;
use num_traits::{ToPrimitive, Zero};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::ledger::{BankError, LedgerTx, StoredTransaction, CREDITS};

/// Decimal places of credits the bank keeps: a burn of credits is rounded down to this many
/// (in the tenant's favour: the tenant keeps the fraction).
pub const CREDIT_DECIMALS: u32 = 9;

/// The most credits one grant (or one period's conversion of a reservation: its capacity in
/// its unit) may hold: 10^12. An account's balance of credits (9 decimals) holds up to about
/// 7.9 × 10^19 credits, so 79 million maximal grants fit in `provider:credit_sales`: no
/// single request can exhaust the headroom of the others (issue 30 item 10).
pub const MAX_CREDITS: Decimal = Decimal::from_parts(0xD4A5_1000, 0xE8, 0, false, 0);

/// The highest value of one credit, in the bank's currency (a grant's or a reservation's
/// `rate`): 10^6.
pub const MAX_CREDIT_RATE: Decimal = Decimal::from_parts(1_000_000, 0, 0, false, 0);

/// The most one request may be worth in the bank's currency: a grant's credits × rate, a
/// reservation's fee and its capacity × rate, an invoice's subtotal, a contract close: 10^15.
/// A balance in a currency of at most 4 decimals (ISO 4217's finest) holds about
/// 7.9 × 10^24, so 7.9 billion maximal requests fit in one provider account.
pub const MAX_AMOUNT: Decimal = Decimal::from_parts(0xA4C6_8000, 0x0003_8D7E, 0, false, 0);

/// The largest fragment one finalization may carry out, in canonical units: 10^21 (a
/// fragment is less than one billing increment; 10^21 ns is 31 700 years). A balance of a
/// canonical unit (no decimals) holds about 7.9 × 10^28, so 79 million maximal fragments
/// fit in `provider:fragments`.
pub const MAX_FRAGMENT: u128 = 1_000_000_000_000_000_000_000;

/// Refuses `value` (of `what`, for the message) above `most`.
///
/// # Errors
/// [`BankError::Refused`] naming `what`, the value and the bound.
pub fn within(what: &str, value: Decimal, most: Decimal, why: &str) -> Result<(), BankError> {
    if value > most {
        return Err(BankError::Refused(format!(
            "{what} {value}: more than {most}, the most {why} (one request may not take the \
             bank's headroom from the others: docs/BANK.md, \"Bounds\")"
        )));
    }
    Ok(())
}

/// Refuses a grant or reservation of `credits` at `rate` beyond the bounds: `credits` above
/// [`MAX_CREDITS`], `rate` above [`MAX_CREDIT_RATE`], `credits × rate` above [`MAX_AMOUNT`].
/// `what` names the credits (`--credits`, `--capacity`).
///
/// # Errors
/// [`BankError::Refused`] naming the bound.
pub fn check_bounds(what: &str, credits: Decimal, rate: Decimal) -> Result<(), BankError> {
    within(what, credits, MAX_CREDITS, "credits one request may hold")?;
    within("--rate", rate, MAX_CREDIT_RATE, "value of one credit")?;
    // `checked_mul` may round away digits past 28; the comparison with 10^15 does not
    // need them.
    let value = credits.checked_mul(rate);
    if value.is_none_or(|v| v > MAX_AMOUNT) {
        return Err(BankError::Refused(format!(
            "{what} {credits} at --rate {rate}: worth {}, more than {MAX_AMOUNT}, the most one \
             request may be worth (one request may not take the bank's headroom from the \
             others: docs/BANK.md, \"Bounds\")",
            value.map_or_else(
                || "more than a decimal holds".to_string(),
                |v| v.normalize().to_string()
            )
        )));
    }
    Ok(())
}

/// Where a grant's credits come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantKind {
    /// Bought by the tenant: credits come from `provider:credit_sales`.
    Purchased,
    /// Given by the provider: credits come from `provider:promotions`.
    Promotional,
    /// Converted from an unused, paid reservation: credits come from
    /// `provider:reservations`.
    Reservation,
}

impl GrantKind {
    /// The provider account the credits (and the currency they cover) come from.
    pub fn source_account(self) -> &'static str {
        match self {
            GrantKind::Purchased => crate::accounts::CREDIT_SALES,
            GrantKind::Promotional => crate::accounts::PROMOTIONS,
            GrantKind::Reservation => crate::accounts::RESERVATIONS,
        }
    }

    /// `purchased`, `promotional` or `reservation`.
    pub fn as_str(self) -> &'static str {
        match self {
            GrantKind::Purchased => "purchased",
            GrantKind::Promotional => "promotional",
            GrantKind::Reservation => "reservation",
        }
    }
}

/// The terms of a grant, as recorded in its `grant` transaction's memo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The grant's id (`g-` and 12 hex digits of its key's SHA-256).
    pub grant: String,
    /// The tenant.
    pub tenant: String,
    /// Credits granted (positive).
    pub credits: Decimal,
    /// Value of one credit in the invoice currency (positive).
    pub rate: Decimal,
    /// Lower burns first.
    pub priority: i64,
    /// Usable from, RFC 3339 UTC.
    pub effective: String,
    /// Usable until (exclusive), RFC 3339 UTC; `None`: never expires.
    pub expires: Option<String>,
    /// Where the credits come from.
    pub kind: GrantKind,
    /// SKU ids the credits may pay for; empty: every SKU.
    #[serde(default)]
    pub skus: Vec<String>,
    /// Meters the credits may pay for; empty: every meter.
    #[serde(default)]
    pub meters: Vec<MeterKind>,
    /// For credits converted from a reservation: its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
}

impl Grant {
    /// Whether the grant is usable at instant `t` (ns): `[effective, expires)`.
    pub fn in_force_at(&self, t: u64) -> bool {
        let from = parse_rfc3339(&self.effective).unwrap_or(u64::MAX);
        let to = self.expires.as_deref().and_then(|e| parse_rfc3339(e).ok());
        from <= t && to.is_none_or(|to| t < to)
    }

    /// Expiry in ns, `None` for never.
    pub fn expires_ns(&self) -> Option<u64> {
        self.expires.as_deref().and_then(|e| parse_rfc3339(e).ok())
    }

    /// Whether the grant may pay for a line of `sku` and `meter` (`None` for a line of no
    /// SKU or meter, such as the minimum, which only unscoped grants pay).
    pub fn covers(&self, sku: Option<&str>, meter: Option<MeterKind>) -> bool {
        let sku_ok = self.skus.is_empty() || sku.is_some_and(|s| self.skus.iter().any(|k| k == s));
        let meter_ok = self.meters.is_empty() || meter.is_some_and(|m| self.meters.contains(&m));
        sku_ok && meter_ok
    }
}

/// A grant with its place in the ledger and its remaining credits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantBalance {
    /// The terms.
    pub grant: Grant,
    /// Sequence number of its `grant` transaction (earliest grant burns first among equals).
    pub seq: u64,
    /// Credits left.
    pub remaining: Decimal,
}

/// Burn order: priority, then earliest expiry (never last), then earliest grant.
pub fn burn_order(a: &GrantBalance, b: &GrantBalance) -> Ordering {
    let exp = |g: &GrantBalance| g.grant.expires_ns().unwrap_or(u64::MAX);
    (a.grant.priority, exp(a), a.seq).cmp(&(b.grant.priority, exp(b), b.seq))
}

/// Every grant of `tenant` (all tenants when `None`) with its remaining credits, in burn
/// order.
///
/// # Errors
/// [`BankError::Storage`]; [`BankError::Corrupt`] for a grant transaction whose memo is not a
/// grant.
pub fn grants(tx: &dyn LedgerTx, tenant: Option<&str>) -> Result<Vec<GrantBalance>, BankError> {
    let mut out = Vec::new();
    let recorded = match tenant {
        // The tenant's grant transactions only (conversions of its reservations are its own
        // grants too); the memo's tenant is checked below as before.
        Some(name) => tx.tenant_transactions("grant", name)?,
        None => tx.transactions(Some("grant"))?,
    };
    for t in recorded {
        let g = grant_of(&t)?;
        if tenant.is_some_and(|x| x != g.tenant) {
            continue;
        }
        let remaining = tx.balance(&crate::accounts::credits(&g.tenant, &g.grant), CREDITS)?;
        out.push(GrantBalance {
            grant: g,
            seq: t.seq,
            remaining,
        });
    }
    out.sort_by(burn_order);
    Ok(out)
}

fn grant_of(t: &StoredTransaction) -> Result<Grant, BankError> {
    serde_json::from_value(t.tx.memo.clone()).map_err(|e| BankError::Corrupt {
        seq: t.seq,
        key: t.tx.key.clone(),
        reason: format!("the memo of a grant is not a grant: {e}"),
    })
}

/// The terms of a reservation, as recorded in its `reserve` transaction's memo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// The reservation's id (`r-` and 12 hex digits).
    pub reservation: String,
    /// The tenant.
    pub tenant: String,
    /// The SKU reserved.
    pub sku: String,
    /// The meter reserved.
    pub meter: MeterKind,
    /// Capacity per period, in `unit`.
    pub capacity: Decimal,
    /// The pricing unit of `capacity` (`SM·hour`).
    pub unit: String,
    /// Fee per period, in the invoice currency (a `reservation` line).
    pub fee: Decimal,
    /// Value of one credit converted from unused capacity, in the invoice currency.
    pub rate: Decimal,
    /// Start of the reservation, RFC 3339 UTC.
    pub from: String,
    /// End of the reservation (exclusive), RFC 3339 UTC.
    pub to: String,
    /// Expiry of the credits converted from it; `None`: never.
    pub credit_expiry: Option<String>,
}

/// Every reservation of `tenant`, in ledger order.
///
/// # Errors
/// [`BankError::Storage`]; [`BankError::Corrupt`] for a memo that is not a reservation.
pub fn reservations(tx: &dyn LedgerTx, tenant: &str) -> Result<Vec<Reservation>, BankError> {
    let mut out = Vec::new();
    for t in tx.transactions(Some("reserve"))? {
        let r: Reservation =
            serde_json::from_value(t.tx.memo.clone()).map_err(|e| BankError::Corrupt {
                seq: t.seq,
                key: t.tx.key.clone(),
                reason: format!("the memo of a reservation is not a reservation: {e}"),
            })?;
        if r.tenant == tenant {
            out.push(r);
        }
    }
    Ok(out)
}

fn pow10(e: u32) -> BigUint {
    num_traits::pow(BigUint::from(10u32), e as usize)
}

fn mantissa(d: Decimal) -> Option<BigUint> {
    u128::try_from(d.mantissa()).ok().map(BigUint::from)
}

/// What `credits` at `rate` are worth in whole minor units of a currency of `scale` decimals,
/// rounded down: `⌊credits × rate × 10^scale⌋`. `None` for negative inputs.
pub fn value_minor(credits: Decimal, rate: Decimal, scale: u32) -> Option<u128> {
    let num = mantissa(credits)? * mantissa(rate)? * pow10(scale);
    let den = pow10(credits.scale() + rate.scale());
    (num / den).to_u128()
}

/// The credits that pay `minor` minor units at `rate`, rounded down to [`CREDIT_DECIMALS`]
/// (in the tenant's favour): `⌊minor × 10^-scale ÷ rate⌋` to 9 decimals, never more than
/// `available`. `None` for a zero or negative rate.
pub fn credits_for(minor: u128, rate: Decimal, scale: u32, available: Decimal) -> Option<Decimal> {
    let r = mantissa(rate)?;
    if r.is_zero() {
        return None;
    }
    // credits × 10^9 = minor × 10^rate_scale × 10^9 / (rate_mantissa × 10^scale)
    let num = BigUint::from(minor) * pow10(rate.scale()) * pow10(CREDIT_DECIMALS);
    let den = r * pow10(scale);
    let c = (num / den).to_i128()?;
    let credits = Decimal::try_from_i128_with_scale(c, CREDIT_DECIMALS).ok()?;
    Some(credits.min(available).normalize())
}

/// What a grant with `remaining` credits at `rate` pays of a line with `due` minor units left
/// (a currency of `scale` decimals): `(credits burned, minor units covered)`.
///
/// The credits are those that pay the whole minor units the grant is worth, at most `due`,
/// rounded down to [`CREDIT_DECIMALS`] (the tenant keeps the fraction, [`credits_for`]); the
/// minor units covered are what those credits are worth, rounded *up* to a whole minor unit:
/// `⌈credits × rate × 10^scale⌉`. So the value the tenant is given beyond the credits it
/// burns is always less than one minor unit, whatever the rate (with a rate of 10^9 a credit
/// of 10^-9 is worth a whole currency unit: covering the line's `due` in full would give up to
/// 10^(scale) − 1 minor units away; issue 30 item 6). At rates up to 10^(9 − scale) this is
/// `min(due, worth)` exactly, as before. `(0, 0)` when the grant pays nothing; `None` for a
/// zero or negative rate.
pub fn pay(due: u128, remaining: Decimal, rate: Decimal, scale: u32) -> Option<(Decimal, u128)> {
    if rate <= Decimal::ZERO {
        return None;
    }
    let worth = value_minor(remaining.max(Decimal::ZERO), rate, scale)?;
    let want = due.min(worth);
    if want == 0 {
        return Some((Decimal::ZERO, 0));
    }
    let credits = credits_for(want, rate, scale, remaining)?;
    if credits.is_zero() {
        return Some((Decimal::ZERO, 0));
    }
    // ⌈credits × rate × 10^scale⌉, exactly.
    let num = mantissa(credits)? * mantissa(rate)? * pow10(scale);
    let den = pow10(credits.scale() + rate.scale());
    let (q, r) = num_integer::Integer::div_rem(&num, &den);
    let covered = if r.is_zero() { q } else { q + 1u32 };
    Some((credits, covered.to_u128()?.min(want)))
}

/// `ns` as RFC 3339 UTC (the bank's times in memos).
pub fn time_text(ns: u64) -> String {
    rfc3339(ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap_or_default()
    }

    #[test]
    fn the_bounds_are_the_powers_of_ten_their_docs_say() {
        assert_eq!(MAX_CREDITS, Decimal::from(1_000_000_000_000u64));
        assert_eq!(MAX_CREDIT_RATE, Decimal::from(1_000_000u64));
        assert_eq!(MAX_AMOUNT, Decimal::from(1_000_000_000_000_000u64));
        assert_eq!(MAX_FRAGMENT, 10u128.pow(21));
    }

    /// The headroom the bounds' docs claim: 79 million maximal grants of credits with 9
    /// decimals, 7.9 billion maximal amounts with 4 decimals and 79 million maximal fragments
    /// sum exactly in one account; ten times as many do not.
    #[test]
    fn the_bounds_leave_the_headroom_their_docs_say() {
        let sums = |one: Decimal, n: u64, scale: u32| {
            let mut total = Decimal::ZERO;
            let mut one = one;
            one.rescale(scale);
            // n × one by doubling, with the ledger's exact sum.
            let (mut k, mut power) = (n, one);
            while k > 0 {
                if k & 1 == 1 {
                    match crate::ledger::exact_add(total, power) {
                        Some(t) => total = t,
                        None => return false,
                    }
                }
                k >>= 1;
                if k > 0 {
                    match crate::ledger::exact_add(power, power) {
                        Some(p) => power = p,
                        None => return false,
                    }
                }
            }
            true
        };
        // The worst case has every decimal in use (a sum of whole credits needs none).
        let credits = MAX_CREDITS - Decimal::new(1, CREDIT_DECIMALS);
        assert!(sums(credits, 79_000_000, CREDIT_DECIMALS));
        assert!(!sums(credits, 790_000_000, CREDIT_DECIMALS));
        let amount = MAX_AMOUNT - Decimal::new(1, 4);
        assert!(sums(amount, 7_900_000_000, 4));
        assert!(!sums(amount, 79_000_000_000, 4));
        let fragment = Decimal::from_i128_with_scale(MAX_FRAGMENT as i128, 0);
        assert!(sums(fragment, 79_000_000, 0));
        assert!(!sums(fragment, 790_000_000, 0));
    }

    #[test]
    fn values_and_burns_round_for_the_tenant() {
        // 10 credits at 0.03 USD = 0.30 USD = 30 cents.
        assert_eq!(value_minor(d("10"), d("0.03"), 2), Some(30));
        // 0.333 credits at 0.03 = 0.00999 USD: 0 whole cents.
        assert_eq!(value_minor(d("0.333"), d("0.03"), 2), Some(0));
        // 10 cents at 0.03 per credit = 3.333333333… credits, rounded down.
        assert_eq!(
            credits_for(10, d("0.03"), 2, d("100")),
            Some(d("3.333333333"))
        );
        // Never more than available.
        assert_eq!(credits_for(10, d("0.03"), 2, d("1")), Some(d("1")));
        assert_eq!(credits_for(10, d("0"), 2, d("1")), None);
        // JPY: 5 yen at 2 yen per credit = 2.5 credits.
        assert_eq!(credits_for(5, d("2"), 0, d("10")), Some(d("2.5")));
    }
}
