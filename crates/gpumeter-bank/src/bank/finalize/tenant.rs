//! One tenant's finalization, as its steps: the rows and the sources they claim, the invoice
//! rated, reservation fees, credits, fragments, conversions, and the transactions that
//! record it.

use super::rate::{rate_first, rate_supplement, Rated};
use super::*;
use crate::bank::close::PaidPackages;
use crate::bank::fees::Held;
use crate::bank::sources::Claim;

/// The instant by which a grant counts as expired for a credit note's give-back: the latest
/// `expire` run's instant (it moved the expired grants' credits to breakage) or `now`,
/// whichever is later; `None` when neither is known.
fn expired_by(t: &dyn LedgerTx, now: Option<u64>) -> Result<Option<u64>, BankError> {
    let mut by = now;
    for run in t.transactions(Some("expire"))? {
        let at = parse_time(&run.tx.at)?;
        by = Some(by.map_or(at, |b| b.max(at)));
    }
    Ok(by)
}

/// Finalizes `plain`'s tenant under finalization `key` (what [`super::finalize_with`] runs
/// per tenant not finalized before), as the steps below.
pub(super) fn finalize_tenant(
    t: &mut dyn LedgerTx,
    call: &Call<'_>,
    plain: &Invoice,
    key: &str,
) -> Result<(Invoice, Outcome), BankError> {
    let tenant = plain.tenant.as_str();
    let from = parse_time(&plain.period.from)?;
    let to = parse_time(&plain.period.to)?;

    // 1. The tenant's rows in the period, and what they claim of the report's sources.
    let rows = rows_of(call.usage, plain);
    let claims = claims_of(call.usage, &rows)?;
    if let Some(billed) = call.billed {
        billed.check(call.usage, &claims)?;
    }

    // 2. and 3.
    let Priced {
        rated:
            Rated {
                invoice: mut inv,
                fragments,
                measured,
                paid,
            },
        period_invoices,
        held,
        subtotal_minor,
    } = price(t, call, plain, &rows, (from, to))?;

    // 4. Credits in force at the period's end burn against the lines they may pay for (a
    //    credit note burns none: it lowers what the period left to pay in money, then gives
    //    back the period's credits, latest burn first, then lowers the receivable).
    let mut postings: Vec<Posting> = Vec::new();
    let settled = Settled {
        invoices: &period_invoices,
        expired_by: if subtotal_minor < 0 {
            expired_by(t, call.now)?
        } else {
            None
        },
    };
    credits_and_totals(
        t,
        &mut inv,
        tenant,
        to,
        subtotal_minor,
        call.book,
        &settled,
        &mut postings,
    )?;

    // 5. Fragments.
    let carry = move_fragments(t, tenant, (from, to), fragments, &mut postings)?;

    // 6. Unused reserved capacity converts to credits (a grant) at the reservation's rate; a
    //    supplement's usage takes back what it consumed of the period's conversion.
    let Converted {
        grants: conversions,
        clawed_back: clawed,
    } = conversions_and_takebacks(
        t,
        &held,
        &measured,
        &mut inv,
        key,
        (tenant, to),
        &mut postings,
    )?;

    // 7. One transaction for the invoice; conversions as grants after it.
    record(
        t,
        call,
        key,
        Record {
            tenant,
            period: (from, to),
            invoice: inv,
            postings,
            claims,
            rows,
            held,
            conversions,
            clawed,
            paid,
            carry,
        },
    )
}

/// A tenant's invoice rated and with its reservation fees: what the bank settles.
struct Priced {
    rated: Rated,
    /// The invoices finalized for the period before (none for its first).
    period_invoices: Vec<Invoice>,
    /// The reservations whose span holds the period.
    held: Vec<Held>,
    /// The invoice's subtotal, minor units.
    subtotal_minor: i128,
}

