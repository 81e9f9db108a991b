//! `gm_rate_json`: usage and a price book to invoices, without a bank.

use std::ffi::c_char;
use std::path::Path;

use gpumeter::{PriceBook, UsageReport};

use crate::ffi::{boundary, c_string, out_arg, str_arg, unwind_safe};
use crate::status::{gm_status, gm_status_code, Failure};

/// A `gpumeter.usage/v1` report handed over as JSON, checked as every reader checks one
/// (`gpumeter::check_usage_report`: digest, one row per key, no zero rows, window edges,
/// totals, what a device can do, tenant names).
pub(crate) fn usage_arg(text: &str) -> Result<UsageReport, Failure> {
    gpumeter::parse_usage_report(text.as_bytes(), Path::new("usage_json"))
        .map_err(|e| Failure::new(gm_status_code::GM_ERR_USAGE_JSON, e.to_string()))
}

/// A price book handed over as TOML text.
pub(crate) fn price_book_arg(text: &str) -> Result<PriceBook, Failure> {
    PriceBook::from_toml_str("price_book_toml", text)
        .map_err(|e| Failure::new(gm_status_code::GM_ERR_PRICE_BOOK, e.to_string()))
}

/// JSON of a rated document.
pub(crate) fn json_out<T: serde::Serialize>(v: &T, what: &str) -> Result<*mut c_char, Failure> {
    let json = serde_json::to_string(v).map_err(|e| {
        Failure::new(
            gm_status_code::GM_ERR_RATING,
            format!("cannot write {what}: {e}"),
        )
    })?;
    c_string(json, what)
}

/// Rates a usage report with a price book: the `gpumeter.invoice/v1` document (JSON) with one
/// invoice per tenant with usage, for the period the usage spans (whole windows), exactly as
/// `gpumeter preview --json` on the same usage. No bank: carried fragments and credits are
/// not applied (see `gm_bank_preview_json`).
///
/// `usage_json`: a `gpumeter.usage/v1` report (from `gm_meter_usage_json`,
/// a drain, or `gpumeter usage --json`), checked as every reader checks one (its `sha256`,
/// one row per tenant, device, window and meter, no zero rows, rows on window edges, totals
/// equal to the rows, quantities a device can do, tenant names none of which look alike:
/// `GM_ERR_USAGE_JSON` naming the row); `price_book_toml`: the text of
/// a `gpumeter.pricebook/v1` file. Both are read during the call only.
///
/// On success `*out_invoice_json` is a new string the caller owns and frees with
/// `gm_string_free`; on failure it is not written. Any thread.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_INVALID_UTF8`, `GM_ERR_USAGE_JSON`, `GM_ERR_PRICE_BOOK`,
/// `GM_ERR_RATING`, `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `usage_json` and `price_book_toml` are NULL or NUL-terminated; `out_invoice_json` points
/// to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn gm_rate_json(
    usage_json: *const c_char,
    price_book_toml: *const c_char,
    out_invoice_json: *mut *mut c_char,
) -> gm_status {
    boundary(unwind_safe(|| {
        let out = out_arg(out_invoice_json, "out_invoice_json")?;
        // SAFETY: NULL or NUL-terminated (the contract above).
        let usage = usage_arg(unsafe { str_arg(usage_json, "usage_json") }?)?;
        // SAFETY: NULL or NUL-terminated (the contract above).
        let book = price_book_arg(unsafe { str_arg(price_book_toml, "price_book_toml") }?)?;
        let doc = gpumeter::preview(&usage, &book, None)
            .map_err(|e| Failure::new(gm_status_code::GM_ERR_RATING, e.to_string()))?;
        let c = json_out(&doc, "the invoices")?;
        // SAFETY: writable storage for a pointer (the contract above).
        unsafe { out.write(c) };
        Ok(())
    }))
}
