//! Finalization and preview of invoices against the bank (`gpumeter invoice finalize`,
//! `gpumeter preview --bank`).

use super::*;

/// The finalization key: SHA-256 over the RFC 8785 canonical JSON of
/// `{tenant, period: {from, to}, usage_sha256, price_book_sha256}`: independent of the bank's
/// state, so a retry or a concurrent finalizer applies an invoice at most once.
///
/// # Errors
/// [`BankError::Refused`] when the JSON cannot be canonicalized.
pub fn finalization_key(
    tenant: &str,
    (from, to): (&str, &str),
    usage_sha256: &str,
    book_sha256: &str,
) -> Result<String, BankError> {
    sha(&serde_json::json!({
        "tenant": tenant,
        "period": {"from": from, "to": to},
        "usage_sha256": usage_sha256,
        "price_book_sha256": book_sha256,
    }))
}

/// What [`finalize`] did for each invoice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Applied now (or, in a preview, would be).
    Applied,
    /// Its finalization key was already in the ledger: nothing changed; the invoice is the one
    /// finalized then.
    AlreadyFinalized,
}

/// The invoices of a finalization (or preview) and what happened to each.
#[derive(Debug, Clone, PartialEq)]
pub struct Finalized {
    /// The invoices, by tenant, with credits applied and (when committed) `ledger_head`.
    pub document: InvoiceDocument,
    /// Per invoice, in the same order.
    pub outcomes: Vec<Outcome>,
}

/// Usage rows of `tenant` in windows whose source was billed before under another key.
type BilledBefore = BTreeMap<String, BTreeSet<(String, String)>>;

