//! The bank calls of the C ABI, through the exported functions: a grant, a preview that
//! changes nothing, a finalization that burns credits once however often it runs, the balance
//! and the verification, on an SQLite file and on PostgreSQL (`gm_bank_open` with a URL; the
//! server in `GPUMETER_TEST_POSTGRES`, else `skipped:`, a failure under `CI=true`); NULLs, bad
//! UTF-8, bad JSON and bad TOML leave outputs untouched; a password never shows.
// The exported functions are `unsafe extern "C"`: every call says why its pointers hold.
#![allow(unsafe_code)]

use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::ptr;

use gpumeter_ffi::*;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The usage of the committed H200 smoke recording, as an agent would hand it over.
fn usage_json() -> CString {
    let input = root().join("examples/data/h200-cuda13-smoke.gmr");
    let report = gpumeter::meter_inputs(&[input], &gpumeter::UsageOptions::default())
        .expect("the smoke recording meters");
    assert!(!report.usage.is_empty(), "the smoke recording has usage");
    CString::new(serde_json::to_string(&report).expect("usage JSON")).expect("no NUL")
}

fn price_book() -> CString {
    let text = std::fs::read_to_string(root().join("examples/pricebook.toml"))
        .expect("the example price book");
    CString::new(text).expect("no NUL")
}