/// Steps 2 and 3 of [`finalize_tenant`]: the invoice of `plain`'s tenant for `(from, to)`
/// rated from its `rows`, with the fees of the reservations that hold the period.
fn price(
    t: &dyn LedgerTx,
    call: &Call<'_>,
    plain: &Invoice,
    rows: &[&UsageRow],
    (from, to): (u64, u64),
) -> Result<Priced, BankError> {
    let tenant = plain.tenant.as_str();
    let scale = call.book.currency().scale();

    // 2. Rated as the period's first invoice, or as a supplement of it.
    let placed = place(tenant, (from, to), finalizations(t, tenant)?)?;
    let period_invoices: Vec<Invoice> = match &placed {
        Place::New => vec![],
        Place::Supplement(earlier) => earlier.iter().map(|e| e.invoice.clone()).collect(),
    };
    let mut rated = match placed {
        Place::New => rate_first(t, call, plain, rows)?,
        Place::Supplement(earlier) => rate_supplement(t, call, plain, rows, &earlier)?,
    };
    let inv = &mut rated.invoice;

    // 3. Reservations whose span holds the period: their fee is a line, once per period.
    let held = reservation_lines(t, (call.book, call.default_period), inv, (from, to))?;
    if call.default_period {
        warn_period_from_usage(inv);
    }
    let subtotal_minor = signed_minor(inv.lines.iter().map(|l| l.amount), scale)?;
    if inv.extensions.supplement_of.is_some() {
        inv.extensions.kind = Some(if subtotal_minor < 0 {
            InvoiceKind::CreditNote
        } else {
            InvoiceKind::Supplement
        });
    }
    Ok(Priced {
        rated,
        period_invoices,
        held,
        subtotal_minor,
    })
}

/// Step 5 of [`finalize_tenant`]: the fragments draw the carried-in ones and deposit the new
/// ones (a supplement: the change of the period's fragment); at the period's end (added to
/// `postings`), or in a `carry` transaction at the latest business time of the accounts'
/// postings when that is later (as-of balances never go negative): then returned, with that
/// time.
fn move_fragments(
    t: &dyn LedgerTx,
    tenant: &str,
    (from, to): (u64, u64),
    fragments: BTreeMap<(String, MeterKind), i128>,
    postings: &mut Vec<Posting>,
) -> Result<Option<(u64, Vec<Posting>)>, BankError> {
    let mut moved: Vec<Posting> = Vec::new();
    for ((sku, meter), d) in fragments {
        if d == 0 {
            continue;
        }
        let amount = Decimal::try_from_i128_with_scale(d, 0)
            .map_err(|_| refused("a fragment exceeds a decimal"))?;
        moved.push(Posting::new(
            accounts::fragments(tenant, &sku, meter),
            meter.canonical_unit(),
            amount,
        ));
        moved.push(Posting::new(
            accounts::FRAGMENTS,
            meter.canonical_unit(),
            -amount,
        ));
    }
    let carry_at = fragment_booking(t, tenant, to, &moved)?;
    check_fragments(t, tenant, carry_at.unwrap_or(to), &moved, (from, to))?;
    Ok(match carry_at {
        None => {
            postings.append(&mut moved);
            None
        }
        Some(at) => Some((at, moved)),
    })
}

/// What a tenant's finalization records: its `finalize` transaction's parts, and the `carry`
/// and conversions that follow it.
struct Record<'a> {
    tenant: &'a str,
    period: (u64, u64),
    invoice: Invoice,
    postings: Vec<Posting>,
    claims: Vec<Claim>,
    rows: Vec<&'a UsageRow>,
    held: Vec<Held>,
    conversions: Vec<Grant>,
    clawed: Vec<(String, String)>,
    paid: Vec<PaidPackages>,
    /// The fragments' postings when they move after the period's end, and when.
    carry: Option<(u64, Vec<Posting>)>,
}

