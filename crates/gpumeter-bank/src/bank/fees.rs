//! Reservations at finalization: each reservation whose span holds the period bills its fee
//! once per period, its unused capacity converts to credits, and a supplement's usage takes
//! back what it consumed of that conversion.

use super::*;

/// Every reservation in the ledger, in ledger order.
pub(crate) fn all_reservations(t: &dyn LedgerTx) -> Result<Vec<Reservation>, BankError> {
    let mut out = Vec::new();
    for tx in t.transactions(Some("reserve"))? {
        let r: Reservation =
            serde_json::from_value(tx.tx.memo.clone()).map_err(|e| BankError::Corrupt {
                seq: tx.seq,
                key: tx.tx.key.clone(),
                reason: format!("the memo of a reservation is not a reservation: {e}"),
            })?;
        out.push(r);
    }
    Ok(out)
}

/// A period of a reservation that an earlier finalization billed, as its memo records it.
#[derive(Debug, Clone)]
pub(crate) struct Billed {
    pub(crate) from: u64,
    pub(crate) to: u64,
    /// The grant its unused capacity converted to, if any.
    pub(crate) conversion: Option<String>,
    /// Recorded without its fee (finer than the currency): it consumed no usage.
    pub(crate) unbillable: bool,
}

/// Periods of `reservation` that earlier finalizations billed (its fee and conversion).
///
/// Only the finalizations of the reservation's tenant bill it.
pub(crate) fn reservation_periods(
    t: &dyn LedgerTx,
    tenant: &str,
    reservation: &str,
) -> Result<Vec<Billed>, BankError> {
    let mut out = Vec::new();
    for done in t.tenant_transactions("finalize", tenant)? {
        let billed: Vec<BilledReservation> =
            serde_json::from_value(done.tx.memo["reservations"].clone()).unwrap_or_default();
        for b in billed {
            if b.reservation == reservation {
                out.push(Billed {
                    from: parse_time(&b.from)?,
                    to: parse_time(&b.to)?,
                    conversion: b.conversion,
                    unbillable: b.unbillable,
                });
            }
        }
    }
    Ok(out)
}

/// A reservation's period as a finalization records it: billed (its fee, or noted as not
/// billable), and the grant its unused capacity converted to, if any.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BilledReservation {
    pub(crate) reservation: String,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) conversion: Option<String>,
    /// Noted as not billable (a fee finer than the currency); absent when billed (and in
    /// memos written before issue 30).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) unbillable: bool,
}

/// Measured usage per (SKU, meter), canonical units: the usage lines' quantities less the
/// carried-in fragment (measured in an earlier period), as what the period's earlier invoices
/// billed (`before`) and with this finalization (`now`).
#[derive(Debug, Default)]
pub(crate) struct Measured {
    pub(crate) before: BTreeMap<(String, MeterKind), u128>,
    pub(crate) now: BTreeMap<(String, MeterKind), u128>,
}

/// A reservation whose span holds the period.
pub(crate) struct Held {
    pub(crate) reservation: Reservation,
    /// Its fee is a line of this invoice.
    pub(crate) billed_now: bool,
    /// Its fee cannot be billed (finer than the currency): recorded as this period's.
    pub(crate) unbillable: bool,
    /// The conversions of the periods it was billed for before (overlapping this one).
    pub(crate) conversions_before: Vec<String>,
    /// It was billed before, as not billable.
    pub(crate) unbillable_before: bool,
}

