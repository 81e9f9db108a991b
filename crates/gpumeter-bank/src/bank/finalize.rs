//! Finalization and preview of invoices against the bank (`gpumeter invoice finalize`,
//! `gpumeter preview --bank`).

use super::close::{paid_packages, PaidPackages};
use super::*;
use gpumeter_rating::Fragment;

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

/// How [`finalize_with`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FinalizeOptions {
    /// Commit (`invoice finalize`), or roll everything back (a preview, `preview --bank`).
    pub commit: bool,
    /// The caller's current time, ns since the Unix epoch: a committed finalization of a
    /// period that ends after it is refused ([`FinalizeRefusal::OpenPeriod`]: usage of the
    /// period may still arrive). `None` checks nothing (the bank reads no clock of its own;
    /// `gpumeter::bill` passes the system's, and `--allow-open-period` none).
    pub now: Option<u64>,
}

/// [`finalize_with`] without a clock: `commit` and no check of an open period.
///
/// # Errors
/// As [`finalize_with`].
pub fn finalize<L: Ledger>(
    ledger: &mut L,
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<(u64, u64)>,
    commit: bool,
) -> Result<Finalized, BankError> {
    finalize_with(
        ledger,
        usage,
        book,
        period,
        FinalizeOptions { commit, now: None },
    )
}

