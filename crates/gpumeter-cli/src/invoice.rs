//! `preview` and `invoice finalize`: the usage of the inputs rated with a price book, with or
//! against the credit bank, and the invoices' file renderings.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::json::to_json;
use crate::usage::UsageArgs;
use crate::{bank, output, say, text_out, usage_error, Failure};

/// `preview`'s file renderings, written besides the text or JSON on standard output.
#[derive(Debug, Args)]
pub(crate) struct RenderArgs {
    /// Also write the invoice lines as CSV (RFC 4180, one row per line of every invoice).
    /// Not `-`: standard output carries the invoices (exit 2; `./-` is a file so named).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Also write the invoices as one self-contained HTML page with a utilization chart per
    /// device (inline CSS and SVG, no script, no external resource). Not `-`, as --csv.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
}

impl RenderArgs {
    /// `files` with the renderings as outputs.
    fn files(&self, files: output::Files) -> output::Files {
        files
            .output("--csv", self.csv.as_deref())
            .output("--html", self.html.as_deref())
    }

    /// Writes the files asked for, each whole or not at all ([`output::write_atomically`]); a
    /// file that cannot be written is exit 1 naming its path.
    fn write(
        &self,
        invoices: &gpumeter::InvoiceDocument,
        report: &gpumeter::core::UsageReport,
    ) -> Result<(), Failure> {
        use gpumeter::rating::render;
        if let Some(path) = &self.csv {
            let text = render::invoice_csv(invoices).map_err(|e| Failure {
                code: 1,
                message: e.to_string(),
            })?;
            write_file(path, &text)?;
        }
        if let Some(path) = &self.html {
            write_file(path, &render::invoice_html(invoices, report))?;
        }
        Ok(())
    }
}

fn write_file(path: &std::path::Path, text: &str) -> Result<(), Failure> {
    output::write_atomically(path, |w| {
        w.write_all(text.as_bytes())
            .map_err(output::cannot_write(path))
    })
}

#[derive(Debug, Subcommand)]
pub(crate) enum InvoiceCommand {
    /// Rate the inputs against the bank and commit: credits burn, fragments carry, each
    /// invoice is applied once (a retry changes nothing and says so).
    ///
    /// Example: gpumeter invoice finalize trace.json.gz --prices pricebook.toml --bank bank.db
    /// --from 2026-12-01T00:00:00Z --to 2027-01-01T00:00:00Z
    Finalize {
        #[command(flatten)]
        usage: UsageArgs,
        /// Price book (TOML, gpumeter.pricebook/v1).
        #[arg(long, value_name = "BOOK.toml")]
        prices: PathBuf,
        /// Credit bank: the path of an SQLite file or a PostgreSQL URL
        /// (postgres://billing@db.example/ledger?sslmode=require); created when there is none.
        #[arg(long, value_name = "LOCATION", value_hint = clap::ValueHint::AnyPath)]
        bank: String,
        /// Period start, RFC 3339 (inclusive); needs --to. Without both: from the usage's first
        /// window.
        #[arg(long, value_name = "T", requires = "to")]
        from: Option<String>,
        /// Period end, RFC 3339 (exclusive); needs --from. Without both: to the end of the
        /// usage's last window.
        #[arg(long, value_name = "T", requires = "from")]
        to: Option<String>,
        /// Write the invoices as JSON instead of a text table.
        #[arg(long)]
        json: bool,
        /// Finalize an incomplete usage report too (a snapshot, or a .gmr recording without
        /// its end frame, whose last windows may still grow): each invoice then carries the
        /// warning incomplete_usage. Without it such a report is refused (exit 1).
        #[arg(long)]
        allow_incomplete: bool,
        /// Finalize a period that has not ended yet (by this machine's clock); without it such
        /// a period is refused (exit 1), since its usage may still arrive.
        #[arg(long)]
        allow_open_period: bool,
    },
}

/// Says on standard error that `idle`'s usage is listed apart and not invoiced (the
/// document's `extensions.idle` warning), so an invoice run over idle rows is not silent.
fn say_idle(doc: &gpumeter::InvoiceDocument) {
    for w in doc.extensions.idle.iter().flat_map(|i| &i.warnings) {
        say(&format!("notice: {w}"));
    }
}

/// The period (`None`: the usage's span), the price book and the usage report.
type RatingInputs = (
    Option<gpumeter::Period>,
    gpumeter::PriceBook,
    gpumeter::UsageReport,
);

/// What `preview` and `invoice finalize` rate: the period, the price book and the usage
/// report. The command line is checked whole before any file is read: a bad one is exit 2
/// whatever the files hold.
fn rating_inputs(
    usage: &UsageArgs,
    prices: &std::path::Path,
    from: Option<String>,
    to: Option<String>,
) -> Result<RatingInputs, Failure> {
    let period = period(from, to)?;
    let options = usage.options()?;
    let book = gpumeter::load_price_book(prices)?;
    let report = usage.report(&options)?;
    Ok((period, book, report))
}

