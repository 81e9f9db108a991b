//! `gm_bank`: the credit bank in an SQLite file or a PostgreSQL database, chosen by its
//! location (`gpumeter::bank::open`): grants, preview and finalization over the facade's one
//! path (`gpumeter::bill`), balances and verification.

use std::ffi::c_char;
use std::sync::{Mutex, MutexGuard};

use gpumeter::bank::{AnyLedger, GrantKind, GrantRequest, Ledger};
use gpumeter::core::{MeterKind, TenantName};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::ffi::{
    boundary, c_string, free_handle, handle, infallible, into_handle, out_arg, str_arg,
    unwind_safe, Handle, Origin,
};
use crate::json;
use crate::rate::{price_book_arg, usage_arg};
use crate::status::{gm_status, gm_status_code, Failure};

/// A credit bank held open: an SQLite ledger file, or a connection to a PostgreSQL database.
/// Opaque; made by `gm_bank_open`, freed by `gm_bank_free`. Every function may be called
/// from any thread, also at once: calls on one bank take turns. Several banks (in this
/// process or others, on other machines for PostgreSQL) may open the same ledger: writes are
/// serialized by the database, and a finalization is applied once whoever runs it.
#[allow(non_camel_case_types)]
pub struct gm_bank {
    ledger: Mutex<AnyLedger>,
    origin: Origin,
}

impl Handle for gm_bank {
    const WHAT: &'static str = "bank";
    fn origin(&self) -> &Origin {
        &self.origin
    }
}

impl gm_bank {
    fn lock(&self) -> Result<MutexGuard<'_, AnyLedger>, Failure> {
        self.ledger.lock().map_err(|_| {
            Failure::new(
                gm_status_code::GM_ERR_POISONED,
                "this bank was left unusable by an earlier internal error (GM_ERR_PANIC): free \
                 it with gm_bank_free",
            )
        })
    }
}

fn bank_failure(e: gpumeter::bank::BankError) -> Failure {
    facade_failure(gpumeter::Error::from(e))
}

/// The status of a facade error: rating and bank failures keep their own codes.
fn facade_failure(e: gpumeter::Error) -> Failure {
    let status = match &e {
        gpumeter::Error::Rating(_) => gm_status_code::GM_ERR_RATING,
        gpumeter::Error::PriceBook(_) => gm_status_code::GM_ERR_PRICE_BOOK,
        gpumeter::Error::Meter(_) => gm_status_code::GM_ERR_METER,
        gpumeter::Error::Report { .. }
        | gpumeter::Error::Merge(_)
        | gpumeter::Error::Check { .. }
        | gpumeter::Error::Incomplete { .. } => gm_status_code::GM_ERR_USAGE_JSON,
        _ => gm_status_code::GM_ERR_BANK,
    };
    Failure::new(status, e.to_string())
}

fn invalid(message: String) -> Failure {
    Failure::new(gm_status_code::GM_ERR_INVALID_ARGUMENT, message)
}

/// JSON of a bank answer (a failure to write it is a bug in the bank's types).
fn answer<T: Serialize>(v: &T, what: &str) -> Result<*mut c_char, Failure> {
    let json = serde_json::to_string(v).map_err(|e| {
        Failure::new(
            gm_status_code::GM_ERR_BANK,
            format!("cannot write {what}: {e}"),
        )
    })?;
    c_string(json, what)
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A tenant of the bank: a tenant name, or `unattributed` (usage without a tenant is billed
/// to it, so it may hold credits and fragments too; `idle` is never billed). As the CLI's
/// `--tenant`.
fn bank_tenant(name: &str, text: &str) -> Result<String, Failure> {
    if text == gpumeter::core::UNATTRIBUTED {
        return Ok(text.to_string());
    }
    TenantName::parse(text)
        .map(|t| t.as_str().to_string())
        .map_err(|e| invalid(format!("{name}: {e}")))
}

/// `kind` of a grant request: the kinds a grant may be given as (reservation credits come
/// from converting a reservation, not from a grant).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RequestKind {
    #[default]
    Purchased,
    Promotional,
}

/// `grant_json` of `gm_bank_grant_json`: `gpumeter bank grant`'s options.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantJson {
    tenant: String,
    credits: String,
    rate: String,
    #[serde(default, deserialize_with = "json::int")]
    priority: i64,
    #[serde(default, deserialize_with = "json::opt_int")]
    effective_ns: Option<u64>,
    #[serde(default, deserialize_with = "json::opt_int")]
    expires_ns: Option<u64>,
    #[serde(default)]
    kind: RequestKind,
    #[serde(default)]
    skus: Vec<String>,
    #[serde(default)]
    meters: Vec<String>,
    key: Option<String>,
    #[serde(default, deserialize_with = "json::opt_int")]
    at_ns: Option<u64>,
}