fn c(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

fn last_error() -> String {
    // SAFETY: (NULL, 0) asks for the length only.
    let len = unsafe { gm_last_error_message(ptr::null_mut(), 0) };
    let mut buf = vec![0u8; len + 1];
    // SAFETY: `buf` has `len + 1` writable bytes.
    unsafe { gm_last_error_message(buf.as_mut_ptr().cast(), buf.len()) };
    CStr::from_bytes_until_nul(&buf)
        .expect("NUL-terminated")
        .to_string_lossy()
        .into_owned()
}

/// An instant after everything the tests record (2096), so balances compare as text.
const LATER: u64 = 4_000_000_000_000_000_000;

const OK: gm_status = gm_status_code::GM_OK as gm_status;

fn code(s: gm_status_code) -> gm_status {
    s as gm_status
}

/// Takes a string the library returned, parses it and frees it.
fn take_json(p: *mut c_char) -> (String, Value) {
    assert!(!p.is_null());
    // SAFETY: a NUL-terminated string from the library, freed once below.
    let text = unsafe { CStr::from_ptr(p) }
        .to_str()
        .expect("UTF-8")
        .to_string();
    // SAFETY: a library string, not freed before.
    unsafe { gm_string_free(p) };
    let v = serde_json::from_str(&text).expect("JSON");
    (text, v)
}

/// What keeps a test bank's storage alive: a temporary directory or a PostgreSQL schema.
enum Storage {
    Sqlite(tempfile::TempDir),
    Postgres(gpumeter_test_postgres::Schema),
}

/// A bank of its own: a new file in a temporary directory, or a new PostgreSQL schema.
struct Bank {
    location: String,
    handle: *mut gm_bank,
    // Dropped after `Drop for Bank` frees the handle: the schema outlives its connection.
    storage: Storage,
}

impl Bank {
    /// A bank in a new SQLite file.
    fn new() -> Bank {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let location = dir
            .path()
            .join("bank.db")
            .to_str()
            .expect("a UTF-8 path")
            .to_string();
        Bank::at(location, Storage::Sqlite(dir))
    }

    /// A bank in a new PostgreSQL schema, opened with its URL; `None` without a server.
    fn postgres(label: &str) -> Option<Bank> {
        let schema = gpumeter_test_postgres::Schema::fresh(label)?;
        Some(Bank::at(schema.url.clone(), Storage::Postgres(schema)))
    }

    fn at(location: String, storage: Storage) -> Bank {
        let handle = open(&location).unwrap_or_else(|e| panic!("the bank opens: {e:?}"));
        Bank {
            location,
            handle,
            storage,
        }
    }

    /// The SQLite file of an SQLite bank.
    fn path(&self) -> PathBuf {
        match &self.storage {
            Storage::Sqlite(dir) => dir.path().join("bank.db"),
            Storage::Postgres(_) => panic!("an SQLite bank"),
        }
    }

    /// The schema of a PostgreSQL bank.
    fn schema(&self) -> &gpumeter_test_postgres::Schema {
        match &self.storage {
            Storage::Postgres(schema) => schema,
            Storage::Sqlite(_) => panic!("a PostgreSQL bank"),
        }
    }

    fn call(
        &self,
        f: unsafe extern "C" fn(
            *mut gm_bank,
            *const c_char,
            *const c_char,
            *mut *mut c_char,
        ) -> gm_status,
        usage: &CString,
        book: &CString,
    ) -> Result<(String, Value), (gm_status, String)> {
        let mut out: *mut c_char = ptr::null_mut();
        // SAFETY: a live bank, NUL-terminated strings, a writable pointer.
        let s = unsafe { f(self.handle, usage.as_ptr(), book.as_ptr(), &mut out) };
        if s == OK {
            Ok(take_json(out))
        } else {
            assert!(out.is_null(), "no output on failure");
            Err((s, last_error()))
        }
    }

    fn grant(&self, json: &str) -> Result<Value, (gm_status, String)> {
        let mut out: *mut c_char = ptr::null_mut();
        let req = c(json);
        // SAFETY: a live bank, a NUL-terminated string, a writable pointer.
        let s = unsafe { gm_bank_grant_json(self.handle, req.as_ptr(), &mut out) };
        if s == OK {
            Ok(take_json(out).1)
        } else {
            assert!(out.is_null(), "no output on failure");
            Err((s, last_error()))
        }
    }

    fn balance(&self, tenant: &str, at_ns: u64) -> (String, Value) {
        let mut out: *mut c_char = ptr::null_mut();
        let t = c(tenant);
        // SAFETY: a live bank, a NUL-terminated string, a writable pointer.
        let s = unsafe { gm_bank_balance_json(self.handle, t.as_ptr(), at_ns, &mut out) };
        assert_eq!(s, OK, "{}", last_error());
        take_json(out)
    }

    fn verify(&self) -> Value {
        let mut out: *mut c_char = ptr::null_mut();
        // SAFETY: a live bank, a writable pointer.
        let s = unsafe { gm_bank_verify_json(self.handle, &mut out) };
        assert_eq!(s, OK, "{}", last_error());
        take_json(out).1
    }
}

impl Drop for Bank {
    fn drop(&mut self) {
        // SAFETY: a bank from `gm_bank_open`, freed once.
        unsafe { gm_bank_free(self.handle) };
    }
}

/// `gm_bank_open` of `location` (a file path or a PostgreSQL URL).
fn open(location: &str) -> Result<*mut gm_bank, (gm_status, String)> {
    let p = c(location);
    let mut out: *mut gm_bank = ptr::null_mut();
    // SAFETY: a NUL-terminated string, a writable pointer.
    let s = unsafe { gm_bank_open(p.as_ptr(), &mut out) };
    if s == OK {
        assert!(!out.is_null());
        Ok(out)
    } else {
        assert!(out.is_null(), "no handle on failure");
        Err((s, last_error()))
    }
}

/// The first billed tenant of the smoke recording's usage (`idle` is never billed).
fn tenant_of(usage: &CString) -> String {
    let v: Value = serde_json::from_str(usage.to_str().expect("UTF-8")).expect("JSON");
    v["usage"]
        .as_array()
        .expect("usage rows")
        .iter()
        .filter_map(|r| r["tenant"].as_str())
        .find(|t| *t != "idle")
        .expect("a billed tenant")
        .to_string()
}

fn remaining(balance: &Value) -> Vec<String> {
    balance["credits"]
        .as_array()
        .expect("credits")
        .iter()
        .map(|c| {
            c["remaining"]
                .as_str()
                .expect("a decimal string")
                .to_string()
        })
        .collect()
}

#[test]
fn grant_preview_finalize_balance_verify_sqlite() {
    grant_preview_finalize_balance_verify(Bank::new());
}

#[test]
fn grant_preview_finalize_balance_verify_postgres() {
    if let Some(bank) = Bank::postgres("ffi_grant_finalize") {
        grant_preview_finalize_balance_verify(bank);
    }
}

/// The bank calls end to end on `bank`, of either backend: the same answers.
fn grant_preview_finalize_balance_verify(bank: Bank) {
    let usage = usage_json();
    let book = price_book();
    let tenant = tenant_of(&usage);
    let grant = format!(
        r#"{{"tenant": "{tenant}", "credits": "100", "rate": "0.01", "priority": 1,
            "effective_ns": 0, "kind": "promotional", "key": "welcome"}}"#
    );
    let g = bank.grant(&grant).expect("granted");
    assert_eq!(g["applied"], Value::Bool(true));
    assert_eq!(g["grant"]["tenant"], tenant.as_str());
    assert_eq!(g["grant"]["credits"], "100");
    assert_eq!(g["grant"]["rate"], "0.01");
    assert_eq!(g["grant"]["kind"], "promotional");
    assert_eq!(g["grant"]["effective"], "1970-01-01T00:00:00Z");
    assert_eq!(g["grant"]["expires"], Value::Null);
    let id = g["grant"]["grant"].as_str().expect("an id").to_string();
    assert!(id.starts_with("g-"));
    // The same key grants once.
    let again = bank.grant(&grant).expect("granted again");
    assert_eq!(again["applied"], Value::Bool(false));
    assert_eq!(again["grant"], g["grant"]);
    // The same key with other terms is another request: refused, naming the difference
    // (issue 30 item 8), and nothing is granted.
    let (s, msg) = bank
        .grant(&grant.replace(r#""credits": "100""#, r#""credits": "200""#))
        .expect_err("the same key, other credits");
    assert_eq!(s, code(gm_status_code::GM_ERR_BANK), "{msg}");
    assert!(
        msg.contains("`welcome`") && msg.contains("its credits was 100"),
        "{msg}"
    );

    let (before, b0) = bank.balance(&tenant, LATER);
    assert_eq!(remaining(&b0), ["100"]);
    assert_eq!(bank.verify()["transactions"], 1);

    // A preview shows the credits that would apply and changes nothing.
    let (_, preview) = bank
        .call(gm_bank_preview_json, &usage, &book)
        .expect("preview");
    assert_eq!(preview["schema"], "gpumeter.invoice/v1");
    let inv = &preview["invoices"][0];
    assert_eq!(inv["tenant"], tenant.as_str());
    let applied = inv["credits_applied"].as_array().expect("credits_applied");
    assert_eq!(applied.len(), 1, "{preview}");
    assert_eq!(applied[0]["grant"], id.as_str());
    assert_eq!(inv["ledger_head"], Value::Null);
    assert_eq!(bank.balance(&tenant, LATER).0, before);
    assert_eq!(bank.verify()["transactions"], 1);

    // Finalization burns what the preview showed, and records the invoice.
    let (first, fin) = bank
        .call(gm_bank_finalize_json, &usage, &book)
        .expect("finalize");
    let finv = &fin["invoices"][0];
    assert_eq!(finv["credits_applied"], inv["credits_applied"]);
    assert_eq!(finv["total"], inv["total"]);
    let v = bank.verify();
    assert_eq!(v["transactions"], 2);
    assert_eq!(finv["ledger_head"], v["head"]);
    let (after, b1) = bank.balance(&tenant, LATER);
    assert_ne!(after, before);
    let burnt: rust_decimal::Decimal = applied[0]["credits"]
        .as_str()
        .expect("a decimal string")
        .parse()
        .expect("a decimal");
    let left: rust_decimal::Decimal = remaining(&b1)
        .first()
        .map_or(Ok(rust_decimal::Decimal::ZERO), |r| r.parse())
        .expect("a decimal");
    assert_eq!(left + burnt, rust_decimal::Decimal::from(100), "{after}");
    assert!(burnt > rust_decimal::Decimal::ZERO);

    // Finalizing again is idempotent: the same invoice, nothing applied twice.
    let (second, _) = bank
        .call(gm_bank_finalize_json, &usage, &book)
        .expect("finalize again");
    assert_eq!(second, first);
    // A preview now shows the invoice as finalized.
    let (third, _) = bank
        .call(gm_bank_preview_json, &usage, &book)
        .expect("preview after finalize");
    assert_eq!(third, first);
    assert_eq!(bank.balance(&tenant, LATER).0, after);
    assert_eq!(bank.verify(), v);

    // At 0 = now: the same credits, the instant differs.
    let (_, now) = bank.balance(&tenant, 0);
    assert_eq!(remaining(&now), remaining(&b1));
    assert_ne!(now["at"], b1["at"]);
    // A tenant the bank has never seen: an empty balance.
    let (_, empty) = bank.balance("someone-else", 0);
    assert_eq!(remaining(&empty), Vec::<String>::new());

    // Another handle on the same ledger sees the same books, and finalizes nothing twice.
    let other = open(&bank.location).expect("opens again");
    let mut out: *mut c_char = ptr::null_mut();
    // SAFETY: a live bank, NUL-terminated strings, a writable pointer.
    let s = unsafe { gm_bank_finalize_json(other, usage.as_ptr(), book.as_ptr(), &mut out) };
    assert_eq!(s, OK, "{}", last_error());
    assert_eq!(take_json(out).0, first);
    // SAFETY: a bank from `gm_bank_open`, freed once.
    unsafe { gm_bank_free(other) };
    assert_eq!(bank.verify(), v);
}

#[test]
fn grant_requests_are_checked() {
    let bank = Bank::new();
    let bad = [
        ("not json", "grant_json"),
        (
            r#"{"tenant": "acme", "credits": 100, "rate": "0.01"}"#,
            "expected a string",
        ),
        (
            r#"{"tenant": "acme", "credits": "100", "rate": "0.01", "colour": 1}"#,
            "colour",
        ),
        (
            r#"{"tenant": "acme", "credits": "1e3", "rate": "0.01"}"#,
            "credits",
        ),
        (
            r#"{"tenant": "acme", "credits": "-5", "rate": "0.01"}"#,
            "positive",
        ),
        (
            r#"{"tenant": "acme", "credits": "5", "rate": "0"}"#,
            "positive",
        ),
        (
            r#"{"tenant": "acme", "credits": "5", "rate": "0.0000000001"}"#,
            "decimals",
        ),
        (
            r#"{"tenant": "acme", "credits": "5", "rate": "1", "kind": "reservation"}"#,
            "purchased",
        ),
        (
            r#"{"tenant": "acme", "credits": "5", "rate": "1", "meters": ["sm_sec"]}"#,
            "sm_sec",
        ),
        (r#"{"tenant": "", "credits": "5", "rate": "1"}"#, "tenant"),
        (
            r#"{"tenant": "idle", "credits": "5", "rate": "1"}"#,
            "tenant",
        ),
        (
            r#"{"tenant": "acme", "credits": "5", "rate": "1", "effective_ns": 10, "expires_ns": 10}"#,
            "expires",
        ),
        (
            r#"{"tenant": "acme", "credits": "5", "rate": "1", "key": ""}"#,
            "key",
        ),
        (r#"{"credits": "5", "rate": "1"}"#, "tenant"),
        // Issue 30 item 17: an object only (serde read an array field by field), and integers
        // past their range are too large, not "floating point".
        (
            r#"["acme", "5", "1", 0, null, null, "purchased", [], [], "k", 1700000000000000000]"#,
            "must be a JSON object",
        ),
        (
            r#"{"tenant": "acme", "credits": "5", "rate": "1", "at_ns": 18446744073709551616}"#,
            "18446744073709551616 is too large",
        ),
        (
            r#"{"tenant": "acme", "credits": "5", "rate": "1", "expires_ns": 1e30}"#,
            "1e30 is not an integer",
        ),
        (
            r#"{"tenant": "acme", "credits": "5", "rate": "1", "priority": 9223372036854775808}"#,
            "9223372036854775808 is too large",
        ),
    ];
    for (json, says) in bad {
        let (s, msg) = bank.grant(json).expect_err(json);
        assert_eq!(
            s,
            code(gm_status_code::GM_ERR_INVALID_ARGUMENT),
            "{json}: {msg}"
        );
        assert!(msg.contains(says), "{json}: {msg}");
        assert!(!msg.contains("floating point"), "{json}: {msg}");
    }
    assert_eq!(bank.verify()["transactions"], 0);
    // Scopes and defaults.
    let g = bank
        .grant(
            r#"{"tenant": "unattributed", "credits": "2.5", "rate": "1", "skus": ["h200"],
                   "meters": ["sm_ns"], "at_ns": 1700000000000000000}"#,
        )
        .expect("granted");
    assert_eq!(g["applied"], Value::Bool(true));
    assert_eq!(g["grant"]["kind"], "purchased");
    assert_eq!(g["grant"]["priority"], 0);
    assert_eq!(g["grant"]["effective"], "2023-11-14T22:13:20Z");
    assert_eq!(g["grant"]["skus"], serde_json::json!(["h200"]));
    assert_eq!(g["grant"]["meters"], serde_json::json!(["sm_ns"]));
    assert_eq!(bank.verify()["transactions"], 1);
}

#[test]
fn nulls_and_bad_utf8_leave_outputs_untouched() {
    let bank = Bank::new();
    let usage = usage_json();
    let book = price_book();
    let grant = c(r#"{"tenant": "acme", "credits": "1", "rate": "1"}"#);
    let tenant = c("acme");
    let bad_utf8 = CString::new(vec![b'a', 0xff, b'b']).expect("no NUL");
    let null_arg = code(gm_status_code::GM_ERR_NULL_ARGUMENT);
    let utf8 = code(gm_status_code::GM_ERR_INVALID_UTF8);
    let sentinel = ptr::dangling_mut::<c_char>();
    let nul = ptr::null::<c_char>();

    // gm_bank_open
    let mut h = ptr::dangling_mut::<gm_bank>();
    // SAFETY: NULL location; a writable pointer.
    assert_eq!(unsafe { gm_bank_open(nul, &mut h) }, null_arg);
    assert!(last_error().contains("location"));
    assert_eq!(h, ptr::dangling_mut::<gm_bank>());
    // SAFETY: a NUL-terminated string; NULL out.
    assert_eq!(
        unsafe { gm_bank_open(tenant.as_ptr(), ptr::null_mut()) },
        null_arg
    );
    assert!(last_error().contains("out"));
    // SAFETY: a NUL-terminated string; a writable pointer.
    assert_eq!(unsafe { gm_bank_open(bad_utf8.as_ptr(), &mut h) }, utf8);
    assert!(last_error().contains("location"));
    assert_eq!(h, ptr::dangling_mut::<gm_bank>());
    // SAFETY: NULL is fine.
    unsafe { gm_bank_free(ptr::null_mut()) };

    // gm_bank_grant_json
    let mut out = sentinel;
    // SAFETY: NULL bank; the rest valid.
    let s = unsafe { gm_bank_grant_json(ptr::null_mut(), grant.as_ptr(), &mut out) };
    assert_eq!(s, null_arg);
    assert!(last_error().contains("bank"));
    // SAFETY: NULL grant_json.
    let s = unsafe { gm_bank_grant_json(bank.handle, nul, &mut out) };
    assert_eq!(s, null_arg);
    assert!(last_error().contains("grant_json"));
    // SAFETY: NULL out_json.
    let s = unsafe { gm_bank_grant_json(bank.handle, grant.as_ptr(), ptr::null_mut()) };
    assert_eq!(s, null_arg);
    assert!(last_error().contains("out_json"));
    // SAFETY: a NUL-terminated string that is not UTF-8.
    let s = unsafe { gm_bank_grant_json(bank.handle, bad_utf8.as_ptr(), &mut out) };
    assert_eq!(s, utf8);
    assert!(last_error().contains("grant_json"));
    assert_eq!(out, sentinel);

    // gm_bank_preview_json and gm_bank_finalize_json
    for f in [gm_bank_preview_json, gm_bank_finalize_json] {
        let mut out = sentinel;
        let cases: [(*mut gm_bank, *const c_char, *const c_char, &str); 3] = [
            (ptr::null_mut(), usage.as_ptr(), book.as_ptr(), "bank"),
            (bank.handle, nul, book.as_ptr(), "usage_json"),
            (bank.handle, usage.as_ptr(), nul, "price_book_toml"),
        ];
        for (b, u, p, name) in cases {
            // SAFETY: NULLs or live arguments; a writable pointer.
            assert_eq!(unsafe { f(b, u, p, &mut out) }, null_arg);
            assert!(last_error().contains(name), "{}", last_error());
        }
        // SAFETY: NULL output.
        let s = unsafe { f(bank.handle, usage.as_ptr(), book.as_ptr(), ptr::null_mut()) };
        assert_eq!(s, null_arg);
        assert!(last_error().contains("out_invoice_json"));
        // SAFETY: NUL-terminated strings; a writable pointer.
        let s = unsafe { f(bank.handle, bad_utf8.as_ptr(), book.as_ptr(), &mut out) };
        assert_eq!(s, utf8);
        assert!(last_error().contains("usage_json"));
        // SAFETY: as above.
        let s = unsafe { f(bank.handle, usage.as_ptr(), bad_utf8.as_ptr(), &mut out) };
        assert_eq!(s, utf8);
        assert!(last_error().contains("price_book_toml"));
        assert_eq!(out, sentinel);
    }

    // gm_bank_balance_json
    let mut out = sentinel;
    // SAFETY: NULL bank.
    let s = unsafe { gm_bank_balance_json(ptr::null_mut(), tenant.as_ptr(), 0, &mut out) };
    assert_eq!(s, null_arg);
    // SAFETY: NULL tenant.
    let s = unsafe { gm_bank_balance_json(bank.handle, nul, 0, &mut out) };
    assert_eq!(s, null_arg);
    assert!(last_error().contains("tenant"));
    // SAFETY: NULL out_json.
    let s = unsafe { gm_bank_balance_json(bank.handle, tenant.as_ptr(), 0, ptr::null_mut()) };
    assert_eq!(s, null_arg);
    // SAFETY: not UTF-8.
    let s = unsafe { gm_bank_balance_json(bank.handle, bad_utf8.as_ptr(), 0, &mut out) };
    assert_eq!(s, utf8);
    let bad_name = c("a\u{7}b");
    // SAFETY: a NUL-terminated string; a writable pointer.
    let s = unsafe { gm_bank_balance_json(bank.handle, bad_name.as_ptr(), 0, &mut out) };
    assert_eq!(s, code(gm_status_code::GM_ERR_INVALID_ARGUMENT));
    assert!(last_error().contains("tenant"));
    assert_eq!(out, sentinel);

    // gm_bank_verify_json
    // SAFETY: NULL bank.
    assert_eq!(
        unsafe { gm_bank_verify_json(ptr::null_mut(), &mut out) },
        null_arg
    );
    // SAFETY: NULL out_json.
    let s = unsafe { gm_bank_verify_json(bank.handle, ptr::null_mut()) };
    assert_eq!(s, null_arg);
    assert!(last_error().contains("out_json"));
    assert_eq!(out, sentinel);

    // Nothing was written.
    assert_eq!(bank.verify()["transactions"], 0);
}

#[test]
fn bad_usage_and_bad_books_change_nothing() {
    let bank = Bank::new();
    let usage = usage_json();
    let book = price_book();
    bank.grant(r#"{"tenant": "acme", "credits": "1", "rate": "1", "key": "k"}"#)
        .expect("granted");
    let usage_code = code(gm_status_code::GM_ERR_USAGE_JSON);
    let book_code = code(gm_status_code::GM_ERR_PRICE_BOOK);
    // An edited report: its digest no longer matches.
    let edited = c(&usage.to_str().expect("UTF-8").replacen(
        "\"window_seconds\":3600",
        "\"window_seconds\":60",
        1,
    ));
    for f in [gm_bank_preview_json, gm_bank_finalize_json] {
        for bad in [
            c("{"),
            c(r#"{"schema": "gpumeter.usage/v9"}"#),
            c("[]"),
            edited.clone(),
        ] {
            let (s, msg) = bank.call(f, &bad, &book).expect_err("bad usage");
            assert_eq!(s, usage_code, "{msg}");
            assert!(msg.contains("usage_json"), "{msg}");
        }
        for bad in [
            c("schema = "),
            c("schema = \"gpumeter.pricebook/v1\"\n"),
            c("[[rate]]\nx = 1"),
        ] {
            let (s, msg) = bank.call(f, &usage, &bad).expect_err("bad book");
            assert_eq!(s, book_code, "{msg}");
            assert!(msg.contains("price_book_toml"), "{msg}");
        }
    }
    assert_eq!(bank.verify()["transactions"], 1);
    // A book of another currency than the bank's, once the bank has one.
    bank.call(gm_bank_finalize_json, &usage, &book)
        .expect("finalized in USD");
    let eur =
        c(&book
            .to_str()
            .expect("UTF-8")
            .replacen("currency = \"USD\"", "currency = \"EUR\"", 1));
    let (s, msg) = bank
        .call(gm_bank_finalize_json, &usage, &eur)
        .expect_err("another currency");
    assert_eq!(s, code(gm_status_code::GM_ERR_BANK), "{msg}");
    assert_eq!(bank.verify()["transactions"], 2);
}

#[test]
fn a_file_that_is_not_a_bank_is_refused_untouched() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "not a database, just notes\n".repeat(20)).expect("written");
    let (s, msg) = open(path.to_str().expect("a UTF-8 path")).expect_err("not a bank");
    assert_eq!(s, code(gm_status_code::GM_ERR_BANK));
    assert!(msg.contains("notes.txt"), "{msg}");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "not a database, just notes\n".repeat(20)
    );
    let missing = dir.path().join("no/such/dir/bank.db");
    let (s, msg) = open(missing.to_str().expect("a UTF-8 path")).expect_err("no directory");
    assert_eq!(s, code(gm_status_code::GM_ERR_BANK), "{msg}");
    // A new bank verifies as empty.
    let bank = Bank::new();
    let v = bank.verify();
    assert_eq!(v["transactions"], 0);
    assert_eq!(v["head"], Value::Null);
}

/// A PostgreSQL bank that cannot be opened is `GM_ERR_BANK` naming the URL without its
/// password: an unreachable server (nothing listens on port 1; the password in the user part
/// or as a parameter; `sslmode=disable`, so the failure is the connection's whatever TLS roots
/// the system has), and a login the test server refuses (a role it does not have).
#[test]
fn a_postgres_bank_that_cannot_open_names_the_url_without_its_password() {
    for (url, shown) in [
        (
            "postgres://billing:s3cret-pw@127.0.0.1:1/ledger?sslmode=disable".to_string(),
            "postgres://billing:***@127.0.0.1:1/ledger",
        ),
        (
            "postgresql://127.0.0.1:1/ledger?user=billing&password=s3cret-pw&sslmode=disable"
                .to_string(),
            "password=***",
        ),
    ] {
        let (s, msg) = open(&url).expect_err("nothing listens on port 1");
        assert_eq!(s, code(gm_status_code::GM_ERR_BANK), "{msg}");
        assert!(msg.contains(shown), "{msg}");
        assert!(msg.contains("cannot connect"), "{msg}");
        assert!(!msg.contains("s3cret-pw"), "{msg}");
    }
    let Some(schema) = gpumeter_test_postgres::Schema::fresh("ffi_refused_login") else {
        return;
    };
    let url = format!("{}&user=gm_no_such_role&password=s3cret-pw", schema.url);
    let (s, msg) = open(&url).expect_err("no such role");
    assert_eq!(s, code(gm_status_code::GM_ERR_BANK), "{msg}");
    assert!(msg.contains("gm_no_such_role"), "{msg}");
    assert!(msg.contains("password=***"), "{msg}");
    assert!(!msg.contains("s3cret-pw"), "{msg}");
}

/// A tampered PostgreSQL ledger fails `gm_bank_verify_json` naming the transaction, as an
/// SQLite one does.
#[test]
fn a_tampered_postgres_ledger_fails_verification_naming_the_transaction() {
    let Some(bank) = Bank::postgres("ffi_tamper") else {
        return;
    };
    bank.grant(r#"{"tenant": "acme", "credits": "10", "rate": "1", "key": "k"}"#)
        .expect("granted");
    assert_eq!(bank.verify()["transactions"], 1);
    let edited = gpumeter_test_postgres::execute(
        &bank.schema().url,
        "UPDATE postings SET amount = 11 WHERE seq = 1 AND idx = 0",
    )
    .expect("update");
    assert_eq!(edited, 1);
    let sentinel = ptr::dangling_mut::<c_char>();
    let mut out = sentinel;
    // SAFETY: a live bank, a writable pointer.
    let s = unsafe { gm_bank_verify_json(bank.handle, &mut out) };
    assert_eq!(s, code(gm_status_code::GM_ERR_BANK));
    let msg = last_error();
    assert!(msg.contains("transaction 1 (`grant:k`)"), "{msg}");
    assert_eq!(out, sentinel);
}

#[test]
fn a_tampered_ledger_fails_verification_naming_the_transaction() {
    let bank = Bank::new();
    bank.grant(r#"{"tenant": "acme", "credits": "10", "rate": "1", "key": "k"}"#)
        .expect("granted");
    let good = bank.verify();
    assert_eq!(good["transactions"], 1);
    assert_eq!(good["postings"], 2);
    assert_eq!(good["accounts"], 2);
    let conn = rusqlite::Connection::open(bank.path()).expect("open with rusqlite");
    let edited = conn
        .execute(
            "UPDATE postings SET amount = '11' WHERE seq = 1 AND idx = 0",
            [],
        )
        .expect("update");
    assert_eq!(edited, 1);
    drop(conn);
    let sentinel = ptr::dangling_mut::<c_char>();
    let mut out = sentinel;
    // SAFETY: a live bank, a writable pointer.
    let s = unsafe { gm_bank_verify_json(bank.handle, &mut out) };
    assert_eq!(s, code(gm_status_code::GM_ERR_BANK));
    let msg = last_error();
    assert!(msg.contains("transaction 1 (`grant:k`)"), "{msg}");
    assert_eq!(out, sentinel);
}

#[test]
fn finalizations_at_once_apply_once_sqlite() {
    finalizations_at_once_apply_once(Bank::new());
}

#[test]
fn finalizations_at_once_apply_once_postgres() {
    if let Some(bank) = Bank::postgres("ffi_at_once") {
        finalizations_at_once_apply_once(bank);
    }
}

/// Eight threads finalize the same usage on `bank` at once: one finalization.
fn finalizations_at_once_apply_once(bank: Bank) {
    let usage = usage_json();
    let book = price_book();
    let tenant = tenant_of(&usage);
    bank.grant(&format!(
        r#"{{"tenant": "{tenant}", "credits": "100", "rate": "0.01", "effective_ns": 0}}"#
    ))
    .expect("granted");
    // Four threads share the bank's handle, four open the ledger themselves.
    let shared = bank.handle as usize;
    let path = bank.location.clone();
    let answers: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..8)
            .map(|i| {
                let (usage, book, path) = (&usage, &book, &path);
                scope.spawn(move || {
                    let own = (i % 2 == 1).then(|| open(path).expect("opens"));
                    let h = own.unwrap_or(shared as *mut gm_bank);
                    let mut out: *mut c_char = ptr::null_mut();
                    // SAFETY: a live bank (shared: it synchronizes inside), NUL-terminated
                    // strings, a writable pointer.
                    let s = unsafe {
                        gm_bank_finalize_json(h, usage.as_ptr(), book.as_ptr(), &mut out)
                    };
                    assert_eq!(s, OK, "{}", last_error());
                    if let Some(own) = own {
                        // SAFETY: this thread's bank, freed once.
                        unsafe { gm_bank_free(own) };
                    }
                    take_json(out).0
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("no panic"))
            .collect()
    });
    assert!(answers.iter().all(|a| *a == answers[0]));
    assert_eq!(bank.verify()["transactions"], 2);
}

/// The usage of the smoke recording through a C ABI meter: (snapshot, then drain of
/// everything), both reports of one stream.
fn stream_reports() -> (CString, CString) {
    let path = c(root()
        .join("examples/data/h200-cuda13-smoke.gmr")
        .to_str()
        .expect("UTF-8 path"));
    let mut rec = ptr::null_mut();
    // SAFETY: a NUL-terminated path, a writable pointer.
    assert_eq!(unsafe { gm_recording_open(path.as_ptr(), 0, &mut rec) }, OK);
    // SAFETY: a live recording.
    let api = unsafe { gm_recording_cupti_api_version(rec) };
    let config = c(&format!(r#"{{"cupti_api_version": {api}}}"#));
    let mut m = ptr::null_mut();
    // SAFETY: a NUL-terminated config, a writable pointer.
    assert_eq!(unsafe { gm_meter_new(config.as_ptr(), &mut m) }, OK);
    loop {
        let mut it = gm_recording_item::new();
        // SAFETY: a live recording, a sized item.
        assert_eq!(unsafe { gm_recording_next(rec, &mut it) }, OK);
        let kind = it.kind;
        // SAFETY (each call): a live meter and what the recording's item points to.
        let s = if kind == gm_recording_item_kind::GM_ITEM_END as u32 {
            break;
        } else if kind == gm_recording_item_kind::GM_ITEM_DEVICE as u32 {
            unsafe { gm_meter_register_device(m, it.device) }
        } else if kind == gm_recording_item_kind::GM_ITEM_BUFFER as u32 {
            unsafe { gm_meter_ingest_cupti_buffer(m, it.buffer, it.buffer_size) }
        } else if kind == gm_recording_item_kind::GM_ITEM_PROCESS_EXIT as u32 {
            unsafe { gm_meter_process_exited(m, it.pid, it.timestamp_ns) }
        } else {
            unsafe { gm_meter_report_dropped(m, it.device_id, it.dropped) }
        };
        assert_eq!(s, OK, "{}", last_error());
    }
    let mut out = ptr::null_mut();
    // SAFETY: a live meter, a writable pointer.
    assert_eq!(unsafe { gm_meter_usage_json(m, &mut out) }, OK);
    let snapshot = c(&take_json(out).0);
    let mut out = ptr::null_mut();
    // SAFETY: a live meter, a writable pointer.
    assert_eq!(
        unsafe { gm_meter_drain_usage_json(m, u64::MAX, &mut out) },
        OK
    );
    let drained = c(&take_json(out).0);
    // SAFETY: handles made above, freed once.
    unsafe {
        gm_meter_free(m);
        gm_recording_free(rec);
    }
    (snapshot, drained)
}

/// Σ of the quantities of an invoice document's usage lines (all tenants).
fn usage_lines(doc: &Value) -> usize {
    doc["invoices"]
        .as_array()
        .map(|inv| {
            inv.iter()
                .flat_map(|i| i["lines"].as_array().cloned().unwrap_or_default())
                .filter(|l| l["meter"].is_string())
                .count()
        })
        .unwrap_or(0)
}

/// A snapshot (`"complete": false`) is not finalized: its windows may still grow (issue 30
/// item 12; before, it was finalized and its half-window billed as final). A preview of it
/// says so on every invoice. The drained report of the same stream and windows finalizes,
/// once.
#[test]
fn a_snapshot_is_refused_and_the_drained_report_of_its_windows_is_billed_once() {
    let bank = Bank::new();
    let (snapshot, drained) = stream_reports();
    let parsed: Value = serde_json::from_str(snapshot.to_str().expect("UTF-8")).expect("JSON");
    assert_eq!(parsed["complete"], Value::Bool(false));
    let (status, msg) = bank
        .call(gm_bank_finalize_json, &snapshot, &price_book())
        .expect_err("the snapshot is refused");
    assert_eq!(
        status,
        gm_status_code::GM_ERR_USAGE_JSON as gm_status,
        "{msg}"
    );
    assert!(msg.contains("incomplete"), "{msg}");
    let (_, preview) = bank
        .call(gm_bank_preview_json, &snapshot, &price_book())
        .expect("a snapshot previews");
    for inv in preview["invoices"].as_array().expect("invoices") {
        assert!(
            inv["warnings"]
                .as_array()
                .expect("warnings")
                .iter()
                .any(|w| w["code"] == "incomplete_usage"),
            "{inv}"
        );
    }
    let (_, first) = bank
        .call(gm_bank_finalize_json, &drained, &price_book())
        .expect("the drained report finalizes");
    assert!(usage_lines(&first) > 0, "{first}");
    let (_, again) = bank
        .call(gm_bank_finalize_json, &drained, &price_book())
        .expect("a retry changes nothing");
    assert_eq!(again["invoices"], first["invoices"]);
}
