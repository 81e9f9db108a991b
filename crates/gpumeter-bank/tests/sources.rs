//! A source is billed once (issue 30 item 2, docs/BANK.md, "Sources billed once"): usage of a
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

/// Finalizers of one source for different tenants at once, each on its own connection (on
/// PostgreSQL their tenants' locks do not meet): exactly one bills it, the others are refused
/// as billed before. Several rounds, each with a source of its own.
fn one_source_for_tenants_at_once(backend: Backend) {
    const AT_ONCE: usize = 4;
    let Some(place) = Place::new(backend, "source_at_once") else {
        return;
    };
    let b = book();
    // The bank's currency first, so no finalizer here holds the whole bank.
    finalize(
        &mut place.open(),
        &trace("seed", "seed", 3600, 1_000),
        &b,
        dec(),
        true,
    )
    .expect("the first finalization");
    for round in 0..5 {
        let source = format!("shared-{round}");
        let reports: Vec<UsageReport> = (0..AT_ONCE)
            .map(|i| trace(&source, &format!("tenant-{i}"), 3600, 2_000))
            .collect();
        let start = std::sync::Barrier::new(AT_ONCE);
        let results: Vec<Result<(), String>> = std::thread::scope(|s| {
            let handles: Vec<_> = reports
                .iter()
                .map(|r| {
                    let (start, place, b) = (&start, &place, &b);
                    s.spawn(move || {
                        let mut l = place.open();
                        start.wait();
                        finalize(&mut l, r, b, dec(), true)
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a finalizer"))
                .collect()
        });
        assert_eq!(
            results.iter().filter(|r| r.is_ok()).count(),
            1,
            "round {round}: {results:?}"
        );
        for e in results.iter().filter_map(|r| r.as_ref().err()) {
            assert!(e.contains("was billed before"), "{e}");
        }
    }
    place
        .open()
        .atomically(false, |t| gpumeter_bank::verify(t))
        .expect("verify");
}

#[test]
fn one_source_for_tenants_at_once_on_sqlite() {
    one_source_for_tenants_at_once(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn one_source_for_tenants_at_once_on_postgres() {
    one_source_for_tenants_at_once(Backend::Postgres);
}

/// docs/BANK.md, "Sources billed once" as a property: one source's usage (launches per minute over
/// two hours of one device) metered in 1-minute, 15-minute or 1-hour windows, finalized for
/// random tenants and periods in any sequence: every (source, device, nanosecond) is billed at
/// most once. A finalization succeeds exactly when none of the minutes it bills was billed
/// before and its period is equal or disjoint to each of its tenant's finalized periods.
mod billed_once {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;
    use std::collections::BTreeMap;

    const MINUTE: u64 = 60_000_000_000;
    const WINDOWS: [u64; 3] = [60, 900, 3600];

    /// The source's report in `window_seconds` windows, all of `tenant`: launches per minute
    /// summed into windows.
    fn metered(per_minute: &[u128], tenant: &str, window_seconds: u64) -> UsageReport {
        let mut r = trace("the-trace", tenant, 3600, 1);
        r.window_seconds = window_seconds;
        let start = t("2026-12-01T00:00:00Z");
        let per = (window_seconds / 60) as usize;
        r.usage = per_minute
            .chunks(per)
            .enumerate()
            .map(|(k, c)| UsageRow {
                tenant: tenant.into(),
                device: 0,
                device_key: "GPU-0".into(),
                window_start: gpumeter_core::time::rfc3339(
                    start + k as u64 * window_seconds * 1_000_000_000,
                ),
                meter: MeterKind::KernelLaunches,
                quantity: Quantity(c.iter().sum()),
            })
            .filter(|r| r.quantity.0 > 0)
            .collect();
        r.seal().expect("seal");
        r
    }

    /// One attempt: (tenant, window size, period start and length in quarter hours from
    /// 2026-12-01T00:00Z; a 1-hour window rounds them out to hours).
    type Attempt = (usize, usize, u64, u64);

    pub(super) fn billed_at_most_once<L: Ledger>(
        bank: &mut L,
        per_minute: &[u128],
        attempts: &[Attempt],
    ) -> Result<(), TestCaseError> {
        let b = book();
        let start = t("2026-12-01T00:00:00Z");
        // Minute → the attempt that billed it.
        let mut billed: BTreeMap<u64, usize> = BTreeMap::new();
        // Tenant → its finalized periods.
        let mut periods: BTreeMap<usize, Vec<(u64, u64)>> = BTreeMap::new();
        for (i, &(tenant, w, q0, len)) in attempts.iter().enumerate() {
            let window = WINDOWS[w];
            let unit = (window * 1_000_000_000).max(15 * MINUTE);
            let from = start + q0 * 15 * MINUTE / unit * unit;
            let to = (start + (q0 + len) * 15 * MINUTE).div_ceil(unit) * unit;
            let to = to.max(from + unit);
            let r = metered(per_minute, &format!("t{tenant}"), window);
            // The minutes this finalization would bill: those of its rows in the period.
            let minutes: Vec<u64> = r
                .usage
                .iter()
                .map(|row| t(&row.window_start))
                .filter(|&ws| from <= ws && ws < to)
                .flat_map(|ws| (0..window / 60).map(move |m| ws + m * MINUTE))
                .collect();
            let clash = minutes.iter().any(|m| billed.contains_key(m));
            let overlap = periods.get(&tenant).is_some_and(|ps| {
                ps.iter()
                    .any(|&(a, b)| (a, b) != (from, to) && a < to && from < b)
            });
            let outcome = finalize(bank, &r, &b, Some((from, to)), true);
            match outcome {
                // The same report for the same tenant and period: the same finalization key,
                // already applied; nothing changed.
                Ok(f)
                    if f.outcomes
                        .iter()
                        .all(|o| *o == gpumeter_bank::Outcome::AlreadyFinalized) =>
                {
                    prop_assert!(
                        f.outcomes.is_empty()
                            || periods
                                .get(&tenant)
                                .is_some_and(|p| p.contains(&(from, to)))
                    );
                }
                Ok(f) => {
                    prop_assert!(!clash, "attempt {i} billed a minute billed before");
                    prop_assert!(!overlap, "attempt {i}: overlapping periods");
                    if !minutes.is_empty() {
                        prop_assert_eq!(f.document.invoices.len(), 1);
                        periods.entry(tenant).or_default().push((from, to));
                    }
                    for m in minutes {
                        billed.insert(m, i);
                    }
                }
                Err(e) => {
                    prop_assert!(clash || overlap, "attempt {i} refused for nothing: {e}");
                }
            }
        }
        // The ledger agrees: Σ launches billed (the billable quantities of all invoices,
        // supplements' changes included) + the fragments carried = the minutes billed.
        let finalizations = bank
            .atomically(false, |t| t.transactions(Some("finalize")))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut lines: i128 = 0;
        for tx in &finalizations {
            let inv: gpumeter_rating::Invoice =
                serde_json::from_value(tx.tx.memo["invoice"].clone())
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            for l in &inv.lines {
                lines += match (l.billable_quantity, l.extensions.change) {
                    (Some(q), _) => q.0 as i128,
                    (None, Some(c)) if c.billable_quantity.negative => {
                        -(c.billable_quantity.magnitude as i128)
                    }
                    (None, Some(c)) => c.billable_quantity.magnitude as i128,
                    (None, None) => 0,
                };
            }
        }
        for tenant in 0..3 {
            let bal = gpumeter_bank::balance(bank, &format!("t{tenant}"), u64::MAX)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            lines += bal
                .fragments
                .iter()
                .map(|f| f.quantity.0 as i128)
                .sum::<i128>();
        }
        let lines = lines as u128;
        let expected: u128 = billed
            .keys()
            .map(|m| per_minute[((m - start) / MINUTE) as usize])
            .sum();
        prop_assert_eq!(lines, expected);
        Ok(())
    }

    pub(super) fn per_minute() -> impl Strategy<Value = Vec<u128>> {
        proptest::collection::vec(0u128..50, 120)
    }

    pub(super) fn attempts() -> impl Strategy<Value = Vec<Attempt>> {
        proptest::collection::vec((0usize..3, 0usize..3, 0u64..8, 1u64..8), 1..8)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn every_nanosecond_is_billed_at_most_once_on_memory(
            per_minute in per_minute(),
            attempts in attempts(),
        ) {
            billed_at_most_once(&mut MemoryLedger::new(), &per_minute, &attempts)?;
        }
    }
}

fn billed_at_most_once_on(backend: Backend) {
    support::run_cases(
        backend,
        "billed_once",
        8,
        (billed_once::per_minute(), billed_once::attempts()),
        |place, (per_minute, attempts)| {
            billed_once::billed_at_most_once(&mut place.open(), &per_minute, &attempts)
        },
    );
}

#[test]
fn every_nanosecond_is_billed_at_most_once_on_sqlite() {
    billed_at_most_once_on(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn every_nanosecond_is_billed_at_most_once_on_postgres() {
    billed_at_most_once_on(Backend::Postgres);
}