fn decimal(field: &str, text: &str) -> Result<Decimal, Failure> {
    Decimal::from_str_exact(text).map_err(|e| {
        invalid(format!(
            "grant_json: {field} \"{text}\": not a decimal ({e})"
        ))
    })
}

fn grant_request(text: &str) -> Result<GrantRequest, Failure> {
    let g: GrantJson = json::object(text).map_err(|e| invalid(format!("grant_json: {e}")))?;
    let credits = decimal("credits", &g.credits)?;
    let rate = decimal("rate", &g.rate)?;
    if credits <= Decimal::ZERO || rate <= Decimal::ZERO {
        return Err(invalid(format!(
            "grant_json: credits \"{}\" and rate \"{}\" must be positive decimals",
            g.credits, g.rate
        )));
    }
    let at = g.at_ns.unwrap_or_else(now_ns);
    let effective = g.effective_ns.unwrap_or(at);
    if let Some(e) = g.expires_ns.filter(|e| *e <= effective) {
        return Err(invalid(format!(
            "grant_json: expires_ns {e} must be after effective_ns {effective}"
        )));
    }
    let meters = g
        .meters
        .iter()
        .map(|m| {
            MeterKind::parse(m)
                .ok_or_else(|| invalid(format!("grant_json: meters: `{m}` is not a meter")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if g.key.as_deref().is_some_and(str::is_empty) {
        return Err(invalid(
            "grant_json: key is empty (leave it out to derive one from the terms)".to_string(),
        ));
    }
    Ok(GrantRequest {
        tenant: bank_tenant("grant_json: tenant", &g.tenant)?,
        credits,
        rate,
        priority: g.priority,
        effective: g.effective_ns,
        expires: g.expires_ns,
        kind: match g.kind {
            RequestKind::Purchased => GrantKind::Purchased,
            RequestKind::Promotional => GrantKind::Promotional,
        },
        skus: g.skus,
        meters,
        key: g.key,
        at,
    })
}

/// The answer of `gm_bank_grant_json`.
#[derive(Serialize)]
struct Granted {
    grant: gpumeter::bank::Grant,
    applied: bool,
}

/// Opens the credit bank at `location`, as the CLI's `--bank` takes it: a PostgreSQL URL
/// (`postgres://` or `postgresql://`, e.g.
/// `postgres://billing@db.example/ledger?sslmode=require`; the ledger lives in the
/// connection's `search_path` schema, which `options=-csearch_path%3Dbank` sets; TLS as
/// `sslmode` says, with the system's trusted roots) or else the path of an SQLite file
/// (relative to the working directory); a URL of another scheme (a mistyped
/// `postgress://…`) is refused (`GM_ERR_BANK`). Creates the ledger when there is none (a file that does
/// not exist or is empty, a schema without the ledger's tables), as `gpumeter bank grant` and
/// `gpumeter invoice finalize` do, and migrates an older one. A file or schema that holds
/// something else is refused before anything is written to it. `location` is read during the
/// call only (UTF-8).
///
/// On success `*out` is a new bank the caller owns and frees with `gm_bank_free`; on failure
/// `*out` is not written. Any thread. Messages name the location, a URL without its
/// password. A PostgreSQL location blocks while the server is reached and answers: the URL's
/// `connect_timeout` (seconds) bounds the TCP connection to each host, not a server that
/// accepts the connection and then does not answer (docs/BANK.md, "The connection string").
/// A PostgreSQL bank is one connection, never re-established: once it breaks (the server
/// restarts or fails over, a network cut), every later call is `GM_ERR_BANK` ("connection
/// closed"); free the bank and open it again. A call the break interrupted may or may not have
/// committed: make it again with the same idempotency key, and it applies once.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_INVALID_UTF8`, `GM_ERR_INVALID_ARGUMENT` (empty),
/// `GM_ERR_BANK` (the file cannot be opened or created, is not an SQLite database or not a
/// gpumeter ledger, or is a ledger of a newer version; the server cannot be reached or refuses
/// the login; the message names the location), `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `location` is NULL or NUL-terminated; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn gm_bank_open(
    location: *const c_char,
    out: *mut *mut gm_bank,
) -> gm_status {
    boundary(unwind_safe(|| {
        let out = out_arg(out, "out")?;
        // SAFETY: NULL or NUL-terminated (the contract above).
        let location = unsafe { str_arg(location, "location") }?;
        if location.is_empty() {
            return Err(invalid("location is empty".to_string()));
        }
        let ledger = gpumeter::bank::open(location).map_err(bank_failure)?;
        let bank = gm_bank {
            ledger: Mutex::new(ledger),
            origin: Origin::here(),
        };
        // SAFETY: `out` is writable storage for a pointer (the contract above).
        unsafe { out.write(into_handle(bank)) };
        Ok(())
    }))
}

/// Closes a bank and frees it (the file or database stays; everything committed is in it).
/// NULL is fine. In a child after `fork()`, a bank the parent opened is left alone (its
/// connection is the parent's: closing it here could end the parent's).
/// No other call may use the bank during or after this one.
///
/// # Safety
/// `bank` is NULL or a bank from `gm_bank_open` not freed before.
#[no_mangle]
pub unsafe extern "C" fn gm_bank_free(bank: *mut gm_bank) {
    // SAFETY: NULL or a live bank from `gm_bank_open`, freed once (the contract above).
    infallible((), || unsafe { free_handle(bank) })
}

/// Grants credits to a tenant (`gpumeter bank grant`), in one ledger transaction.
///
/// `grant_json`: a JSON object with
/// `tenant` (required: a tenant name, or `unattributed`),
/// `credits` and `rate` (required: positive decimals **as JSON strings**, e.g. `"500"`,
/// `"0.01"`, at most 9 decimals; `rate` is the value of one credit in the invoice currency;
/// JSON numbers are refused so that no amount passes through a float),
/// `priority` (integer, lower burns first; default 0),
/// `effective_ns` (usable from, ns since the epoch; default `at_ns`; credits pay an invoice
/// when in force at its period's end, so give an earlier one to pay for a period already past),
/// `expires_ns` (usable until, exclusive; default never),
/// `kind` (`"purchased"`, the default, or `"promotional"`),
/// `skus` and `meters` (arrays of SKU ids and meter names the credits may pay for; default
/// empty: all),
/// `key` (idempotency key: the same key grants once, however often the call is made; default:
/// derived from the terms and `at_ns`, so a retry at another instant is a new grant) and
/// `at_ns` (when the grant is recorded; default now). Unknown keys are refused; an array or
/// any other value than an object is refused; integers past their range (64 bits) are "too
/// large".
///
/// On success `*out_json` is a new string the caller owns and frees with
/// `gm_string_free`: `{"grant": {"grant": "g-…", "tenant",
/// "credits", "rate", "priority", "effective", "expires", "kind", "skus", "meters"},
/// "applied": true}`, times RFC 3339 UTC (`expires` null for never), decimals as strings;
/// `applied` is false when the same request was recorded before under the same key (nothing
/// changed; the grant shown is that one; a request without `effective_ns` matches the start
/// recorded then). The same key with other terms is `GM_ERR_BANK`, naming the key and the
/// first field that differs, and nothing is applied. On failure `*out_json` is not written
/// and the bank is unchanged. Any thread.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_INVALID_UTF8`, `GM_ERR_INVALID_ARGUMENT` (`grant_json` is
/// not a JSON object, has an unknown key or a bad field, or the bank refuses the terms: credits
/// or rate not positive or beyond the bank's bounds (docs/BANK.md, "Bounds"), too many
/// decimals, an expiry not after the start), `GM_ERR_BANK` (the ledger cannot be read or
/// written; the key names an earlier request with other terms), `GM_ERR_FORKED` (a bank made
/// before a `fork()`, in the child), `GM_ERR_POISONED` (the bank was left unusable by an
/// earlier `GM_ERR_PANIC`), `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `bank` is NULL or a live bank; `grant_json` is NULL or NUL-terminated; `out_json` points to
/// writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn gm_bank_grant_json(
    bank: *mut gm_bank,
    grant_json: *const c_char,
    out_json: *mut *mut c_char,
) -> gm_status {
    boundary(unwind_safe(|| {
        let out = out_arg(out_json, "out_json")?;
        // SAFETY: NULL or a live bank (the contract above).
        let bank = unsafe { handle(bank, "bank") }?;
        // SAFETY: NULL or NUL-terminated (the contract above).
        let req = grant_request(unsafe { str_arg(grant_json, "grant_json") }?)?;
        let (grant, applied) = {
            let mut ledger = bank.lock()?;
            gpumeter::bank::grant(&mut *ledger, &req).map_err(|e| match e {
                gpumeter::bank::BankError::Refused(m) => invalid(format!("grant_json: {m}")),
                e => bank_failure(e),
            })?
        };
        let c = answer(&Granted { grant, applied }, "the grant")?;
        // SAFETY: writable storage for a pointer (the contract above).
        unsafe { out.write(c) };
        Ok(())
    }))
}

/// Preview (`commit = false`) or finalization (`commit = true`) through `gpumeter::bill`.
///
/// # Safety
/// As `gm_bank_preview_json`.
unsafe fn bill(
    bank: *mut gm_bank,
    usage_json: *const c_char,
    price_book_toml: *const c_char,
    out_invoice_json: *mut *mut c_char,
    commit: bool,
) -> gm_status {
    boundary(unwind_safe(|| {
        let out = out_arg(out_invoice_json, "out_invoice_json")?;
        // SAFETY: NULL or a live bank (the caller's contract).
        let bank = unsafe { handle(bank, "bank") }?;
        // SAFETY: NULL or NUL-terminated (the caller's contract).
        let usage = usage_arg(unsafe { str_arg(usage_json, "usage_json") }?)?;
        // SAFETY: NULL or NUL-terminated (the caller's contract).
        let book = price_book_arg(unsafe { str_arg(price_book_toml, "price_book_toml") }?)?;
        let done = {
            let mut ledger = bank.lock()?;
            gpumeter::bill(&mut *ledger, &usage, &book, None, commit).map_err(facade_failure)?
        };
        let c = crate::rate::json_out(&done.document, "the invoices")?;
        // SAFETY: writable storage for a pointer (the caller's contract).
        unsafe { out.write(c) };
        Ok(())
    }))
}

/// Rates a usage report against the bank without changing it (`gpumeter preview --bank
/// --json`): the `gpumeter.invoice/v1` document (JSON) with one invoice per tenant with usage,
/// for the period the usage spans (whole windows), with the carried fragments, reservation
/// fees and credits that would apply. The ledger transaction is rolled back: nothing is
/// written, and `ledger_head` is null, except on an invoice finalized before (same tenant,
/// period, usage and price book), which is shown as it was finalized.
///
/// `usage_json`: a `gpumeter.usage/v1` report, its `sha256` checked; `price_book_toml`: the
/// text of a `gpumeter.pricebook/v1` file whose currency is the bank's. Both are read during
/// the call only.
///
/// On success `*out_invoice_json` is a new string the caller owns and frees with
/// `gm_string_free`; on failure it is not written. Any thread.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_INVALID_UTF8`, `GM_ERR_USAGE_JSON`, `GM_ERR_PRICE_BOOK`,
/// `GM_ERR_RATING` (the book cannot rate this usage), `GM_ERR_BANK` (the bank refuses the
/// usage, or the ledger cannot be read, or keeps another currency than the book's),
/// `GM_ERR_FORKED` (a bank made before a `fork()`, in the child), `GM_ERR_POISONED` (the bank
/// was left unusable by an earlier `GM_ERR_PANIC`), `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `bank` is NULL or a live bank; `usage_json` and `price_book_toml` are NULL or
/// NUL-terminated; `out_invoice_json` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn gm_bank_preview_json(
    bank: *mut gm_bank,
    usage_json: *const c_char,
    price_book_toml: *const c_char,
    out_invoice_json: *mut *mut c_char,
) -> gm_status {
    // SAFETY: the contract above is `bill`'s.
    unsafe { bill(bank, usage_json, price_book_toml, out_invoice_json, false) }
}

/// Rates a usage report against the bank and commits it (`gpumeter invoice finalize
/// --json`): in one ledger transaction for all tenants, each tenant's credits burn, fragments
/// carry, reservation fees are billed and unused capacity converts, and its invoice is
/// recorded under its finalization key (tenant, period, usage SHA-256, price-book SHA-256). The
/// `gpumeter.invoice/v1` document is returned, each invoice with `ledger_head` set.
///
/// Idempotent: an invoice whose key is in the ledger already is returned as finalized then,
/// and nothing changes, so a retry after a failure or a crash is safe (also from another
/// process). Arguments, ownership and threads as `gm_bank_preview_json`. On failure nothing
/// is committed.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_INVALID_UTF8`, `GM_ERR_USAGE_JSON` (also for an incomplete
/// report, `"complete": false`: a snapshot from `gm_meter_usage_json`, whose windows may still
/// grow: finalize drained reports), `GM_ERR_PRICE_BOOK`, `GM_ERR_RATING` (the book cannot rate
/// this usage), `GM_ERR_BANK` (the bank refuses the finalization, or the ledger cannot be read
/// or written, or keeps another currency than the book's), `GM_ERR_FORKED` (a bank made before
/// a `fork()`, in the child), `GM_ERR_POISONED` (the bank was left unusable by an earlier
/// `GM_ERR_PANIC`), `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// As `gm_bank_preview_json`.
#[no_mangle]
pub unsafe extern "C" fn gm_bank_finalize_json(
    bank: *mut gm_bank,
    usage_json: *const c_char,
    price_book_toml: *const c_char,
    out_invoice_json: *mut *mut c_char,
) -> gm_status {
    // SAFETY: the contract above is `bill`'s.
    unsafe { bill(bank, usage_json, price_book_toml, out_invoice_json, true) }
}

/// A tenant's balance as of `at_ns` (ns since the epoch; 0 = now), as `gpumeter bank balance
/// --json`: `{"tenant", "at" (RFC 3339 UTC), "credits": [{"grant", "kind", "priority",
/// "expires", "remaining"}] (grants in force at `at` with credits left, in burn order),
/// "fragments": [{"sku", "meter", "quantity"}] (canonical units carried), "receivable":
/// {"USD": "12.30"} (what finalized invoices leave to pay, per currency)}`; decimals as
/// strings. Counts the transactions whose business time (a grant's start, a period's end, an
/// expiry) is at most `at`. A tenant the bank has never seen has an empty balance. `tenant` is
/// read during the call only.
///
/// On success `*out_json` is a new string the caller owns and frees with
/// `gm_string_free`; on failure it is not written. Any thread.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_INVALID_UTF8`, `GM_ERR_INVALID_ARGUMENT` (not a tenant
/// name), `GM_ERR_BANK` (the ledger cannot be read, or is damaged), `GM_ERR_FORKED` (a bank
/// made before a `fork()`, in the child), `GM_ERR_POISONED` (the bank was left unusable by an
/// earlier `GM_ERR_PANIC`), `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `bank` is NULL or a live bank; `tenant` is NULL or NUL-terminated; `out_json` points to
/// writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn gm_bank_balance_json(
    bank: *mut gm_bank,
    tenant: *const c_char,
    at_ns: u64,
    out_json: *mut *mut c_char,
) -> gm_status {
    boundary(unwind_safe(|| {
        let out = out_arg(out_json, "out_json")?;
        // SAFETY: NULL or a live bank (the contract above).
        let bank = unsafe { handle(bank, "bank") }?;
        // SAFETY: NULL or NUL-terminated (the contract above).
        let tenant = bank_tenant("tenant", unsafe { str_arg(tenant, "tenant") }?)?;
        let at = if at_ns == 0 { now_ns() } else { at_ns };
        let balance = {
            let mut ledger = bank.lock()?;
            gpumeter::bank::balance(&mut *ledger, &tenant, at).map_err(bank_failure)?
        };
        let c = answer(&balance, "the balance")?;
        // SAFETY: writable storage for a pointer (the contract above).
        unsafe { out.write(c) };
        Ok(())
    }))
}