/// Adds a `reservation` line per reservation of the tenant whose span holds the period and
/// whose fee was not billed for it before, with the warnings about the others; returns the
/// reservations that hold the period, in ledger order.
pub(crate) fn reservation_lines(
    t: &dyn LedgerTx,
    (book, default_period): (&PriceBook, bool),
    inv: &mut Invoice,
    (from, to): (u64, u64),
) -> Result<Vec<Held>, BankError> {
    let scale = book.currency().scale();
    let mut held = Vec::new();
    for r in reservations(t, &inv.tenant)? {
        let (rf, rt) = (parse_time(&r.from)?, parse_time(&r.to)?);
        if !(rf <= from && to <= rt) {
            if rf < to && from < rt {
                inv.warnings.push(Warning::new(
                    WarningCode::ReservationPartOfPeriod,
                    format!(
                        "reservation {} ({} to {}) covers only part of the period: its fee and \
                     unused capacity are billed for periods inside its span",
                        r.reservation, r.from, r.to
                    ),
                ));
            }
            continue;
        }
        let overlapping: Vec<Billed> = reservation_periods(t, &r.tenant, &r.reservation)?
            .into_iter()
            .filter(|b| b.from < to && from < b.to)
            .collect();
        if let Some(b) = overlapping.first() {
            inv.warnings.push(Warning::new(
                WarningCode::ReservationBilledBefore,
                format!(
                "reservation {} was billed for {} to {} already, which overlaps this period: its \
                 fee is not billed again",
                r.reservation,
                rfc3339(b.from),
                rfc3339(b.to)
            ),
            ));
            held.push(Held {
                unbillable_before: overlapping.iter().all(|b| b.unbillable),
                conversions_before: overlapping
                    .into_iter()
                    .filter_map(|b| b.conversion)
                    .collect(),
                reservation: r,
                billed_now: false,
                unbillable: false,
            });
            continue;
        }
        if fee_unbillable(&r, book, inv) {
            // Recorded as this period's, so later reports do not bill its tenant again.
            held.push(Held {
                reservation: r,
                billed_now: false,
                unbillable: true,
                conversions_before: vec![],
                unbillable_before: false,
            });
            continue;
        }
        if default_period {
            inv.warnings.push(Warning::new(
                WarningCode::ReservationDefaultPeriod,
                format!(
                    "reservation {}: its fee is billed per invoice period, and this period is the \
                 usage's span, not a billing period given with --from/--to",
                    r.reservation
                ),
            ));
        }
        inv.lines.push(fee_line(&r, scale));
        held.push(Held {
            reservation: r,
            billed_now: true,
            unbillable: false,
            conversions_before: vec![],
            unbillable_before: false,
        });
    }
    Ok(held)
}

/// Whether the fee of `r` cannot be billed, with the warning that says why: finer than the
/// currency's minor unit (a fee is never rounded), or not positive.
fn fee_unbillable(r: &Reservation, book: &PriceBook, inv: &mut Invoice) -> bool {
    let currency = book.currency();
    if r.fee.normalize().scale() > currency.scale() {
        inv.warnings.push(Warning::new(
            WarningCode::ReservationFeeTooFine,
            format!(
                "reservation {}: its fee {} is finer than {}'s minor unit, so it is not billed \
                 (a fee is never rounded)",
                r.reservation,
                r.fee,
                currency.code()
            ),
        ));
        return true;
    }
    if r.fee <= Decimal::ZERO {
        // Made before `reserve` refused a fee of 0 (issue 30 item 6): unpaid capacity
        // never converts, so it bills nothing and converts nothing.
        inv.warnings.push(Warning::new(
            WarningCode::ReservationUnpaid,
            format!(
                "reservation {}: its fee is {}, and unpaid capacity never converts to \
                 credits: it bills nothing and converts nothing",
                r.reservation, r.fee
            ),
        ));
        return true;
    }
    false
}

/// The `reservation` line of `r`: its fee at the currency's `scale`, for its capacity.
fn fee_line(r: &Reservation, scale: u32) -> Line {
    let mut fee = r.fee;
    fee.rescale(scale);
    Line {
        kind: LineKind::Reservation,
        sku: Some(r.sku.clone()),
        meter: Some(r.meter),
        unit_price: Some(fee),
        pricing_unit: Some(r.unit.clone()),
        quantity_in_pricing_unit: Some(r.capacity.to_string()),
        ..Line::minimum(fee)
    }
}

