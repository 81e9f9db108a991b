//! As-of balances never fail (issue 30 item 9, DESIGN §6): after finalizations in and out of
//! period order, `balance(tenant, at)` answers for every instant, and no fragment or credit
//! balance is negative at any instant.
//!
//! Each body runs on a memory ledger, on SQLite and (feature `postgres`, the test server) on
//! PostgreSQL.

mod support;

use gpumeter_bank::{balance, finalize, BankError, Ledger, MemoryLedger};
use support::{book, report_of, t, Backend, Place};

/// Every instant at which a balance can change, and one between each two: the business times
/// of the ledger's transactions, a nanosecond before each, and the ends.
fn instants<L: Ledger>(bank: &mut L) -> Result<Vec<u64>, BankError> {
    let mut out = vec![0, u64::MAX];
    for tx in bank.atomically(false, |t| t.transactions(None))? {
        let at = t(&tx.tx.at);
        out.extend([at.saturating_sub(1), at, at.saturating_add(1)]);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// January finalized before December (the book bills whole thousands of launches): January
/// leaves a fragment of 700 launches; December's 300 launches would, with it, make a whole
/// thousand. Every as-of balance answers, and none is negative.
fn out_of_order_periods_keep_every_balance<L: Ledger>(bank: &mut L) -> Result<(), BankError> {
    let b = book();
    let dec = (t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"));
    let jan = (t("2027-01-01T00:00:00Z"), t("2027-02-01T00:00:00Z"));
    let january = report_of(&[("acme", "2027-01-01T00:00:00Z", 1_700)], "january");
    let december = report_of(&[("acme", "2026-12-01T00:00:00Z", 300)], "december");
    finalize(bank, &january, &b, Some(jan), true)?;
    finalize(bank, &december, &b, Some(dec), true)?;
    for at in instants(bank)? {
        let bal = balance(bank, "acme", at)?;
        for f in &bal.fragments {
            assert!(f.quantity.0 > 0, "{at}: {f:?}");
        }
        for c in &bal.credits {
            assert!(c.remaining >= rust_decimal::Decimal::ZERO, "{at}: {c:?}");
        }
    }
    Ok(())
}

#[test]
fn out_of_order_periods_keep_every_balance_on_memory() {
    out_of_order_periods_keep_every_balance(&mut MemoryLedger::new()).expect("balances");
}

fn out_of_order_periods_keep_every_balance_on(backend: Backend) {
    let Some(place) = Place::new(backend, "asof_order") else {
        return;
    };
    out_of_order_periods_keep_every_balance(&mut place.open()).expect("balances");
}

#[test]
fn out_of_order_periods_keep_every_balance_on_sqlite() {
    out_of_order_periods_keep_every_balance_on(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn out_of_order_periods_keep_every_balance_on_postgres() {
    out_of_order_periods_keep_every_balance_on(Backend::Postgres);
}
