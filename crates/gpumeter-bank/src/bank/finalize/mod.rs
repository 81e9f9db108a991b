//! Finalization and preview of invoices against the bank (`gpumeter invoice finalize`,
//! `gpumeter preview --bank`).
//!
//! [`finalize_with`] holds the tenants to bill and runs, per tenant, [`tenant`]'s steps:
//! which tenants ([`tenants`]), their invoice rated as the period's first or a supplement
//! ([`rate`]), then the bank's lines, credits, fragments and conversions.

mod rate;
mod tenant;
mod tenants;

use super::*;
use tenant::finalize_tenant;
use tenants::{hold_tenants, rows_of};

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
        refuse_open_period(&plain, period, now)?;
    }
    ledger.atomically(commit, |t| {
        check_currency(t, book)?;
        let tenants = hold_tenants(t, usage, book, &plain, period)?;
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

/// Refuses a committed finalization of a period (`period`, or the one rating found in the
/// report) that ends after `now` ([`FinalizeRefusal::OpenPeriod`]).
fn refuse_open_period(
    plain: &InvoiceDocument,
    period: Option<(u64, u64)>,
    now: u64,
) -> Result<(), BankError> {
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
    Ok(())
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