/// `--from`/`--to` as a period ([`gpumeter::Period::parse`]), both or neither (clap requires
/// the pair); a bad time or an empty period is a bad command line.
fn period(from: Option<String>, to: Option<String>) -> Result<Option<gpumeter::Period>, Failure> {
    use gpumeter::{PeriodBound, PeriodError};
    let (Some(f), Some(t)) = (from, to) else {
        return Ok(None);
    };
    gpumeter::Period::parse(&f, &t)
        .map(Some)
        .map_err(|e| match e {
            PeriodError::Unparsable {
                bound: PeriodBound::Start,
                reason,
                ..
            } => usage_error(format!("--from: {reason}")),
            PeriodError::Unparsable { reason, .. } => usage_error(format!("--to: {reason}")),
            PeriodError::EndNotAfterStart { .. } => usage_error("--to must be after --from".into()),
            e => usage_error(format!("--from/--to: {e}")),
        })
}

/// A rating failure: a given period off the window edges is the command line's fault (exit
/// 2); a default period that cannot be formed, and everything else, is the files' (exit 1).
fn period_failure(e: gpumeter::Error, period: Option<gpumeter::Period>) -> Failure {
    match e {
        gpumeter::Error::Rating(gpumeter::RatingError::Period { .. }) if period.is_some() => {
            usage_error(format!("--from/--to: {e}"))
        }
        e => Failure::from(e),
    }
}

/// `gpumeter preview`: the invoices of the inputs' usage, rated with the price book (and
/// against the bank, read only, with `--bank`), as text or JSON; the renderings to their files.
pub(crate) fn preview(
    usage: &UsageArgs,
    prices: &std::path::Path,
    from: Option<String>,
    to: Option<String>,
    json: bool,
    render: &RenderArgs,
    bank: Option<String>,
) -> Result<String, Failure> {
    render
        .files(usage.files(output::Files::new()))
        .input("--prices", Some(prices))
        .bank(bank.as_deref(), false)
        .check()?;
    let (period, book, report) = rating_inputs(usage, prices, from, to)?;
    let invoices = match bank {
        None => gpumeter::preview(&report, &book, period),
        Some(location) => {
            let mut ledger = bank::open_read_only(&location)?;
            gpumeter::bill(&mut ledger, &report, &book, period, false).map(|f| f.document)
        }
    }
    .map_err(|e| period_failure(e, period))?;
    say_idle(&invoices);
    if invoices.invoices.is_empty() {
        // Nothing to bill: say why on stderr, so loss or an empty period is not silent.
        say("notice: no usage to invoice in the period");
        for w in &report.warnings {
            say(&format!("notice: usage report: {w}"));
        }
    }
    render.write(&invoices, &report)?;
    if json {
        to_json(&invoices)
    } else {
        Ok(text_out(&gpumeter::render::invoice_text(&invoices)))
    }
}

/// `gpumeter invoice …`.
pub(crate) fn invoice(command: InvoiceCommand) -> Result<String, Failure> {
    let InvoiceCommand::Finalize {
        usage,
        prices,
        bank,
        from,
        to,
        json,
        allow_incomplete,
        allow_open_period,
    } = command;
    usage
        .files(output::Files::new())
        .input("--prices", Some(&prices))
        .bank(Some(&bank), true)
        .check()?;
    let (period, book, report) = rating_inputs(&usage, &prices, from, to)?;
    let mut ledger = bank::open(&bank)?;
    let options = gpumeter::BillOptions::new(true)
        .allow_incomplete(allow_incomplete)
        .allow_open_period(allow_open_period);
    let done = gpumeter::bill_with(&mut ledger, &report, &book, period, &options)
        .map_err(|e| period_failure(e, period))?;
    if let Some(why) = report.incomplete_because() {
        say(&format!(
            "warning: the usage report is incomplete ({why}): these invoices bill its \
             last windows as they are now (--allow-incomplete)"
        ));
    }
    say_idle(&done.document);
    if done.document.invoices.is_empty() {
        say("notice: no usage to invoice in the period");
    }
    say_finalized_before(&done);
    if json {
        to_json(&done.document)
    } else {
        Ok(text_out(&gpumeter::render::invoice_text(&done.document)))
    }
}

/// Says on standard error which invoices were finalized before (nothing changed) and which
/// are supplements to a period invoiced before.
fn say_finalized_before(done: &gpumeter::bank::Finalized) {
    for (inv, outcome) in done.document.invoices.iter().zip(&done.outcomes) {
        if *outcome == gpumeter::bank::Outcome::AlreadyFinalized {
            say(&format!(
                "notice: the invoice of tenant {} for {} to {} was finalized before \
                 (same tenant, period, usage and price book): nothing changed",
                inv.tenant, inv.period.from, inv.period.to
            ));
        } else if let Some(kind) = inv.extensions.kind {
            say(&format!(
                "notice: tenant {}'s period {} to {} was invoiced before: this is a {} \
                 of subtotal {} {}, billing what this usage adds to the period",
                inv.tenant,
                inv.period.from,
                inv.period.to,
                kind.label(),
                inv.subtotal,
                inv.currency
            ));
        }
    }
}
