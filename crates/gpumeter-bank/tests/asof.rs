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

/// Issue 30 item 9 as a property: after any sequence of grants, finalizations (in and out of
/// period order, supplements of finalized periods) and expiries, the balance of every tenant
/// answers as of every instant, no credit or fragment account is negative as of any instant,
/// and Σ billed + fragments = Σ metered per tenant.
mod any_order {
    use super::*;
    use gpumeter_bank::{expire, grant, GrantKind};
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;
    use rust_decimal::Decimal;
    use std::collections::BTreeMap;
    use support::grant_req;

    /// One operation: 0 a grant (tenant, credits, month it expires or 0), 1 a finalization
    /// (tenant, month, launches), 2 an expiry (month); months from 1 (December 2026).
    type Op = (u8, usize, u32, u128);

    fn month(m: u32) -> (String, String) {
        let first = |m: u32| {
            let (y, mm) = (2026 + (10 + m) / 12, (10 + m) % 12 + 1);
            format!("{y}-{mm:02}-01T00:00:00Z")
        };
        (first(m), first(m + 1))
    }

    fn fail(e: BankError) -> TestCaseError {
        TestCaseError::fail(e.to_string())
    }

    pub(super) fn balances_hold<L: Ledger>(bank: &mut L, ops: &[Op]) -> Result<(), TestCaseError> {
        let b = book();
        let tenants = ["acme", "beta"];
        let mut metered: BTreeMap<&str, u128> = BTreeMap::new();
        let mut finalized: std::collections::BTreeSet<(&str, u32)> = Default::default();
        for (i, &(kind, tenant, m, n)) in ops.iter().enumerate() {
            let tenant = tenants[tenant % 2];
            match kind {
                0 => {
                    let expires = (m > 0).then(|| month(m).0);
                    let req = grant_req(
                        tenant,
                        &(n % 40 + 1).to_string(),
                        (n % 3) as i64,
                        GrantKind::Purchased,
                        expires.as_deref(),
                        &format!("g{i}"),
                    );
                    grant(bank, &req).map_err(fail)?;
                }
                1 => {
                    let (from, to) = month(m);
                    let r = report_of(&[(tenant, from.as_str(), n)], &format!("r{i}"));
                    match finalize(bank, &r, &b, Some((t(&from), t(&to))), true) {
                        Ok(_) => {
                            *metered.entry(tenant).or_insert(0) += n;
                            finalized.insert((tenant, m));
                        }
                        // Only a supplement may be refused (its fragment would shrink after a
                        // later period drew it); a period's first invoice never is.
                        Err(e @ BankError::Finalize(_)) => {
                            prop_assert!(finalized.contains(&(tenant, m)), "op {i}: {e}");
                        }
                        Err(e) => return Err(fail(e)),
                    }
                }
                _ => {
                    expire(bank, t(&month(m).0)).map_err(fail)?;
                }
            }
        }
        let all = bank
            .atomically(false, |t| t.transactions(None))
            .map_err(fail)?;
        // Every account's balance as of every business time (postings at most then).
        let mut times: Vec<u64> = all.iter().map(|x| t(&x.tx.at)).collect();
        times.sort_unstable();
        times.dedup();
        for &at in &times {
            let mut as_of: BTreeMap<&str, Decimal> = BTreeMap::new();
            for tx in all.iter().filter(|x| t(&x.tx.at) <= at) {
                for p in &tx.tx.postings {
                    *as_of.entry(p.account.as_str()).or_insert(Decimal::ZERO) += p.amount;
                }
            }
            for (account, v) in &as_of {
                if account.starts_with("tenant:")
                    && (account.contains(":credits:") || account.contains(":fragments:"))
                {
                    prop_assert!(*v >= Decimal::ZERO, "{account} is {v} as of {at}");
                }
            }
            for tenant in tenants {
                for a in [at.saturating_sub(1), at] {
                    balance(bank, tenant, a).map_err(fail)?;
                }
            }
        }
        // Conservation per tenant: billable quantities of its invoices (supplements' changes
        // included) + its fragment = what its finalizations metered.
        for tenant in tenants {
            let mut billed: i128 = 0;
            for tx in all
                .iter()
                .filter(|x| x.tx.kind == "finalize" && x.tx.tenant.as_deref() == Some(tenant))
            {
                let inv: gpumeter_rating::Invoice =
                    serde_json::from_value(tx.tx.memo["invoice"].clone())
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                for l in &inv.lines {
                    billed += match (l.billable_quantity, l.extensions.change) {
                        (Some(q), _) => q.0 as i128,
                        (None, Some(c)) if c.billable_quantity.negative => {
                            -(c.billable_quantity.magnitude as i128)
                        }
                        (None, Some(c)) => c.billable_quantity.magnitude as i128,
                        (None, None) => 0,
                    };
                }
            }
            let end = balance(bank, tenant, u64::MAX).map_err(fail)?;
            let carried: i128 = end.fragments.iter().map(|f| f.quantity.0 as i128).sum();
            let metered = metered.get(tenant).copied().unwrap_or(0) as i128;
            prop_assert_eq!(billed + carried, metered, "{}", tenant);
        }
        bank.atomically(false, |t| gpumeter_bank::verify(t))
            .map_err(fail)?;
        Ok(())
    }

    pub(super) fn ops() -> impl Strategy<Value = Vec<Op>> {
        proptest::collection::vec((0u8..3, 0usize..2, 0u32..5, 0u128..4_000), 1..14)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn balances_hold_in_any_order_on_memory(ops in ops()) {
            balances_hold(&mut MemoryLedger::new(), &ops)?;
        }
    }
}

fn balances_hold_on(backend: Backend) {
    support::run_cases(backend, "any_order", 8, any_order::ops(), |place, ops| {
        any_order::balances_hold(&mut place.open(), &ops)
    });
}

#[test]
fn balances_hold_in_any_order_on_sqlite() {
    balances_hold_on(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn balances_hold_in_any_order_on_postgres() {
    balances_hold_on(Backend::Postgres);
}