/// Checks the books (`gpumeter bank verify`): walks the hash chain and the ledger's
/// invariants (sequence without gaps, unique keys, each hash recomputed, postings summing to
/// zero per commodity, stored balances equal to their postings) inside a transaction that is
/// rolled back.
///
/// When everything holds, `GM_OK` and `*out_json` is `{"transactions", "postings",
/// "accounts", "head"}` (counts; `head` the chain head, SHA-256 lowercase hex, null for an
/// empty ledger), a new string the caller owns and frees with
/// `gm_string_free`. A ledger that fails verification is an error,
/// as the CLI exits 1: `GM_ERR_BANK`, the message naming the first bad transaction (sequence
/// number and key) and what is wrong, and `*out_json` is not written. Any thread.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_BANK` (verification failed, or the ledger cannot be read),
/// `GM_ERR_FORKED` (a bank made before a `fork()`, in the child), `GM_ERR_POISONED` (the bank
/// was left unusable by an earlier `GM_ERR_PANIC`), `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `bank` is NULL or a live bank; `out_json` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn gm_bank_verify_json(
    bank: *mut gm_bank,
    out_json: *mut *mut c_char,
) -> gm_status {
    boundary(unwind_safe(|| {
        let out = out_arg(out_json, "out_json")?;
        // SAFETY: NULL or a live bank (the contract above).
        let bank = unsafe { handle(bank, "bank") }?;
        let report = {
            let mut ledger = bank.lock()?;
            ledger
                .atomically(false, |t| gpumeter::bank::verify::verify(t))
                .map_err(bank_failure)?
        };
        let c = answer(&report, "the verification")?;
        // SAFETY: writable storage for a pointer (the contract above).
        unsafe { out.write(c) };
        Ok(())
    }))
}
