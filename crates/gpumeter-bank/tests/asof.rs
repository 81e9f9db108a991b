//! As-of balances never fail (issue 30 item 9, docs/BANK.md): after finalizations in and out of
//! period order, `balance(tenant, at)` answers for every instant, and no fragment or credit
//! balance is negative at any instant.
//!
//! Each body runs on a memory ledger, on SQLite and (feature `postgres`, the test server) on
//! PostgreSQL.

mod support;

use gpumeter_bank::{balance, close, finalize, BankError, Ledger, MemoryLedger, Posting};
use support::{book, d, report_of, t, Backend, Place};

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

/// A period finalized before it ended (`invoice finalize --allow-open-period`: its fragment is
/// deposited at its end, in the future), then a close "now", inside the period (hostile review
/// E6, E6b): the close draws that fragment, so it is booked at the period's end, not before the
/// deposit. Every as-of balance answers, none is negative, and the tenant's next period is not
/// refused.
fn a_close_inside_an_open_period_keeps_every_balance<L: Ledger>(
    bank: &mut L,
) -> Result<(), BankError> {
    let b = book();
    let dec = (t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"));
    let jan = (t("2027-01-01T00:00:00Z"), t("2027-02-01T00:00:00Z"));
    let december = report_of(&[("acme", "2026-12-03T00:00:00Z", 2_500)], "december");
    finalize(bank, &december, &b, Some(dec), true)?;
    let closed = close(bank, "acme", &b, t("2026-12-15T00:00:00Z"))?;
    assert_eq!(closed.lines.len(), 1, "{closed:?}");
    assert_eq!(closed.lines[0].quantity.0, 500, "{closed:?}");
    assert_eq!(closed.booked_at.as_deref(), Some("2027-01-01T00:00:00Z"));
    let booked = bank.atomically(false, |t| t.transactions(None))?;
    let at = booked
        .iter()
        .find(|x| x.tx.kind == "close")
        .map(|x| x.tx.at.clone());
    assert_eq!(at.as_deref(), Some("2027-01-01T00:00:00Z"));
    for at in instants(bank)? {
        let bal = balance(bank, "acme", at)?;
        assert!(
            bal.fragments.iter().all(|f| f.quantity.0 > 0),
            "{at}: {bal:?}"
        );
    }
    // Between the close's "now" and the period's end the fragment is still there.
    let mid = balance(bank, "acme", t("2026-12-20T00:00:00Z"))?;
    assert!(
        mid.fragments.is_empty(),
        "December's fragment is deposited at its end: {mid:?}"
    );
    let end = balance(bank, "acme", t("2027-01-01T00:00:00Z"))?;
    assert!(end.fragments.is_empty(), "the close emptied it: {end:?}");
    let january = report_of(&[("acme", "2027-01-03T00:00:00Z", 2_700)], "january");
    finalize(bank, &january, &b, Some(jan), true)?;
    let after = balance(bank, "acme", u64::MAX)?;
    assert_eq!(after.fragments.len(), 1, "{after:?}");
    assert_eq!(after.fragments[0].quantity.0, 700, "{after:?}");
    // A close with nothing after its instant is booked at it.
    let again = close(bank, "acme", &b, t("2027-03-01T00:00:00Z"))?;
    assert_eq!(again.booked_at, None, "{again:?}");
    Ok(())
}

#[test]
fn a_close_inside_an_open_period_keeps_every_balance_on_memory() {
    a_close_inside_an_open_period_keeps_every_balance(&mut MemoryLedger::new()).expect("close");
}

#[test]
fn a_close_inside_an_open_period_keeps_every_balance_on_sqlite() {
    let Some(place) = Place::new(Backend::Sqlite, "asof_close") else {
        return;
    };
    a_close_inside_an_open_period_keeps_every_balance(&mut place.open()).expect("close");
}

/// A ledger written before issue 30 (hostile review E12): December was finalized after
/// January and drew January's fragment of 700 at December's end, so the fragment account is
/// -700 as of every instant of January. That history blocks no later finalization (February
/// changes balances only from its own end on); `balance` as of an instant inside it still
/// refuses, naming the account and its balance, and answers before and after it. (That a
/// posting making such a history more negative is still refused: the unit tests of
/// `bank::asof`.)
#[test]
fn a_legacy_negative_history_blocks_no_later_finalization() {
    let b = book();
    let jan = (t("2027-01-01T00:00:00Z"), t("2027-02-01T00:00:00Z"));
    let feb = (t("2027-02-01T00:00:00Z"), t("2027-03-01T00:00:00Z"));
    // December's invoice, for the legacy transaction's memo (a preview of the period).
    let dec = (t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"));
    let december = report_of(&[("acme", "2026-12-03T00:00:00Z", 2_300)], "december");
    let preview = finalize(&mut MemoryLedger::new(), &december, &b, Some(dec), false);
    let mut invoice =
        serde_json::to_value(&preview.expect("preview").document.invoices[0]).expect("an invoice");
    invoice["ledger_head"] = serde_json::Value::Null;
    invoice["sha256"] = serde_json::Value::String(String::new());
    let mut bank = MemoryLedger::new();
    let january = report_of(&[("acme", "2027-01-03T00:00:00Z", 1_700)], "january");
    finalize(&mut bank, &january, &b, Some(jan), true).expect("January");
    let frag = "tenant:acme:fragments:h100:kernel_launches";
    bank.atomically(true, |t| {
        t.append(gpumeter_bank::NewTransaction {
            key: "finalize:legacy-december".into(),
            kind: "finalize".into(),
            at: "2027-01-01T00:00:00Z".into(),
            tenant: Some("acme".into()),
            postings: vec![
                Posting::new(frag, "1", d("-700")),
                Posting::new("provider:fragments", "1", d("700")),
                Posting::new("tenant:acme:receivable", "USD", d("1.50")),
                Posting::new("provider:revenue", "USD", d("-1.50")),
            ],
            memo: serde_json::json!({
                "invoice": invoice,
                "billed": [[support::hex_of("december"), "2026-12-03T00:00:00Z"]],
            }),
        })
    })
    .expect("the legacy December");
    let inside = balance(&mut bank, "acme", t("2027-01-15T00:00:00Z"));
    assert!(
        matches!(&inside, Err(BankError::Refused(m)) if m.contains(frag) && m.contains("-700")),
        "{inside:?}"
    );
    balance(&mut bank, "acme", t("2026-12-15T00:00:00Z")).expect("before the history");
    let now = balance(&mut bank, "acme", u64::MAX).expect("now");
    assert!(now.fragments.is_empty(), "{now:?}");
    // February draws the (empty) pool and deposits its own 700 at its end: refused before
    // issue 30's follow-up ("-700 as of 2027-01-01"), though it changes nothing before then.
    let february = report_of(&[("acme", "2027-02-03T00:00:00Z", 2_700)], "february");
    finalize(&mut bank, &february, &b, Some(feb), true).expect("February is not refused");
    let end = balance(&mut bank, "acme", u64::MAX).expect("after February");
    assert_eq!(end.fragments.len(), 1, "{end:?}");
    assert_eq!(end.fragments[0].quantity.0, 700, "{end:?}");
    let still = balance(&mut bank, "acme", t("2027-01-15T00:00:00Z"));
    assert!(matches!(&still, Err(BankError::Refused(_))), "{still:?}");
}

/// Issue 30 item 9 as a property: after any sequence of grants, finalizations (in and out of
/// period order, supplements of finalized periods, periods finalized before a close inside
/// them), closes and expiries, the balance of every tenant
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
    /// (tenant, month, launches), 2 an expiry (month), 3 a close (tenant, on the 15th of the
    /// month, a month that may be finalized already: an open period); months from 1 (December
    /// 2026).
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
                2 => {
                    expire(bank, t(&month(m).0)).map_err(fail)?;
                }
                _ => {
                    let mid = t(&month(m).0) + 14 * 86_400 * 1_000_000_000;
                    close(bank, tenant, &b, mid).map_err(fail)?;
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
            for tx in all
                .iter()
                .filter(|x| x.tx.kind == "close" && x.tx.tenant.as_deref() == Some(tenant))
            {
                let closed: gpumeter_bank::Closed = serde_json::from_value(tx.tx.memo.clone())
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                billed += closed
                    .lines
                    .iter()
                    .map(|l| l.quantity.0 as i128)
                    .sum::<i128>();
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
        proptest::collection::vec((0u8..4, 0usize..2, 0u32..5, 0u128..4_000), 1..14)
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
