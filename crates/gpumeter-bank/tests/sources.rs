//! A source is billed once (issue 30 item 2, DESIGN §6 "Sources billed once"): usage of a
//! (source, device, time) is billed at most once, whatever the tenant, window size or period,
//! and a report that names no source can be previewed, never finalized.
//!
//! Each body runs on a memory ledger, on SQLite and (feature `postgres`, the test server) on
//! PostgreSQL.

mod support;

use gpumeter_bank::{finalize, BankError, Ledger, MemoryLedger};
use gpumeter_core::{MeterKind, Quantity, UsageReport, UsageRow};
use support::{book, hex_of, t, usage, Backend, Place};

/// December 2026.
fn dec() -> Option<(u64, u64)> {
    Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z")))
}

/// A sealed report of source `source` (one H100, `GPU-0`) metered in windows of
/// `window_seconds`: `per_window` launches of `tenant` in each window of the hour starting
/// 2026-12-01T00:00:00Z.
fn trace(source: &str, tenant: &str, window_seconds: u64, per_window: u128) -> UsageReport {
    let mut r = usage(tenant, "2026-12-01T00:00:00Z", 1);
    r.sources[0].name = format!("{source}.json");
    r.sources[0].sha256 = hex_of(source);
    r.window_seconds = window_seconds;
    let start = t("2026-12-01T00:00:00Z");
    r.usage = (0..3600 / window_seconds)
        .map(|k| UsageRow {
            tenant: tenant.into(),
            device: 0,
            device_key: "GPU-0".into(),
            window_start: gpumeter_core::time::rfc3339(start + k * window_seconds * 1_000_000_000),
            meter: MeterKind::KernelLaunches,
            quantity: Quantity(per_window),
        })
        .collect();
    r.seal().expect("seal");
    r
}

/// The same trace is billed once: under another window size, for another tenant, and a
/// report that names no source is refused (but previews).
fn a_trace_is_billed_once<L: Ledger>(bank: &mut L) -> Result<(), BankError> {
    let b = book();
    let hourly = trace("trace", "acme", 3600, 6_000);
    finalize(bank, &hourly, &b, dec(), true)?;
    // The same trace metered in one-minute windows: the same launches, other windows.
    let minutes = trace("trace", "acme", 60, 100);
    let err = finalize(bank, &minutes, &b, dec(), true).expect_err("billed again under 1 min");
    assert!(err.to_string().contains("trace.json"), "{err}");
    // The same trace with its usage given to another tenant.
    let other = trace("trace", "beta", 3600, 6_000);
    let err = finalize(bank, &other, &b, dec(), true).expect_err("billed again to beta");
    assert!(err.to_string().contains("trace.json"), "{err}");
    // A report that names no source: previewed, never finalized.
    let mut anonymous = trace("hand-written", "gamma", 3600, 2_000);
    anonymous.sources.clear();
    anonymous.seal().expect("seal");
    let preview = finalize(bank, &anonymous, &b, dec(), false)?;
    assert_eq!(preview.document.invoices.len(), 1);
    let err = finalize(bank, &anonymous, &b, dec(), true).expect_err("no source");
    assert!(err.to_string().contains("no source"), "{err}");
    Ok(())
}

#[test]
fn a_trace_is_billed_once_on_memory() {
    a_trace_is_billed_once(&mut MemoryLedger::new()).expect("finalizations");
}

fn a_trace_is_billed_once_on(backend: Backend) {
    let Some(place) = Place::new(backend, "billed_once") else {
        return;
    };
    a_trace_is_billed_once(&mut place.open()).expect("finalizations");
}

#[test]
fn a_trace_is_billed_once_on_sqlite() {
    a_trace_is_billed_once_on(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_trace_is_billed_once_on_postgres() {
    a_trace_is_billed_once_on(Backend::Postgres);
}