/// The conversions of the reservations billed now (their unused capacity), and the credits a
/// supplement's usage takes back from the conversions of the reservations billed before (what
/// it consumed of their unused capacity), with the postings of the take-backs. The
/// reservations holding the period consume the usage in ledger order, before (the period's
/// earlier invoices) and now (with this finalization).
pub(crate) fn conversions_and_takebacks(
    t: &dyn LedgerTx,
    held: &[Held],
    measured: &Measured,
    inv: &mut Invoice,
    key: &str,
    (tenant, to): (&str, u64),
    postings: &mut Vec<Posting>,
) -> Result<Converted, BankError> {
    let mut conversions = Vec::new();
    let mut clawed = Vec::new();
    let mut left_before = measured.before.clone();
    let mut left_now = measured.now.clone();
    for h in held {
        let r = &h.reservation;
        if h.unbillable || (!h.billed_now && h.unbillable_before) {
            continue;
        }
        let unit = PricingUnit::parse(&r.unit)
            .ok_or_else(|| refused(format!("reservation {}: unit {}", r.reservation, r.unit)))?;
        let capacity = unit.to_canonical(r.capacity).ok_or_else(|| {
            refused(format!(
                "reservation {}: capacity {} {} is not a whole number of canonical units",
                r.reservation, r.capacity, r.unit
            ))
        })?;
        let k = (r.sku.clone(), r.meter);
        let take = |left: &mut BTreeMap<(String, MeterKind), u128>| {
            let slot = left.entry(k.clone()).or_insert(0);
            let used = (*slot).min(capacity);
            *slot -= used;
            used
        };
        let used_before = take(&mut left_before);
        let used_now = take(&mut left_now);
        if h.billed_now {
            let credits = credits_of(capacity - used_now, &unit)?;
            if credits.is_zero() {
                continue;
            }
            let id = format!(
                "g-{}",
                &hex::encode(Sha256::digest(
                    format!("{key}:{}", r.reservation).as_bytes()
                ))[..12]
            );
            conversions.push(Grant {
                grant: id,
                tenant: tenant.to_string(),
                credits,
                rate: r.rate,
                priority: 0,
                effective: rfc3339(to),
                expires: r.credit_expiry.clone(),
                kind: GrantKind::Reservation,
                skus: vec![],
                meters: vec![],
                reservation: Some(r.reservation.clone()),
            });
            continue;
        }
        // Billed before: what this finalization's usage consumed of the capacity that
        // converted then (rounded down, as the conversion was), from those conversions.
        let mut owed =
            credits_of(capacity - used_before, &unit)? - credits_of(capacity - used_now, &unit)?;
        if owed <= Decimal::ZERO {
            continue;
        }
        for g in grants(t, Some(tenant))? {
            if owed.is_zero() {
                break;
            }
            if !h.conversions_before.contains(&g.grant.grant) || g.remaining <= Decimal::ZERO {
                continue;
            }
            let back = owed.min(g.remaining);
            postings.push(Posting::new(
                accounts::credits(tenant, &g.grant.grant),
                CREDITS,
                -back,
            ));
            postings.push(Posting::new(accounts::RESERVATIONS, CREDITS, back));
            owed -= back;
            clawed.push((g.grant.grant.clone(), back.to_string()));
            inv.warnings.push(Warning::new(
                WarningCode::CreditsTakenBack,
                format!(
                "{back} credits converted from reservation {} for capacity this usage consumed \
                 are taken back from grant {}",
                r.reservation, g.grant.grant
            ),
            ));
        }
        if !owed.is_zero() && !h.conversions_before.is_empty() {
            inv.warnings.push(Warning::new(
                WarningCode::CreditsNotTakenBack,
                format!(
                    "{owed} more credits converted from reservation {} for capacity this usage \
                 consumed cannot be taken back: they were used or have expired",
                    r.reservation
                ),
            ));
        }
    }
    Ok(Converted {
        grants: conversions,
        clawed_back: clawed,
    })
}

/// What [`conversions_and_takebacks`] decided.
pub(crate) struct Converted {
    /// The grants unused capacity converts to.
    pub(crate) grants: Vec<Grant>,
    /// `(grant, credits)` taken back from earlier conversions.
    pub(crate) clawed_back: Vec<(String, String)>,
}
