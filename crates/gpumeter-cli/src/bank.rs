//! `gpumeter bank …`: the credit bank's commands (docs/BANK.md).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use gpumeter::bank::{AnyLedger, GrantKind, Ledger};
use gpumeter::core::time::{parse_rfc3339, rfc3339};
use gpumeter::core::{MeterKind, TenantName};
use rust_decimal::Decimal;

use crate::json::to_json;
use crate::{text_out, usage_error, Failure};

/// The bank's subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum BankCommand {
    /// Grant credits to a tenant.
    ///
    /// Example: gpumeter bank grant --bank bank.db --tenant acme --credits 500 --rate 0.01
    /// --priority 1 --expires 2027-06-01T00:00:00Z --kind promotional --key promo-2026-12
    Grant(GrantArgs),
    /// Reserve capacity for a tenant: a fee per period, unused capacity converts to credits.
    ///
    /// Example: gpumeter bank reserve --bank bank.db --tenant acme --sku h100-sxm --meter sm_ns
    /// --capacity 500 --unit SM·hour --fee 9.00 --rate 0.02 --from 2026-12-01T00:00:00Z
    /// --to 2027-12-01T00:00:00Z --credit-expiry 2028-01-01T00:00:00Z
    Reserve(ReserveArgs),
    /// A tenant's credits, fragments and receivable at an instant.
    ///
    /// Example: gpumeter bank balance --bank bank.db --tenant acme --json
    Balance {
        #[command(flatten)]
        bank: BankFile,
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The balance as of this instant, RFC 3339 (default: now): transactions whose
        /// business time (a grant's recording, a period's end, an expiry) is at most T.
        #[arg(long, value_name = "T")]
        at: Option<String>,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The ledger's transactions, oldest first.
    ///
    /// Example: gpumeter bank history --bank bank.db --tenant acme
    History {
        #[command(flatten)]
        bank: BankFile,
        /// Only this tenant's transactions.
        #[arg(long)]
        tenant: Option<String>,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Move the credits of grants expired at T to breakage.
    ///
    /// Example: gpumeter bank expire --bank bank.db --at 2027-01-15T00:00:00Z
    Expire {
        #[command(flatten)]
        bank: BankFile,
        /// The instant, RFC 3339.
        #[arg(long, value_name = "T")]
        at: String,
    },
    /// Close a tenant's contract: bill its remaining fragments at the last unit price.
    ///
    /// Example: gpumeter bank close --bank bank.db --tenant acme --prices pricebook.toml
    Close {
        #[command(flatten)]
        bank: BankFile,
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// Price book (TOML).
        #[arg(long, value_name = "BOOK.toml")]
        prices: PathBuf,
    },
    /// Walk the hash chain and the invariants; exit 1 naming the first bad transaction.
    ///
    /// Example: gpumeter bank verify --bank bank.db, or of a bank in PostgreSQL:
    /// gpumeter bank verify --bank 'postgres://billing@db.example/ledger?sslmode=require'
    Verify {
        #[command(flatten)]
        bank: BankFile,
    },
    /// Write every transaction as JSON Lines (one per line, oldest first), to move the bank to
    /// another backend with `bank import`.
    ///
    /// Example: gpumeter bank export --bank bank.db -o bank.jsonl
    Export(crate::bank_io::ExportArgs),
    /// Fill an empty bank with the transactions of a `bank export`, each checked against the
    /// hash chain it states; nothing is imported when a line is refused.
    ///
    /// Example: gpumeter bank import --bank 'postgres://billing@db.example/ledger' bank.jsonl
    Import(crate::bank_io::ImportArgs),
}

/// `--bank LOCATION`.
#[derive(Debug, Args)]
pub(crate) struct BankFile {
    /// The bank: the path of an SQLite file, or a PostgreSQL URL
    /// (postgres://billing@db.example/ledger?sslmode=require&options=-csearch_path%3Dbank;
    /// the ledger lives in the connection's search_path schema). `grant` and `reserve` create
    /// it when there is none; the other commands need an existing one. Messages show a URL
    /// without its password.
    #[arg(long, value_name = "LOCATION", value_hint = clap::ValueHint::AnyPath)]
    bank: String,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum KindArg {
    /// Bought by the tenant.
    Purchased,
    /// Given by the provider.
    Promotional,
}

/// `bank grant`.
#[derive(Debug, Args)]
pub(crate) struct GrantArgs {
    #[command(flatten)]
    bank: BankFile,
    /// The tenant.
    #[arg(long)]
    tenant: String,
    /// Credits granted (a positive decimal).
    #[arg(long, value_name = "N")]
    credits: String,
    /// Value of one credit in the invoice currency (a positive decimal).
    #[arg(long, value_name = "AMOUNT")]
    rate: String,
    /// Lower burns first.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i64,
    /// Usable from, RFC 3339 (default: now). Credits pay an invoice when they are in force
    /// at its period's end, so give an earlier --from to pay for a period already past.
    #[arg(long, value_name = "T")]
    from: Option<String>,
    /// Usable until (exclusive), RFC 3339 (default: never).
    #[arg(long, value_name = "T")]
    expires: Option<String>,
    /// Purchased or promotional.
    #[arg(long, value_enum, default_value = "purchased")]
    kind: KindArg,
    /// Only for this SKU (repeatable).
    #[arg(long, value_name = "ID")]
    sku: Vec<String>,
    /// Only for this meter (repeatable).
    #[arg(long, value_name = "M")]
    meter: Vec<String>,
    /// Idempotency key: the same key grants once, however often the command runs.
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
}

/// `bank reserve`.
#[derive(Debug, Args)]
pub(crate) struct ReserveArgs {
    #[command(flatten)]
    bank: BankFile,
    /// The tenant.
    #[arg(long)]
    tenant: String,
    /// The SKU reserved.
    #[arg(long, value_name = "ID")]
    sku: String,
    /// The meter reserved.
    #[arg(long, value_name = "M")]
    meter: String,
    /// Capacity per period, in --unit.
    #[arg(long, value_name = "Q")]
    capacity: String,
    /// The pricing unit of the capacity (SM·hour, hour, GB, …).
    #[arg(long)]
    unit: String,
    /// Fee per period, in the invoice currency.
    #[arg(long, value_name = "AMOUNT")]
    fee: String,
    /// Value of one credit converted from unused capacity.
    #[arg(long, value_name = "AMOUNT")]
    rate: String,
    /// Start, RFC 3339.
    #[arg(long, value_name = "T")]
    from: String,
    /// End (exclusive), RFC 3339.
    #[arg(long, value_name = "T")]
    to: String,
    /// Expiry of the credits converted from unused capacity.
    #[arg(long, value_name = "T")]
    credit_expiry: Option<String>,
}

/// Opens (or creates) the bank at `location` (an SQLite file path or a `postgres://` URL);
/// a file or schema that holds something else than a gpumeter ledger is exit 1, as is a
/// server that cannot be reached (the message shows the URL without its password).
pub(crate) fn open(location: &str) -> Result<AnyLedger, Failure> {
    gpumeter::bank::open(location).map_err(bank_err)
}

/// Opens an existing bank: a missing or empty file, or a schema without a ledger, is exit 1
/// (a mistyped location is never read as an empty ledger, and reading never creates one).
pub(crate) fn open_existing(location: &str) -> Result<AnyLedger, Failure> {
    gpumeter::bank::open_existing(location).map_err(bank_err)
}

/// Opens an existing bank for reading only (`balance`, `history`, `verify`, `export`,
/// `preview --bank`): never created, migrated or written, readable on a read-only file or in
/// a read-only directory, and never waiting for a writer ([`gpumeter::bank::open_read_only`]).
pub(crate) fn open_read_only(location: &str) -> Result<AnyLedger, Failure> {
    gpumeter::bank::open_read_only(location).map_err(bank_err)
}

fn bank_err(e: gpumeter::bank::BankError) -> Failure {
    Failure::from(gpumeter::Error::from(e))
}

fn time(flag: &str, s: &str) -> Result<u64, Failure> {
    parse_rfc3339(s).map_err(|e| usage_error(format!("{flag}: {e}")))
}

fn decimal(flag: &str, s: &str) -> Result<Decimal, Failure> {
    Decimal::from_str_exact(s).map_err(|e| usage_error(format!("{flag} {s}: not a decimal ({e})")))
}

/// A tenant of the bank: a tenant name, or `unattributed` (a preview without `--tenant` bills
/// `unattributed`, so a provider may keep its credits and fragments too). `idle` is refused
/// with its reason: it is never invoiced, so it has nothing to grant, reserve or
/// close.
fn tenant(s: &str) -> Result<String, Failure> {
    if s == gpumeter::core::UNATTRIBUTED {
        return Ok(s.to_string());
    }
    if s == gpumeter::core::IDLE {
        return Err(usage_error(format!(
            "--tenant {s}: `{s}` is gpumeter's report tenant (what the GPU measured while no \
             tenant's kernel ran), never invoiced: it has no credits, reservations or fragments"
        )));
    }
    TenantName::parse(s)
        .map(|t| t.as_str().to_string())
        .map_err(|e| usage_error(format!("--tenant: {e}")))
}

/// The tenant of `bank balance`: [`tenant`]'s, or `idle`, whose balance is shown as the
/// ledger holds it (nothing, in a bank that never invoiced it; an older bank's `idle`
/// invoices left a receivable, which is shown rather than hidden).
fn balance_tenant(s: &str) -> Result<String, Failure> {
    if s == gpumeter::core::IDLE {
        return Ok(s.to_string());
    }
    tenant(s)
}

fn meter(s: &str) -> Result<MeterKind, Failure> {
    MeterKind::parse(s).ok_or_else(|| usage_error(format!("--meter {s}: not a meter")))
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Runs a bank subcommand.
pub(crate) fn run(cmd: BankCommand) -> Result<String, Failure> {
    match cmd {
        BankCommand::Grant(a) => grant(a),
        BankCommand::Reserve(a) => reserve(a),
        BankCommand::Balance {
            bank,
            tenant: t,
            at,
            json,
        } => balance(&bank, &t, at, json),
        BankCommand::History { bank, tenant, json } => history(&bank, tenant, json),
        BankCommand::Expire { bank, at } => expire(&bank, &at),
        BankCommand::Close {
            bank,
            tenant: t,
            prices,
        } => close(&bank, &t, &prices),
        // `main` answers `export` itself (its JSON Lines as they are); this is the same
        // command for a caller that wants text.
        BankCommand::Export(a) => match crate::bank_io::export(a)? {
            crate::Output::Text(text) | crate::Output::Events(text) => Ok(text),
            crate::Output::Report(report) => to_json(&report),
        },
        BankCommand::Import(a) => crate::bank_io::import(a),
        BankCommand::Verify { bank } => verify(&bank),
    }
}

/// `bank balance`: the tenant's credits in burn order, carried fragments and receivables at
/// `--at` (default now).
fn balance(bank: &BankFile, t: &str, at: Option<String>, json: bool) -> Result<String, Failure> {
    let t = balance_tenant(t)?;
    let at = match at {
        Some(s) => time("--at", &s)?,
        None => now(),
    };
    let mut ledger = open_read_only(&bank.bank)?;
    let b = gpumeter::bank::balance(&mut ledger, &t, at).map_err(bank_err)?;
    if json {
        return to_json(&b);
    }
    let mut out = format!("tenant {} at {}\n", b.tenant, b.at);
    out.push_str("  credits (in burn order):\n");
    if b.credits.is_empty() {
        out.push_str("    none\n");
    }
    for c in &b.credits {
        out.push_str(&format!(
            "    {}  {}  priority {}  expires {}  remaining {}\n",
            c.grant,
            c.kind.as_str(),
            c.priority,
            c.expires.as_deref().unwrap_or("never"),
            c.remaining
        ));
    }
    out.push_str("  fragments carried:\n");
    if b.fragments.is_empty() {
        out.push_str("    none\n");
    }
    for f in &b.fragments {
        out.push_str(&format!(
            "    {} {}: {} {}\n",
            f.sku,
            f.meter,
            f.quantity,
            f.meter.canonical_unit()
        ));
    }
    out.push_str("  receivable:\n");
    if b.receivable.is_empty() {
        out.push_str("    none\n");
    }
    for (currency, amount) in &b.receivable {
        out.push_str(&format!("    {amount} {currency}\n"));
    }
    Ok(text_out(&out))
}

/// `bank history`: the ledger's transactions (those concerning `--tenant`), with postings and
/// hashes.
fn history(bank: &BankFile, tenant: Option<String>, json: bool) -> Result<String, Failure> {
    let mut ledger = open_read_only(&bank.bank)?;
    let all = ledger
        .atomically(false, |t| t.transactions(None))
        .map_err(bank_err)?;
    let txs: Vec<_> = all
        .into_iter()
        .filter(|t| tenant.as_deref().is_none_or(|name| concerns(t, name)))
        .collect();
    if json {
        return to_json(&txs);
    }
    let mut out = String::new();
    for t in &txs {
        out.push_str(&format!(
            "#{} {} {} {} {}\n",
            t.seq,
            t.tx.at,
            t.tx.kind,
            t.tx.tenant.as_deref().unwrap_or("-"),
            t.tx.key
        ));
        for p in &t.tx.postings {
            out.push_str(&format!(
                "    {:>24} {} {}\n",
                p.amount, p.commodity, p.account
            ));
        }
        out.push_str(&format!("    hash {}\n", t.hash));
    }
    if txs.is_empty() {
        out.push_str("no transactions\n");
    }
    Ok(text_out(&out))
}

/// `bank expire --at T`: credits expired by `T` (not in the future) moved to breakage.
fn expire(bank: &BankFile, at: &str) -> Result<String, Failure> {
    let at = time("--at", at)?;
    if at > now() {
        return Err(usage_error(format!(
            "--at {}: in the future; expiring credits still in force would lose them",
            rfc3339(at)
        )));
    }
    let mut ledger = open_existing(&bank.bank)?;
    let moved = gpumeter::bank::expire(&mut ledger, at).map_err(bank_err)?;
    let mut out = String::new();
    for (g, c) in &moved {
        out.push_str(&format!("expired {g}: {c} credits to breakage\n"));
    }
    if moved.is_empty() {
        out.push_str(&format!("nothing expired at {}\n", rfc3339(at)));
    }
    Ok(text_out(&out))
}

/// `bank close`: the tenant's remaining fragments billed at the last unit price.
fn close(bank: &BankFile, t: &str, prices: &std::path::Path) -> Result<String, Failure> {
    let t = tenant(t)?;
    let book = gpumeter::load_price_book(prices)?;
    let mut ledger = open_existing(&bank.bank)?;
    let closed = gpumeter::bank::close(&mut ledger, &t, &book, now()).map_err(bank_err)?;
    let mut out = String::new();
    for l in &closed.lines {
        let per = match (l.package_size, l.covered) {
            (Some(size), Some(covered)) => format!(
                "package of {size} {} ({covered} of them held by packages paid for)",
                l.meter.canonical_unit()
            ),
            _ => l.pricing_unit.clone(),
        };
        out.push_str(&format!(
            "{} {}: {} {} at {} per {per} = {} {}\n",
            l.sku,
            l.meter,
            l.quantity,
            l.meter.canonical_unit(),
            l.unit_price,
            l.amount,
            closed.currency
        ));
    }
    if closed.lines.is_empty() {
        out.push_str(&format!("tenant {t} has no fragments to bill\n"));
    } else {
        out.push_str(&format!("total {} {}\n", closed.total, closed.currency));
    }
    if let Some(booked) = &closed.booked_at {
        out.push_str(&format!(
            "booked at {booked}: the tenant's fragments have postings up to then (a \
             period finalized before it ended)\n"
        ));
    }
    Ok(text_out(&out))
}

/// `bank verify`: the ledger's hash chain and balances checked.
fn verify(bank: &BankFile) -> Result<String, Failure> {
    let mut ledger = open_read_only(&bank.bank)?;
    let report = ledger
        .atomically(false, |t| gpumeter::bank::verify::verify(t))
        .map_err(bank_err)?;
    Ok(text_out(&format!(
        "ok: {} transactions, {} postings, head {}\n",
        report.transactions,
        report.postings,
        report.head.as_deref().unwrap_or("(empty ledger)")
    )))
}

/// Whether transaction `t` concerns `tenant` (`history --tenant`): it names the tenant, or
/// posts to one of its accounts. An expiry names no tenant (it moves the credits of every
/// expired grant at once) but posts to each one's credits account.
fn concerns(t: &gpumeter::bank::StoredTransaction, tenant: &str) -> bool {
    let prefix = gpumeter::bank::accounts::tenant_prefix(tenant);
    t.tx.tenant.as_deref() == Some(tenant)
        || t.tx.postings.iter().any(|p| p.account.starts_with(&prefix))
}

fn grant(a: GrantArgs) -> Result<String, Failure> {
    let credits = decimal("--credits", &a.credits)?;
    let rate = decimal("--rate", &a.rate)?;
    if credits <= Decimal::ZERO || rate <= Decimal::ZERO {
        return Err(usage_error(
            "--credits and --rate must be positive decimals".into(),
        ));
    }
    let at = now();
    let given = a.from.as_deref().map(|s| time("--from", s)).transpose()?;
    let effective = given.unwrap_or(at);
    let expires = a
        .expires
        .as_deref()
        .map(|s| time("--expires", s))
        .transpose()?;
    if expires.is_some_and(|e| e <= effective) {
        return Err(usage_error("--expires must be after --from".into()));
    }
    let meters = a
        .meter
        .iter()
        .map(|m| meter(m))
        .collect::<Result<Vec<_>, _>>()?;
    let req = gpumeter::bank::GrantRequest {
        tenant: tenant(&a.tenant)?,
        credits,
        rate,
        priority: a.priority,
        // Not given: now, and a retry with the same --key matches whatever start it recorded.
        effective: given,
        expires,
        kind: match a.kind {
            KindArg::Purchased => GrantKind::Purchased,
            KindArg::Promotional => GrantKind::Promotional,
        },
        skus: a.sku.clone(),
        meters,
        key: a.key.clone(),
        at,
    };
    // Refused before the bank is opened, so a refused request creates no bank.
    gpumeter::bank::check_grant(&req).map_err(|e| usage_error(e.to_string()))?;
    let mut ledger = open(&a.bank.bank)?;
    let (g, new) = gpumeter::bank::grant(&mut ledger, &req).map_err(|e| match e {
        gpumeter::bank::BankError::Refused(m) => usage_error(m),
        e => bank_err(e),
    })?;
    let what = format!(
        "{}: {} credits at {} each for tenant {} ({}, priority {}, from {}, expires {})",
        g.grant,
        g.credits,
        g.rate,
        g.tenant,
        g.kind.as_str(),
        g.priority,
        g.effective,
        g.expires.as_deref().unwrap_or("never")
    );
    Ok(text_out(&if new {
        format!("granted {what}\n")
    } else {
        format!("already granted (same key), nothing changed: {what}\n")
    }))
}

fn reserve(a: ReserveArgs) -> Result<String, Failure> {
    let terms = gpumeter::bank::Reservation {
        reservation: String::new(),
        tenant: tenant(&a.tenant)?,
        sku: a.sku.clone(),
        meter: meter(&a.meter)?,
        capacity: decimal("--capacity", &a.capacity)?,
        unit: a.unit.clone(),
        fee: decimal("--fee", &a.fee)?,
        rate: decimal("--rate", &a.rate)?,
        from: rfc3339(time("--from", &a.from)?),
        to: rfc3339(time("--to", &a.to)?),
        credit_expiry: a
            .credit_expiry
            .as_deref()
            .map(|s| time("--credit-expiry", s).map(rfc3339))
            .transpose()?,
    };
    // Refused before the bank is opened, so a refused request creates no bank.
    gpumeter::bank::check_reservation(&terms).map_err(|e| usage_error(e.to_string()))?;
    let mut ledger = open(&a.bank.bank)?;
    let (r, new) = gpumeter::bank::reserve(
        &mut ledger,
        &gpumeter::bank::ReserveRequest { terms, at: now() },
    )
    .map_err(|e| match e {
        gpumeter::bank::BankError::Refused(m) => usage_error(m),
        e => bank_err(e),
    })?;
    let what = format!(
        "{}: {} {} of {} on {} per period for tenant {}, fee {}, from {} to {}",
        r.reservation, r.capacity, r.unit, r.meter, r.sku, r.tenant, r.fee, r.from, r.to
    );
    Ok(text_out(&if new {
        format!("reserved {what}\n")
    } else {
        format!("already reserved, nothing changed: {what}\n")
    }))
}
