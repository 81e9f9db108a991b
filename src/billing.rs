//! Usage into invoices: rating with a price book ([`preview`]) and, with the Cargo feature
//! `bank`, against the credit bank ([`bill`], [`bill_with`]).

use std::path::Path;

use gpumeter_core::{Period, UsageReport};
use gpumeter_rating::{InvoiceDocument, PriceBook};

use crate::usage_report::check_usage_report;
use crate::Error;

/// Rates a usage report with a price book: one invoice per tenant with usage in the period
/// (`None` = the usage's span rounded out to whole windows). The report is checked first as
/// every reader checks it ([`check_usage_report`]). An incomplete report
/// ([`UsageReport::is_complete`]) is rated, and each invoice says so in a warning
/// (`incomplete_usage`).
///
/// # Errors
/// [`Error::Check`] for a report that fails the checks; [`Error::Rating`] when the book
/// cannot rate this usage (e.g. a given period whose ends are not edges of the report's
/// windows, a rate's validity edge inside a window, an amount beyond `Decimal`'s range).
pub fn preview(
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<Period>,
) -> Result<InvoiceDocument, Error> {
    check_usage_report(usage, "the usage report")?;
    Ok(gpumeter_rating::rate(
        usage,
        book,
        period.map(Period::as_ns),
        &gpumeter_rating::CarriedFragments::new(),
    )?)
}

/// Rates a usage report with a price book against the credit bank: preview and
/// finalization are this one function ([`gpumeter_bank::finalize_with`]). With `commit = false`
/// (`preview --bank`) everything is rolled back and the invoices show the credits that would
/// apply; with `commit = true` (`invoice finalize`) each invoice is applied once, keyed by
/// (tenant, period, usage SHA-256, price-book SHA-256), and a retry changes nothing. A later
/// report of a finalized (tenant, period) is a supplement; a report without sources, usage
/// billed before and a period not yet ended by the system clock are refused when committing
/// ([`bill_with`] takes the clock, or none, from the caller).
///
/// The report is checked first as every reader checks it ([`check_usage_report`]), and a
/// finalization (`commit = true`) of an incomplete report is refused ([`Error::Incomplete`]);
/// [`bill_with`] can allow it.
///
/// # Errors
/// [`Error::Check`] for a report that fails the checks; [`Error::Incomplete`];
/// [`Error::Rating`] when the usage cannot be rated; [`Error::Bank`] when the ledger cannot be
/// read or written, or refuses the finalization ([`gpumeter_bank::BankError::Finalize`]).
#[cfg(feature = "bank")]
pub fn bill<L: gpumeter_bank::Ledger>(
    ledger: &mut L,
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<Period>,
    commit: bool,
) -> Result<gpumeter_bank::Finalized, Error> {
    bill_with(ledger, usage, book, period, &BillOptions::new(commit))
}

/// How `bill_with` bills (feature `bank`; a plain value, so it is there without it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BillOptions {
    /// Commit (`invoice finalize`) or roll back (`preview --bank`), as `bill`'s `commit`.
    pub commit: bool,
    /// Finalize an incomplete report too (`--allow-incomplete`): each invoice then carries
    /// the warning `incomplete_usage`. Without it, finalizing one is [`Error::Incomplete`]
    /// (a snapshot's half-window would be billed as the whole).
    pub allow_incomplete: bool,
    /// The current time (ns since the Unix epoch) a committed period must have ended by, or
    /// `None` to finalize a period that has not ended (`invoice finalize
    /// --allow-open-period`). [`BillOptions::new`] reads the system clock.
    pub now: Option<u64>,
}

impl BillOptions {
    /// Options that commit (`commit = true`) or roll back, refusing incomplete reports and
    /// periods that have not ended by the system clock.
    pub fn new(commit: bool) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        BillOptions {
            commit,
            allow_incomplete: false,
            now: Some(now),
        }
    }

    /// The same options, allowing (or not) an incomplete report.
    pub fn allow_incomplete(self, allow: bool) -> Self {
        BillOptions {
            allow_incomplete: allow,
            ..self
        }
    }

    /// The same options, allowing (or not) a period that has not ended: allowing forgets the
    /// clock; not allowing reads the system clock again.
    pub fn allow_open_period(self, allow: bool) -> Self {
        if allow {
            BillOptions { now: None, ..self }
        } else {
            BillOptions {
                now: BillOptions::new(self.commit).now,
                ..self
            }
        }
    }

    /// The same options with `now` (ns since the Unix epoch) as the current time.
    pub fn at(self, now_ns: u64) -> Self {
        BillOptions {
            now: Some(now_ns),
            ..self
        }
    }
}

/// [`bill`] with options ([`BillOptions`]): whether to commit, whether to finalize an
/// incomplete report, and the clock a committed period must have ended by (none: a period
/// not yet ended is finalized too).
///
/// # Errors
/// As [`bill`].
#[cfg(feature = "bank")]
pub fn bill_with<L: gpumeter_bank::Ledger>(
    ledger: &mut L,
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<Period>,
    options: &BillOptions,
) -> Result<gpumeter_bank::Finalized, Error> {
    let commit = options.commit;
    check_usage_report(usage, "the usage report")?;
    if let Some(why) = usage.incomplete_because() {
        if commit && !options.allow_incomplete {
            return Err(Error::Incomplete { why });
        }
    }
    Ok(gpumeter_bank::finalize_with(
        ledger,
        usage,
        book,
        period.map(Period::as_ns),
        gpumeter_bank::FinalizeOptions {
            commit,
            now: options.now,
        },
    )?)
}

/// Reads a price book from a file.
///
/// # Errors
/// [`Error::PriceBook`] naming the file, table and field.
pub fn load_price_book(path: &Path) -> Result<PriceBook, Error> {
    Ok(PriceBook::from_path(path)?)
}