/// Rates `usage` with `book` for `period` against the bank, applying each tenant's carried
/// fragments, reservations and credits: preview and finalization are this one
/// function; `commit = false` (a preview) rolls everything back.
///
/// Per tenant with usage in the period: if its finalization key ([`finalization_key`]) is in
/// the ledger, the invoice finalized then is returned unchanged ([`Outcome::AlreadyFinalized`]).
/// Otherwise, inside one ledger transaction: windows of the tenant's usage whose source was
/// already billed under another key (same source SHA-256 and window) are left out with a
/// warning that lists them; the usage is rated with the tenant's carried-in fragments
/// ([`gpumeter_rating::rate`]); each reservation whose span holds the period adds its fee as a
/// `reservation` line; credits in force at the period's end burn against the lines they may
/// pay for, in burn order, whole minor units at a time, the credits rounded down (the
/// tenant's favour); the new fragments replace the carried-in ones; unused capacity of each
/// reservation billed here converts to a grant at its rate; and one `finalize` transaction
/// records it all with the invoice in its memo. The invoice's `ledger_head` is that
/// transaction's hash when committed.
///
/// # Errors
/// [`BankError::Rating`] when rating fails, [`BankError::Storage`], [`BankError::Refused`] for
/// amounts beyond a decimal.
pub fn finalize<L: Ledger>(
    ledger: &mut L,
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<(u64, u64)>,
    commit: bool,
) -> Result<Finalized, BankError> {
    // The period and the tenants come from rating the report once, bank-free.
    let plain = rate(usage, book, period, &CarriedFragments::new())?;
    ledger.atomically(commit, |t| {
        check_currency(t, book)?;
        // Which tenants this finalization bills depends on the reservations in the ledger:
        // find them, hold them, then find them again under the locks, until every tenant
        // found was found while it was held (a tenant added in between was found before its
        // lock: another finalizer may have billed it meanwhile). A deadlock the later locks
        // may cause is retried by the ledger.
        let mut held: Option<BTreeSet<String>> = None;
        let tenants = loop {
            let found = tenants_to_bill(t, usage, book, &plain, period)?;
            let names: Vec<&str> = found.iter().map(|i| i.tenant.as_str()).collect();
            if let Some(held) = &held {
                if names.iter().all(|n| held.contains(*n)) {
                    break found;
                }
            }
            t.lock_tenants(&names)?;
            held.get_or_insert_with(BTreeSet::new)
                .extend(names.iter().map(|n| (*n).to_string()));
        };
        let mut invoices = Vec::with_capacity(tenants.len());
        let mut outcomes = Vec::with_capacity(tenants.len());
        for inv in &tenants {
            let key = finalization_key(
                &inv.tenant,
                (&inv.period.from, &inv.period.to),
                &inv.usage_sha256,
                &inv.price_book.sha256,
            )?;
            if let Some(done) = t.find(&format!("finalize:{key}"))? {
                invoices.push(stored_invoice(&done)?);
                outcomes.push(Outcome::AlreadyFinalized);
                continue;
            }
            let (inv, outcome) =
                finalize_tenant(t, usage, book, inv, &key, commit, period.is_none())?;
            invoices.push(inv);
            outcomes.push(outcome);
        }
        // `idle` is never finalized: rating lists it apart, and the document keeps the list.
        let mut document = InvoiceDocument::new(invoices);
        document.extensions = plain.extensions.clone();
        Ok(Finalized { document, outcomes })
    })
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
                .any(|(a, b, _)| a < to && from < b);
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
            if holds && !billed && !tenants.iter().any(|i| i.tenant == r.tenant) {
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

/// Every reservation in the ledger, in ledger order.
fn all_reservations(t: &dyn LedgerTx) -> Result<Vec<Reservation>, BankError> {
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

/// Periods of `reservation` that earlier finalizations billed (its fee and conversion).
///
/// Only the finalizations of the reservation's tenant bill it.
fn reservation_periods(
    t: &dyn LedgerTx,
    tenant: &str,
    reservation: &str,
) -> Result<Vec<(u64, u64, Option<String>)>, BankError> {
    let mut out = Vec::new();
    for done in t.tenant_transactions("finalize", tenant)? {
        let billed: Vec<BilledReservation> =
            serde_json::from_value(done.tx.memo["reservations"].clone()).unwrap_or_default();
        for b in billed {
            if b.reservation == reservation {
                out.push((parse_time(&b.from)?, parse_time(&b.to)?, b.conversion));
            }
        }
    }
    Ok(out)
}

/// A reservation's period as a finalization records it: billed (its fee, or noted as not
/// billable), and the grant its unused capacity converted to, if any.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct BilledReservation {
    reservation: String,
    from: String,
    to: String,
    conversion: Option<String>,
}

/// The invoice a `finalize` transaction recorded, with its `ledger_head` and digest.
fn stored_invoice(t: &crate::ledger::StoredTransaction) -> Result<Invoice, BankError> {
    let mut inv: Invoice =
        serde_json::from_value(t.tx.memo["invoice"].clone()).map_err(|e| BankError::Corrupt {
            seq: t.seq,
            key: t.tx.key.clone(),
            reason: format!("the memo of a finalization is not an invoice: {e}"),
        })?;
    inv.ledger_head = Some(t.hash.clone());
    inv.seal()?;
    Ok(inv)
}

/// `(source sha256, window start)` pairs each earlier finalization of `tenant` billed, with
/// its key.
fn billed_before(t: &dyn LedgerTx, tenant: &str) -> Result<BilledBefore, BankError> {
    let mut out: BilledBefore = BTreeMap::new();
    for done in t.tenant_transactions("finalize", tenant)? {
        let pairs: Vec<(String, String)> =
            serde_json::from_value(done.tx.memo["billed"].clone()).unwrap_or_default();
        for (source, window) in pairs {
            out.entry(source)
                .or_default()
                .insert((window, done.tx.key.clone()));
        }
    }
    Ok(out)
}

#[allow(clippy::too_many_lines)]
fn finalize_tenant(
    t: &mut dyn LedgerTx,
    usage: &UsageReport,
    book: &PriceBook,
    plain: &Invoice,
    key: &str,
    commit: bool,
    default_period: bool,
) -> Result<(Invoice, Outcome), BankError> {
    let tenant = plain.tenant.as_str();
    let from = parse_time(&plain.period.from)?;
    let to = parse_time(&plain.period.to)?;
    let currency = book.currency();
    let scale = currency.scale();

    // 1. The tenant's usage in the period, less windows this report's sources were all billed
    //    for already (usage rows do not name their source: a window some of whose sources
    //    were billed before and others not cannot be split, and is refused).
    let before = billed_before(t, tenant)?;
    let mut left_out: BTreeSet<(String, String)> = BTreeSet::new();
    let mut mine = usage.clone();
    mine.usage.retain(|r| {
        r.tenant == tenant && parse_rfc3339(&r.window_start).is_ok_and(|w| from <= w && w < to)
    });
    let windows: BTreeSet<String> = mine.usage.iter().map(|r| r.window_start.clone()).collect();
    let mut drop_windows = BTreeSet::new();
    for w in &windows {
        let billed: Vec<&gpumeter_core::SourceEntry> = usage
            .sources
            .iter()
            .filter(|s| {
                before
                    .get(&s.sha256)
                    .is_some_and(|done| done.iter().any(|(bw, _)| bw == w))
            })
            .collect();
        if billed.is_empty() {
            continue;
        }
        if billed.len() < usage.sources.len() {
            let names: Vec<&str> = billed.iter().map(|s| s.name.as_str()).collect();
            return Err(refused(format!(
                "tenant `{tenant}`, window starting {w}: source(s) {} of this report were billed \
                 for it before and the others were not; usage rows do not say which source they \
                 came from, so finalize a report of the new sources alone",
                names.join(", ")
            )));
        }
        for s in &billed {
            left_out.insert((s.name.clone(), w.clone()));
        }
        drop_windows.insert(w.clone());
    }
    mine.usage
        .retain(|r| !drop_windows.contains(&r.window_start));
    let billed: BTreeSet<(String, String)> = mine
        .usage
        .iter()
        .flat_map(|r| {
            usage
                .sources
                .iter()
                .map(move |s| (s.sha256.clone(), r.window_start.clone()))
        })
        .collect();

    // 2. Rate with the carried-in fragments; with no usage left to bill, nothing is rated and
    //    the fragments stay as they are (a re-submission bills nothing, not even a minimum).
    let carried: CarriedFragments = if mine.usage.is_empty() {
        CarriedFragments::new()
    } else {
        fragment_balances(t, tenant)?
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
            .collect()
    };
    let rated = if mine.usage.is_empty() {
        None
    } else {
        rate(&mine, book, Some((from, to)), &carried)?
            .invoices
            .into_iter()
            .find(|i| i.tenant == tenant)
    };
    let mut inv = match rated {
        Some(i) => i,
        // Nothing left to rate: an invoice of no lines.
        None => {
            let mut i = plain.clone();
            i.lines.clear();
            i.unpriced.clear();
            i.extensions = Default::default();
            i
        }
    };
    for (name, window) in &left_out {
        inv.warnings.push(Warning::new(
            WarningCode::UsageBilledBefore,
            format!(
                "usage of source {name} in the window starting {window} was billed before and is \
             not billed again"
            ),
        ));
    }

    // 3. Reservations whose span holds the period: their fee is a line, once per period.
    let mut reserved = Vec::new();
    let mut clawbacks: Vec<(Reservation, Vec<String>)> = Vec::new();
    let mut unbillable: Vec<Reservation> = Vec::new();
    for r in reservations(t, tenant)? {
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
        let overlapping: Vec<(u64, u64, Option<String>)> =
            reservation_periods(t, &r.tenant, &r.reservation)?
                .into_iter()
                .filter(|&(a, b, _)| a < to && from < b)
                .collect();
        if let Some((a, b, _)) = overlapping.first() {
            inv.warnings.push(Warning::new(
                WarningCode::ReservationBilledBefore,
                format!(
                "reservation {} was billed for {} to {} already, which overlaps this period: its \
                 fee is not billed again",
                r.reservation,
                rfc3339(*a),
                rfc3339(*b)
            ),
            ));
            let grants: Vec<String> = overlapping.into_iter().filter_map(|(_, _, g)| g).collect();
            clawbacks.push((r, grants));
            continue;
        }
        if r.fee.normalize().scale() > scale {
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
            // Recorded as this period's, so later reports do not bill its tenant again.
            unbillable.push(r);
            continue;
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
            unbillable.push(r);
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
        let mut fee = r.fee;
        fee.rescale(scale);
        inv.lines.push(Line {
            kind: LineKind::Reservation,
            sku: Some(r.sku.clone()),
            meter: Some(r.meter),
            unit_price: Some(fee),
            pricing_unit: Some(r.unit.clone()),
            quantity_in_pricing_unit: Some(r.capacity.to_string()),
            ..Line::minimum(fee)
        });
        reserved.push(r);
    }
    let subtotal_minor = minor(inv.lines.iter().map(|l| l.amount), scale)?;

    // 4. Credits in force at the period's end burn against the lines they may pay for.
    let at_end = to.saturating_sub(1);
    let mut left: Vec<u128> = inv
        .lines
        .iter()
        .map(|l| minor(std::iter::once(l.amount), scale))
        .collect::<Result<_, _>>()?;
    let mut postings: Vec<Posting> = Vec::new();
    let mut applied: Vec<CreditApplied> = Vec::new();
    let mut covered_total: u128 = 0;
    for g in grants(t, Some(tenant))? {
        if g.remaining <= Decimal::ZERO {
            continue;
        }
        if !g.grant.in_force_at(at_end) {
            inv.warnings.push(Warning::new(
                WarningCode::GrantNotInForce,
                format!(
                "grant {} ({} credits left, usable from {} until {}) is not in force at the end \
                 of the period and pays nothing on this invoice",
                g.grant.grant,
                g.remaining,
                g.grant.effective,
                g.grant.expires.as_deref().unwrap_or("never")
            ),
            ));
            continue;
        }
        let (burned_credits, covered) = burn(&g, &inv.lines, &mut left, scale)?;
        if covered == 0 {
            continue;
        }
        let amount = minor_units_to_decimal(&covered.into(), &currency)
            .ok_or_else(|| refused("a credit amount exceeds a decimal"))?;
        let source = g.grant.kind.source_account();
        postings.push(Posting::new(
            accounts::credits(tenant, &g.grant.grant),
            CREDITS,
            -burned_credits,
        ));
        postings.push(Posting::new(source, CREDITS, burned_credits));
        postings.push(Posting::new(source, currency.code(), amount));
        applied.push(CreditApplied {
            grant: g.grant.grant.clone(),
            credits: burned_credits.normalize(),
            amount,
        });
        covered_total += covered;
    }
    let subtotal = minor_units_to_decimal(&subtotal_minor.into(), &currency)
        .ok_or_else(|| refused("the subtotal exceeds a decimal"))?;
    bounded(tenant, subtotal, &inv)?;
    let total_minor = subtotal_minor - covered_total;
    let total = minor_units_to_decimal(&total_minor.into(), &currency)
        .ok_or_else(|| refused("the total exceeds a decimal"))?;
    inv.subtotal = subtotal;
    inv.credits_applied = applied;
    inv.total = total;
    postings.push(Posting::new(
        accounts::receivable(tenant),
        currency.code(),
        total,
    ));
    postings.push(Posting::new(accounts::REVENUE, currency.code(), -subtotal));

    // 5. Fragments: draw the carried-in ones, deposit the new ones.
    let out = inv.extensions.fragments_out.clone();
    let mut delta: BTreeMap<(String, MeterKind), i128> = BTreeMap::new();
    for (k, q) in &carried {
        *delta.entry((k.sku.clone(), k.meter)).or_insert(0) -= to_i128(*q)?;
    }
    for f in &out {
        *delta.entry((f.sku.clone(), f.meter)).or_insert(0) += to_i128(f.quantity.0)?;
    }
    for ((sku, meter), d) in delta {
        if d == 0 {
            continue;
        }
        let amount = Decimal::try_from_i128_with_scale(d, 0)
            .map_err(|_| refused("a fragment exceeds a decimal"))?;
        postings.push(Posting::new(
            accounts::fragments(tenant, &sku, meter),
            meter.canonical_unit(),
            amount,
        ));
        postings.push(Posting::new(
            accounts::FRAGMENTS,
            meter.canonical_unit(),
            -amount,
        ));
    }

    // 6. Unused reserved capacity converts to credits (a grant) at the reservation's rate.
    let mut conversions = Vec::new();
    // Usage is consumed by the reservations of a SKU and meter in ledger order, so two
    // reservations never both count the same usage.
    let mut consumed: BTreeMap<(String, MeterKind), u128> = BTreeMap::new();
    for r in &reserved {
        let unit = PricingUnit::parse(&r.unit)
            .ok_or_else(|| refused(format!("reservation {}: unit {}", r.reservation, r.unit)))?;
        let capacity = unit.to_canonical(r.capacity).ok_or_else(|| {
            refused(format!(
                "reservation {}: capacity {} {} is not a whole number of canonical units",
                r.reservation, r.capacity, r.unit
            ))
        })?;
        let before = consumed.entry((r.sku.clone(), r.meter)).or_insert(0);
        let available = measured_in(&inv, r).saturating_sub(*before);
        let used = available.min(capacity);
        *before += used;
        let unused = capacity - used;
        if unused == 0 {
            continue;
        }
        let credits = credits_of(unused, &unit)?;
        if credits.is_zero() {
            continue;
        }
        let id = format!(
            "g-{}",
            &hex::encode(Sha256::digest(
                format!("{key}:{}", r.reservation).as_bytes()
            ))[..12]
        );
        let g = Grant {
            grant: id.clone(),
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
        };
        conversions.push(g);
    }

    // 6b. A reservation already billed for an overlapping period converted capacity that this
    //     usage (of the same period, in another report) consumed: take those credits back
    //     from its conversion grants, in the tenant's favour (rounded down).
    let mut clawed = Vec::new();
    for (r, conversion_grants) in &clawbacks {
        let Some(unit) = PricingUnit::parse(&r.unit) else {
            continue;
        };
        let mut owed = credits_of(measured_in(&inv, r), &unit)?;
        for g in grants(t, Some(tenant))? {
            if owed.is_zero() {
                break;
            }
            if !conversion_grants.contains(&g.grant.grant) || g.remaining <= Decimal::ZERO {
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
        if !owed.is_zero() && !conversion_grants.is_empty() {
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

    // 7. One transaction for the invoice; conversions as grants after it.
    let memo_invoice = {
        let mut i = inv.clone();
        i.ledger_head = None;
        i.sha256 = String::new();
        i
    };
    let tx = NewTransaction {
        key: format!("finalize:{key}"),
        kind: "finalize".into(),
        at: rfc3339(to),
        tenant: Some(tenant.to_string()),
        postings,
        memo: serde_json::json!({
            "invoice": memo_invoice,
            "billed": billed,
            "reservations": reserved
                .iter()
                .chain(unbillable.iter())
                .map(|r| BilledReservation {
                    reservation: r.reservation.clone(),
                    from: rfc3339(from),
                    to: rfc3339(to),
                    conversion: conversions
                        .iter()
                        .find(|g| g.reservation.as_deref() == Some(r.reservation.as_str()))
                        .map(|g| g.grant.clone()),
                })
                .collect::<Vec<_>>(),
            "clawed_back": clawed,
        }),
    };
    let stored = t.append(tx)?;
    if let Appended::AlreadyApplied(earlier) = &stored {
        // Another finalizer applied this key first (the tenant's lock keeps it from happening
        // on the shipped ledgers): its invoice, and nothing of this one.
        return Ok((stored_invoice(earlier)?, Outcome::AlreadyFinalized));
    }
    for g in conversions {
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
    if commit {
        Ok((stored_invoice(stored.stored())?, Outcome::Applied))
    } else {
        inv.ledger_head = None;
        inv.seal()?;
        Ok((inv, Outcome::Applied))
    }
}

/// The usage of a reservation's SKU and meter measured in this invoice's period, canonical
/// units: its usage lines' quantities less the carried-in fragment (measured in an earlier
/// period).
fn measured_in(inv: &Invoice, r: &Reservation) -> u128 {
    let lines: u128 = inv
        .lines
        .iter()
        .filter(|l| {
            l.kind == LineKind::Usage
                && l.sku.as_deref() == Some(r.sku.as_str())
                && l.meter == Some(r.meter)
        })
        .map(|l| l.quantity.map_or(0, |q| q.0))
        .sum();
    let carried_in: u128 = inv
        .extensions
        .fragments_in
        .iter()
        .filter(|f| f.sku == r.sku && f.meter == r.meter)
        .map(|f| f.quantity.0)
        .sum();
    lines.saturating_sub(carried_in)
}

/// Σ amounts in minor units of a currency of `scale` decimals.
fn minor(amounts: impl Iterator<Item = Decimal>, scale: u32) -> Result<u128, BankError> {
    let mut sum: u128 = 0;
    for a in amounts {
        let mut a = a;
        a.rescale(scale);
        let m = u128::try_from(a.mantissa()).map_err(|_| refused("a negative amount"))?;
        sum = sum
            .checked_add(m)
            .ok_or_else(|| refused("amounts exceed 2^128 minor units"))?;
    }
    Ok(sum)
}

/// Burns grant `g` against the lines it may pay for, in line order: returns the credits
/// burned and the minor units covered, and lowers `left` (minor units left per line).
fn burn(
    g: &GrantBalance,
    lines: &[Line],
    left: &mut [u128],
    scale: u32,
) -> Result<(Decimal, u128), BankError> {
    let mut remaining = g.remaining;
    let mut burned = Decimal::ZERO;
    let mut covered_total = 0u128;
    for (l, rest) in lines.iter().zip(left.iter_mut()) {
        if *rest == 0 || !g.grant.covers(l.sku.as_deref(), l.meter) {
            continue;
        }
        // The credits that pay the line, and the whole minor units they cover: never more
        // than one minor unit beyond their value, whatever the rate (issue 30 item 6).
        let (credits, covered) = crate::grants::pay(*rest, remaining, g.grant.rate, scale)
            .ok_or_else(|| {
                refused(format!(
                    "grant {}: {} minor units at a rate of {} cannot be expressed in credits",
                    g.grant.grant, *rest, g.grant.rate
                ))
            })?;
        if covered == 0 {
            // Worth less than one credit at 9 decimals: a burn of nothing pays nothing.
            continue;
        }
        remaining -= credits;
        burned += credits;
        *rest -= covered;
        covered_total += covered;
    }
    Ok((burned, covered_total))
}