/// Rates `usage` with `book` for `period` against the bank, applying each tenant's carried
/// fragments, reservations and credits: preview and finalization are this one
/// function; `options.commit = false` (a preview) rolls everything back.
///
/// Per tenant with usage in the period (and per tenant owing a reservation's fee for it): if
/// its finalization key ([`finalization_key`]) is in the ledger, the invoice finalized then is
/// returned unchanged ([`Outcome::AlreadyFinalized`]). Otherwise, inside one ledger
/// transaction for all tenants:
/// - **Sources billed once.** The report's sources are held (a lock per source), and the
///   tenant's rows claim, for every source of the report, the time ranges of every device of
///   the rows; a claim overlapping one of any earlier finalization (any tenant, window size or
///   period) is refused ([`FinalizeRefusal::SourceBilled`]). A committed finalization of a
///   report without sources is refused ([`FinalizeRefusal::NoSources`]); a preview of it runs.
/// - **A period is one unit.** A period that overlaps a finalized period of the tenant without
///   being equal is refused ([`FinalizeRefusal::PeriodOverlap`]). The tenant's first
///   finalization of a period rates its usage with the carried-in fragments (the tenant's
///   whole fragment balance, [`gpumeter_rating::rate`]). A later finalization of a
///   finalized period is a *supplement*: the period's cumulative usage (the rows every earlier
///   finalization of the period kept in its memo, and this report's) is rated with the first
///   invoice's price book ([`FinalizeRefusal::OtherBook`]) and the period's carried-in
///   fragments (drawn once, by its first finalization with rows: a fee-only first invoice
///   leaves them to the supplement that brings the first rows), and the
///   supplement bills per line the cumulative amount less what the period's invoices billed
///   ([`gpumeter_rating::PeriodLines`]); its `extensions` name its kind (`supplement`, or
///   `credit_note` when its subtotal is negative: no credits burn; it lowers what the period
///   left to pay in money, then gives back the period's credits, latest burn first, as
///   negative `credits_applied` entries, and the rest lowers the receivable)
///   and the earlier invoices; its fragments move by the change of the period's fragment.
/// - Each reservation whose span holds the period adds its fee as a `reservation` line, once
///   per period; credits in force at the period's end burn against the lines they may pay for,
///   in burn order, whole minor units at a time, the credits rounded down (the tenant's
///   favour); the fragments move; unused capacity of each reservation billed here converts to
///   a grant at its rate, and a supplement's usage takes back what it consumed of the period's
///   conversion.
/// - **As-of balances.** The fragment postings are booked at the period's end, or, when the
///   tenant's fragment accounts have postings at a later business time (a later period
///   finalized first, a close), in a `carry` transaction at the latest of them, so no fragment
///   balance is negative as of any instant; postings that would still make one negative as of
///   some instant, and lower than it was without them, are refused
///   ([`FinalizeRefusal::NegativeBalance`]; a negative as-of history already in a ledger
///   written before issue 30 is not refused on).
/// - One `finalize` transaction records it all, its memo holding the invoice, the claims,
///   the rows billed and the last package span of the period's cumulative rating per SKU and
///   meter (`paid_packages`, what [`crate::close`] reads). The invoice's `ledger_head` is
///   that transaction's hash when committed.
///
/// # Errors
/// [`BankError::Rating`] when rating fails, [`BankError::Finalize`] for a refusal above,
/// [`BankError::Storage`], [`BankError::Refused`] for amounts beyond a decimal.
pub fn finalize_with<L: Ledger>(
    ledger: &mut L,
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<(u64, u64)>,
    options: FinalizeOptions,
) -> Result<Finalized, BankError> {
    let commit = options.commit;
    // The period and the tenants come from rating the report once, bank-free.
    let plain = rate(usage, book, period, &CarriedFragments::new())?;
    if let (true, Some(now)) = (commit, options.now) {
        let rated = plain
            .invoices
            .first()
            .map(|i| Ok::<_, BankError>((parse_time(&i.period.from)?, parse_time(&i.period.to)?)))
            .transpose()?;
        if let Some((from, to)) = period.or(rated) {
            if to > now {
                return Err(FinalizeRefusal::OpenPeriod {
                    from: rfc3339(from),
                    to: rfc3339(to),
                    now: rfc3339(now),
                }
                .into());
            }
        }
    }
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
        // Each tenant's key, and the invoice of those finalized before.
        let mut work: Vec<(&Invoice, String, Option<Invoice>)> = Vec::with_capacity(tenants.len());
        for inv in &tenants {
            let key = finalization_key(
                &inv.tenant,
                (&inv.period.from, &inv.period.to),
                &inv.usage_sha256,
                &inv.price_book.sha256,
            )?;
            let done = t
                .find(&format!("finalize:{key}"))?
                .map(|d| stored_invoice(&d))
                .transpose()?;
            work.push((inv, key, done));
        }
        // What the sources billed before this call, read once under the sources' locks
        // (the tenants of one report are one finalization: not checked against each other).
        let billing_rows = work
            .iter()
            .any(|(inv, _, done)| done.is_none() && !rows_of(usage, inv).is_empty());
        if billing_rows && commit && usage.sources.is_empty() {
            return Err(FinalizeRefusal::NoSources.into());
        }
        let billed = if billing_rows && !usage.sources.is_empty() {
            lock_sources(t, usage)?;
            Some(billed_sources(t)?)
        } else {
            None
        };
        let call = Call {
            usage,
            book,
            commit,
            default_period: period.is_none(),
            billed: billed.as_ref(),
            now: options.now,
        };
        let mut invoices = Vec::with_capacity(work.len());
        let mut outcomes = Vec::with_capacity(work.len());
        for (inv, key, done) in work {
            if let Some(done) = done {
                invoices.push(done);
                outcomes.push(Outcome::AlreadyFinalized);
                continue;
            }
            let (inv, outcome) = finalize_tenant(t, &call, inv, &key)?;
            invoices.push(inv);
            outcomes.push(outcome);
        }
        // `idle` is never finalized: rating lists it apart, and the document keeps the list.
        let mut document = InvoiceDocument::new(invoices);
        document.extensions = plain.extensions.clone();
        Ok(Finalized { document, outcomes })
    })
}

/// What every tenant of one finalization shares.
struct Call<'a> {
    usage: &'a UsageReport,
    book: &'a PriceBook,
    commit: bool,
    /// No period was given: the usage's span.
    default_period: bool,
    /// The ranges the report's sources billed before this call (`None`: none to check).
    billed: Option<&'a BilledSources>,
    /// The caller's clock ([`FinalizeOptions::now`]): a grant expired by then takes back no
    /// credits from a credit note.
    now: Option<u64>,
}

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

/// The rows of `inv`'s tenant in its period.
fn rows_of<'u>(usage: &'u UsageReport, inv: &Invoice) -> Vec<&'u UsageRow> {
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