impl Record<'_> {
    /// The `finalize` transaction's memo: the invoice, the claims, the rows billed, the
    /// reservations billed, the conversions taken back and the packages paid.
    fn memo(&self, usage: &UsageReport) -> serde_json::Value {
        let (from, to) = self.period;
        let memo_invoice = {
            let mut i = self.invoice.clone();
            i.ledger_head = None;
            i.sha256 = String::new();
            i
        };
        serde_json::json!({
            "invoice": memo_invoice,
            "claims": self.claims,
            "usage": StoredUsage::of(usage, &self.rows),
            "reservations": self.held
                .iter()
                .filter(|h| h.billed_now || h.unbillable)
                .map(|h| BilledReservation {
                    reservation: h.reservation.reservation.clone(),
                    from: rfc3339(from),
                    to: rfc3339(to),
                    conversion: self.conversions
                        .iter()
                        .find(|g| g.reservation.as_deref() == Some(h.reservation.reservation.as_str()))
                        .map(|g| g.grant.clone()),
                    unbillable: h.unbillable,
                })
                .collect::<Vec<_>>(),
            "clawed_back": self.clawed,
            "paid_packages": self.paid,
        })
    }
}

/// Step 7 of [`finalize_tenant`]: appends the `finalize` transaction, then the `carry` and
/// the conversions as grants; the invoice as finalized (or, in a preview, sealed without a
/// ledger head).
fn record(
    t: &mut dyn LedgerTx,
    call: &Call<'_>,
    key: &str,
    mut r: Record<'_>,
) -> Result<(Invoice, Outcome), BankError> {
    let (from, to) = r.period;
    let tenant = r.tenant;
    let tx = NewTransaction {
        key: format!("finalize:{key}"),
        kind: "finalize".into(),
        at: rfc3339(to),
        tenant: Some(tenant.to_string()),
        memo: r.memo(call.usage),
        postings: std::mem::take(&mut r.postings),
    };
    let stored = t.append(tx)?;
    if let Appended::AlreadyApplied(earlier) = &stored {
        // Another finalizer applied this key first (the tenant's lock keeps it from happening
        // on the shipped ledgers): its invoice, and nothing of this one.
        return Ok((stored_invoice(earlier)?, Outcome::AlreadyFinalized));
    }
    if let Some((at, moved)) = r.carry {
        t.append(NewTransaction {
            key: format!("carry:{key}"),
            kind: "carry".into(),
            at: rfc3339(at),
            tenant: Some(tenant.to_string()),
            postings: moved,
            memo: serde_json::json!({
                "finalization": key,
                "period": {"from": rfc3339(from), "to": rfc3339(to)},
                "why": "the tenant's fragment accounts have postings after the period's end: \
                        the finalization's fragments move at the latest of them",
            }),
        })?;
    }
    for g in r.conversions {
        t.append(NewTransaction {
            key: crate::ledger::conversion_key(key, &g.grant),
            kind: "grant".into(),
            at: rfc3339(to),
            tenant: Some(tenant.to_string()),
            postings: vec![
                Posting::new(accounts::credits(tenant, &g.grant), CREDITS, g.credits),
                Posting::new(GrantKind::Reservation.source_account(), CREDITS, -g.credits),
            ],
            memo: serde_json::to_value(&g).map_err(|e| refused(e.to_string()))?,
        })?;
    }
    let mut inv = r.invoice;
    if call.commit {
        Ok((stored_invoice(stored.stored())?, Outcome::Applied))
    } else {
        inv.ledger_head = None;
        inv.seal()?;
        Ok((inv, Outcome::Applied))
    }
}

/// Warns (`period_from_usage`) when an invoice whose period is its usage's span (no period
/// given) bills per period: a minimum, a flat fee, a tier or packages. A later report of other
/// days of the same month is then another period and bills them again, where one period given
/// with `--from`/`--to` would make the later report a supplement.
fn warn_period_from_usage(inv: &mut Invoice) {
    let per_period = inv.lines.iter().any(|l| {
        matches!(l.kind, LineKind::Minimum | LineKind::FlatFee)
            || (l.kind == LineKind::Usage && (l.tier.is_some() || l.extensions.packages.is_some()))
    });
    if per_period {
        inv.warnings.push(Warning::new(
            WarningCode::PeriodFromUsage,
            format!(
                "the period {} to {} is the usage's span, not one given with --from/--to: a later \
                 report of other days is another period, whose minimum, flat fees, tiers and \
                 packages start again; finalize a billing period with --from/--to",
                inv.period.from, inv.period.to
            ),
        ));
    }
}
