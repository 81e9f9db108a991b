//! Reservations of capacity (`gpumeter bank reserve`).

use super::*;

/// A request for a reservation (`gpumeter bank reserve`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveRequest {
    /// The reservation's terms (its id is derived from them).
    pub terms: Reservation,
    /// When it is recorded, ns.
    pub at: u64,
}

/// Checks a reservation's terms without a ledger, as [`reserve`] does first (a caller, the
/// CLI, refuses them before it opens, or creates, a bank). Returns the pricing unit.
///
/// # Errors
/// [`BankError::Refused`] as [`reserve`]'s, except a fee finer than the bank's currency (the
/// bank's to say).
pub fn check_reservation(r: &Reservation) -> Result<PricingUnit, BankError> {
    never_idle(&r.tenant)?;
    if r.capacity <= Decimal::ZERO || r.rate <= Decimal::ZERO {
        return Err(refused(
            "a reservation needs a positive --capacity and --rate",
        ));
    }
    if r.fee <= Decimal::ZERO {
        return Err(refused(format!(
            "--fee {}: a reservation's fee must be positive: its unused capacity converts to \
             credits, and unpaid capacity never does",
            r.fee
        )));
    }
    crate::grants::check_bounds("--capacity", r.capacity, r.rate)?;
    crate::grants::within(
        "--fee",
        r.fee,
        crate::grants::MAX_AMOUNT,
        "one request may be worth",
    )?;
    let unit = PricingUnit::parse(&r.unit)
        .ok_or_else(|| refused(format!("--unit {}: not a pricing unit", r.unit)))?;
    if unit.dimension() != r.meter.dimension() {
        return Err(refused(format!(
            "--unit {}: {} is measured in {}",
            r.unit,
            r.meter,
            r.meter.canonical_unit()
        )));
    }
    let Some(capacity) = unit.to_canonical(r.capacity) else {
        return Err(refused(format!(
            "--capacity {} {}: not a whole number of {}",
            r.capacity,
            r.unit,
            r.meter.canonical_unit()
        )));
    };
    if credits_of(capacity, &unit).is_err() {
        return Err(refused(format!(
            "--capacity {} {}: too large for the bank to convert to credits",
            r.capacity, r.unit
        )));
    }
    let (from, to) = (parse_time(&r.from)?, parse_time(&r.to)?);
    if to <= from {
        return Err(refused("--to must be after --from"));
    }
    if let Some(e) = &r.credit_expiry {
        if parse_time(e)? <= to {
            return Err(refused(format!(
                "--credit-expiry {e}: credits converted at the end of each period would expire \
                 before the reservation ends ({}); give an expiry after it",
                r.to
            )));
        }
    }
    if r.rate.normalize().scale() > crate::grants::CREDIT_DECIMALS {
        return Err(refused(format!(
            "--rate {}: the bank keeps rates to {} decimals",
            r.rate,
            crate::grants::CREDIT_DECIMALS
        )));
    }
    Ok(unit)
}

/// Records a reservation (no postings: its fee is billed on each period's invoice, and its
/// unused capacity converts to credits at finalization). Its key is derived from its terms
/// (`reserve:<sha256>`, a key the bank makes): the same terms again are the same reservation,
/// other terms another one; a reservation takes no caller's key.
///
/// # Errors
/// [`BankError::Refused`] for the tenant `idle`; a non-positive capacity, rate or fee (unpaid
/// capacity never converts to credits: a fee of 0 would turn capacity into credits from
/// nothing every period); a capacity above [`crate::grants::MAX_CREDITS`] in its unit, a
/// rate above [`crate::grants::MAX_CREDIT_RATE`], a fee or capacity × rate above
/// [`crate::grants::MAX_AMOUNT`]; an unknown unit, an empty span; [`BankError::Storage`].
pub fn reserve<L: Ledger>(
    ledger: &mut L,
    req: &ReserveRequest,
) -> Result<(Reservation, bool), BankError> {
    let r = &req.terms;
    let unit = check_reservation(r)?;
    let mut terms = r.clone();
    terms.unit = unit.name().to_string();
    terms.reservation = String::new();
    let key = format!(
        "reserve:{}",
        sha(&serde_json::to_value(&terms).map_err(|e| refused(e.to_string()))?)?
    );
    terms.reservation = format!("r-{}", &hex::encode(Sha256::digest(key.as_bytes()))[..12]);
    let tx = NewTransaction {
        key,
        kind: "reserve".into(),
        at: rfc3339(req.at),
        tenant: Some(terms.tenant.clone()),
        postings: vec![],
        memo: serde_json::to_value(&terms).map_err(|e| refused(e.to_string()))?,
    };
    ledger.atomically(true, |t| {
        t.lock_tenants(&[&terms.tenant])?;
        // The same terms spelled otherwise (`2` and `2.00`, another unit spelling, another
        // time zone) are the same reservation: its key hashes the terms as written.
        for earlier in crate::grants::reservations(t, &terms.tenant)? {
            if same_terms(&earlier, &terms)? {
                return Ok((earlier, false));
            }
        }
        if let Some((code, _)) = bank_currency(t)? {
            let scale = gpumeter_rating::Currency::from_code(&code).map_or(0, |c| c.scale());
            if terms.fee.normalize().scale() > scale {
                return Err(refused(format!(
                    "--fee {}: finer than {code}'s minor unit ({scale} decimals), the bank's \
                     currency",
                    terms.fee
                )));
            }
        }
        let applied = t.append(tx.clone())?;
        Ok((terms.clone(), matches!(applied, Appended::Applied(_))))
    })
}

/// Whether two reservations' terms are one request: the same tenant, SKU, meter, unit and
/// instants, and the same capacity, fee and rate by value.
fn same_terms(a: &Reservation, b: &Reservation) -> Result<bool, BankError> {
    let instant = |s: &Option<String>| s.as_deref().map(parse_time).transpose();
    Ok(a.tenant == b.tenant
        && a.sku == b.sku
        && a.meter == b.meter
        && PricingUnit::parse(&a.unit).map(|u| u.name().to_string())
            == PricingUnit::parse(&b.unit).map(|u| u.name().to_string())
        && a.capacity == b.capacity
        && a.fee == b.fee
        && a.rate == b.rate
        && parse_time(&a.from)? == parse_time(&b.from)?
        && parse_time(&a.to)? == parse_time(&b.to)?
        && instant(&a.credit_expiry)? == instant(&b.credit_expiry)?)
}