/// A tenant's invoice rated for this finalization, before the bank's lines and credits.
struct Rated {
    /// The invoice: a first invoice as rating made it, or a supplement's changes.
    invoice: Invoice,
    /// The fragments this finalization draws (−) and deposits (+), per (SKU, meter).
    fragments: BTreeMap<(String, MeterKind), i128>,
    measured: Measured,
    /// The last package span of the period's cumulative rating, per (SKU, meter) (what a
    /// close reads of the packages paid for).
    paid: Vec<PaidPackages>,
}

fn finalize_tenant(
    t: &mut dyn LedgerTx,
    call: &Call<'_>,
    plain: &Invoice,
    key: &str,
) -> Result<(Invoice, Outcome), BankError> {
    let tenant = plain.tenant.as_str();
    let from = parse_time(&plain.period.from)?;
    let to = parse_time(&plain.period.to)?;
    let scale = call.book.currency().scale();

    // 1. The tenant's rows in the period, and what they claim of the report's sources.
    let rows = rows_of(call.usage, plain);
    let claims = claims_of(call.usage, &rows)?;
    if let Some(billed) = call.billed {
        billed.check(call.usage, &claims)?;
    }

    // 2. Rated as the period's first invoice, or as a supplement of it.
    let placed = place(tenant, (from, to), finalizations(t, tenant)?)?;
    let period_invoices: Vec<Invoice> = match &placed {
        Place::New => vec![],
        Place::Supplement(earlier) => earlier.iter().map(|e| e.invoice.clone()).collect(),
    };
    let Rated {
        invoice: mut inv,
        fragments,
        measured,
        paid,
    } = match placed {
        Place::New => rate_first(t, call, plain, &rows)?,
        Place::Supplement(earlier) => rate_supplement(t, call, plain, &rows, &earlier)?,
    };

    // 3. Reservations whose span holds the period: their fee is a line, once per period.
    let held = reservation_lines(t, (call.book, call.default_period), &mut inv, (from, to))?;
    if call.default_period {
        warn_period_from_usage(&mut inv);
    }
    let subtotal_minor = signed_minor(inv.lines.iter().map(|l| l.amount), scale)?;
    if inv.extensions.supplement_of.is_some() {
        inv.extensions.kind = Some(if subtotal_minor < 0 {
            InvoiceKind::CreditNote
        } else {
            InvoiceKind::Supplement
        });
    }

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

    // 5. Fragments: draw the carried-in ones, deposit the new ones (a supplement: the change
    //    of the period's fragment); at the period's end, or in a `carry` transaction at the
    //    latest business time of the accounts' postings when that is later (as-of balances
    //    never go negative).
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
    let carry = match carry_at {
        None => {
            postings.append(&mut moved);
            None
        }
        Some(at) => Some((at, moved)),
    };

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
            "claims": claims,
            "usage": StoredUsage::of(call.usage, &rows),
            "reservations": held
                .iter()
                .filter(|h| h.billed_now || h.unbillable)
                .map(|h| BilledReservation {
                    reservation: h.reservation.reservation.clone(),
                    from: rfc3339(from),
                    to: rfc3339(to),
                    conversion: conversions
                        .iter()
                        .find(|g| g.reservation.as_deref() == Some(h.reservation.reservation.as_str()))
                        .map(|g| g.grant.clone()),
                    unbillable: h.unbillable,
                })
                .collect::<Vec<_>>(),
            "clawed_back": clawed,
            "paid_packages": paid,
        }),
    };
    let stored = t.append(tx)?;
    if let Appended::AlreadyApplied(earlier) = &stored {
        // Another finalizer applied this key first (the tenant's lock keeps it from happening
        // on the shipped ledgers): its invoice, and nothing of this one.
        return Ok((stored_invoice(earlier)?, Outcome::AlreadyFinalized));
    }
    if let Some((at, moved)) = carry {
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
    if call.commit {
        Ok((stored_invoice(stored.stored())?, Outcome::Applied))
    } else {
        inv.ledger_head = None;
        inv.seal()?;
        Ok((inv, Outcome::Applied))
    }
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
fn rate_first(
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
fn rate_supplement(
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

    // The fragments move by the change of the period's fragment out (the last invoice's is
    // what the period carried out so far), and, when this supplement draws the period's
    // carried-in fragments, by those.
    let mut fragments: BTreeMap<(String, MeterKind), i128> = BTreeMap::new();
    if draws {
        for (k, q) in &carried {
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
