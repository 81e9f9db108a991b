//! The bank's operations on a ledger: the worked example of docs/BANK.md (two periods with a
//! grant, usage with a fragment, an expiry and a reservation), idempotent finalization, and
//! the conservation laws of docs/BANK.md as property tests.
//!
//! The worked example and the property tests run on a memory ledger and, through a location
//! opened with `gpumeter_bank::open`, on SQLite and on PostgreSQL (one body, a `#[test]` per
//! backend; the PostgreSQL ones need the `postgres` feature and the test server).

mod support;

use gpumeter_bank::{
    balance, close, expire, finalize, grant, reserve, BankError, FinalizeRefusal, GrantKind,
    Ledger, MemoryLedger, Outcome, Reservation, ReserveRequest, CREDITS,
};
use gpumeter_core::{MeterKind, Quantity, Warning, WarningCode};
use gpumeter_rating::{InvoiceDocument, InvoiceKind, LineKind, PriceBook};
use rust_decimal::Decimal;
use support::{book, d, grant_req, hex_of, report_of, reservation, t, usage, Backend, Place};

fn line_amounts(doc: &InvoiceDocument) -> Vec<(LineKind, String)> {
    doc.invoices[0]
        .lines
        .iter()
        .map(|l| (l.kind, l.amount.to_string()))
        .collect()
}

/// The worked example of docs/BANK.md, step by step.
pub fn worked_example<L: Ledger>(bank: &mut L) -> Result<(), BankError> {
    let b = book();
    let dec = (t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"));
    let jan = (t("2027-01-01T00:00:00Z"), t("2027-02-01T00:00:00Z"));
    // 50 purchased credits (priority 1) and 15 promotional ones (priority 2, expiring
    // 2027-01-15), 0.10 USD each.
    grant(
        bank,
        &grant_req("acme", "50", 1, GrantKind::Purchased, None, "po-1"),
    )?;
    grant(
        bank,
        &grant_req(
            "acme",
            "15",
            2,
            GrantKind::Promotional,
            Some("2027-01-15T00:00:00Z"),
            "promo-1",
        ),
    )?;
    // A reservation of 5000 launches a month for 2.00, unused capacity at 0.10 per 1K.
    reserve(
        bank,
        &ReserveRequest {
            terms: Reservation {
                reservation: String::new(),
                tenant: "acme".into(),
                sku: "h100".into(),
                meter: MeterKind::KernelLaunches,
                capacity: d("5"),
                unit: "1K".into(),
                fee: d("2.00"),
                rate: d("0.10"),
                from: "2026-12-01T00:00:00Z".into(),
                to: "2027-02-01T00:00:00Z".into(),
                credit_expiry: Some("2027-03-01T00:00:00Z".into()),
            },
            at: t("2026-11-01T00:00:00Z"),
        },
    )?;

    // December: 2500 launches = 2 whole thousands billed (1.00), 500 carried; the reservation
    // fee 2.00; subtotal 3.00, all paid by the purchased credits (30 of 50).
    let u1 = usage("acme", "2026-12-01T00:00:00Z", 2500);
    let f1 = finalize(bank, &u1, &b, Some(dec), true)?;
    assert_eq!(f1.outcomes, vec![Outcome::Applied]);
    let inv = &f1.document.invoices[0];
    assert_eq!(
        line_amounts(&f1.document),
        vec![
            (LineKind::Usage, "1.00".into()),
            (LineKind::Reservation, "2.00".into())
        ]
    );
    assert_eq!(inv.lines[0].fragment_carried, Some(Quantity(500)));
    assert_eq!(inv.subtotal, d("3.00"));
    assert_eq!(inv.credits_applied.len(), 1);
    assert_eq!(inv.credits_applied[0].credits, d("30"));
    assert_eq!(inv.total, d("0.00"));
    assert!(inv.ledger_head.is_some());
    assert!(inv.verify_digest());
    // The same finalization again changes nothing and returns the same invoice.
    let again = finalize(bank, &u1, &b, Some(dec), true)?;
    assert_eq!(again.outcomes, vec![Outcome::AlreadyFinalized]);
    assert_eq!(again.document, f1.document);

    // Unused capacity: 5000 − 2500 launches = 2.5 credits, usable from January.
    let bal = balance(bank, "acme", t("2027-01-01T00:00:00Z"))?;
    let remaining: Vec<String> = bal
        .credits
        .iter()
        .map(|c| format!("{:?} {}", c.kind, c.remaining))
        .collect();
    assert_eq!(
        remaining,
        vec!["Reservation 2.5", "Purchased 20", "Promotional 15"]
    );
    assert_eq!(bal.fragments.len(), 1);
    assert_eq!(bal.fragments[0].quantity, Quantity(500));

    // The promotional credits expire unused on 2027-01-15.
    let moved = expire(bank, t("2027-01-15T00:00:00Z"))?;
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].1, d("15"));

    // January: 1700 launches + 500 carried = 2200: 2 thousands billed (1.00), 200 carried;
    // fee 2.00. The reservation credits (priority 0) pay 0.25, the purchased ones the 2.00
    // they are worth; 0.75 is left to pay.
    let u2 = usage("acme", "2027-01-01T00:00:00Z", 1700);
    let f2 = finalize(bank, &u2, &b, Some(jan), true)?;
    let inv = &f2.document.invoices[0];
    assert_eq!(inv.lines[0].quantity, Some(Quantity(2200)));
    assert_eq!(inv.lines[0].fragment_carried, Some(Quantity(200)));
    let credits: Vec<String> = inv
        .credits_applied
        .iter()
        .map(|c| format!("{} {}", c.credits, c.amount))
        .collect();
    assert_eq!(credits, vec!["2.5 0.25", "20 2.00"]);
    assert_eq!(inv.total, d("0.75"));

    // Closing the contract bills the 200 launches left at 0.50 per 1K: 0.10.
    let closed = close(bank, "acme", &b, t("2027-02-01T00:00:00Z"))?;
    assert_eq!(closed.total, d("0.10"));
    let bal = balance(bank, "acme", t("2027-02-01T00:00:00Z"))?;
    assert!(bal.fragments.is_empty());
    assert_eq!(bal.receivable.get("USD"), Some(&d("0.85")));
    // January's unused capacity: 5000 − 1700 launches measured in January (the 500 carried in
    // were measured in December) = 3.3 credits.
    // Credits: granted 50 + 15 + 2.5 + 3.3 = burned 30 + 2.5 + 20 + expired 15 + left 3.3.
    let left: Decimal = bal.credits.iter().map(|c| c.remaining).sum();
    assert_eq!(left, d("3.3"));
    let breakage = bank.atomically(false, |t| {
        t.balance(gpumeter_bank::accounts::BREAKAGE, CREDITS)
    })?;
    assert_eq!(breakage, d("15"));
    Ok(())
}

#[test]
fn the_worked_example_on_a_memory_ledger() {
    let mut bank = MemoryLedger::new();
    worked_example(&mut bank).expect("the worked example");
}

/// The worked example on a new ledger of `backend`, then the ledger reopened: it verifies and
/// holds the balances.
fn worked_example_survives_reopening(backend: Backend) {
    let Some(place) = Place::new(backend, "worked_example") else {
        return;
    };
    let mut bank = place.open();
    worked_example(&mut bank).expect("the worked example");
    drop(bank);
    let mut again = gpumeter_bank::open_existing(&place.location).expect("reopen");
    let report = again
        .atomically(false, |t| gpumeter_bank::verify(t))
        .expect("verify");
    // 2 grants, a reservation, 2 finalizations each with its converted grant, 1 expiry, 1 close.
    assert_eq!(report.transactions, 9);
    let bal = balance(&mut again, "acme", t("2027-02-01T00:00:00Z")).expect("balance");
    assert_eq!(bal.receivable.get("USD"), Some(&d("0.85")));
}

#[test]
fn the_worked_example_on_an_sqlite_ledger_survives_reopening() {
    worked_example_survives_reopening(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn the_worked_example_on_a_postgres_ledger_survives_reopening() {
    worked_example_survives_reopening(Backend::Postgres);
}

#[test]
fn a_preview_changes_nothing() {
    let mut bank = MemoryLedger::new();
    grant(
        &mut bank,
        &grant_req("acme", "50", 1, GrantKind::Purchased, None, "po-1"),
    )
    .expect("grant");
    let before = bank.atomically(false, |t| t.head()).expect("head");
    let period = (t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"));
    let p = finalize(
        &mut bank,
        &usage("acme", "2026-12-01T00:00:00Z", 2500),
        &book(),
        Some(period),
        false,
    )
    .expect("preview");
    assert_eq!(p.document.invoices[0].total, d("0.00"));
    assert_eq!(p.document.invoices[0].ledger_head, None);
    assert_eq!(bank.atomically(false, |t| t.head()).expect("head"), before);
    let bal = balance(&mut bank, "acme", t("2027-01-01T00:00:00Z")).expect("balance");
    assert_eq!(bal.credits[0].remaining, d("50"));
}

/// The same report over another, overlapping period (a different finalization key) is
/// refused, naming the source and the invoice that billed it (issue 30: a source is billed
/// once; until then the windows billed before were left out with a warning).
#[test]
fn a_source_billed_for_a_window_is_refused_under_another_period() {
    let mut bank = MemoryLedger::new();
    let b = book();
    let u = usage("acme", "2026-12-01T00:00:00Z", 3000);
    finalize(
        &mut bank,
        &u,
        &b,
        Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"))),
        true,
    )
    .expect("finalize");
    let err = finalize(
        &mut bank,
        &u,
        &b,
        Some((t("2026-11-01T00:00:00Z"), t("2027-01-01T00:00:00Z"))),
        true,
    )
    .expect_err("billed again");
    match &err {
        BankError::Finalize(r) => match r.as_ref() {
            FinalizeRefusal::SourceBilled {
                source_name,
                tenant,
                period_from,
                ..
            } => {
                assert_eq!(source_name, "acme-2026-12-01T00:00:00Z.json");
                assert_eq!(tenant, "acme");
                assert_eq!(period_from, "2026-12-01T00:00:00Z");
            }
            other => panic!("{other}"),
        },
        other => panic!("{other}"),
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn fail(e: BankError) -> TestCaseError {
        TestCaseError::fail(e.to_string())
    }

    /// Launches per month, and a second number the test ignores (kept: it shapes the
    /// generated cases, and so the saved regressions).
    type Months = Vec<(u128, u32)>;
    /// Grants: tenths of credits, priority, promotional, the month they expire (0: never).
    type ConserveGrants = Vec<(u32, i64, bool, u32)>;
    /// Grants: credits, priority, the month they expire (0: never).
    type BurnGrants = Vec<(u32, i64, u32)>;

    fn months() -> impl Strategy<Value = Months> {
        proptest::collection::vec((0u128..5_000, 0u32..3), 1..6)
    }

    fn conserve_grants() -> impl Strategy<Value = ConserveGrants> {
        proptest::collection::vec((1u32..400, 0i64..3, any::<bool>(), 0u32..8), 0..5)
    }

    fn burn_grants() -> impl Strategy<Value = BurnGrants> {
        proptest::collection::vec((1u32..60, 0i64..3, 0u32..4), 1..6)
    }

    /// Over any number of periods and increments: Σ billed + fragment balance = Σ metered
    /// per tenant; credits granted = burned + expired + remaining; no total is negative;
    /// every transaction balances (the ledger refuses others).
    fn conserve<L: Ledger>(
        bank: &mut L,
        months: &Months,
        grants: &ConserveGrants,
    ) -> Result<(), TestCaseError> {
        let b = book();
        let mut granted = Decimal::ZERO;
        for (i, (credits, priority, promo, expiry_month)) in grants.iter().enumerate() {
            let c = Decimal::from(*credits) / Decimal::from(10);
            granted += c;
            let expires =
                (*expiry_month > 0).then(|| format!("2027-{:02}-01T00:00:00Z", expiry_month));
            let kind = if *promo {
                GrantKind::Promotional
            } else {
                GrantKind::Purchased
            };
            let req = grant_req(
                "acme",
                &c.to_string(),
                *priority,
                kind,
                expires.as_deref(),
                &format!("g{i}"),
            );
            grant(bank, &req).map_err(fail)?;
        }
        let mut metered = 0u128;
        let mut billed = 0u128;
        let mut expired = Decimal::ZERO;
        for (m, (launches, _)) in months.iter().enumerate() {
            let from = format!("2027-{:02}-01T00:00:00Z", m + 1);
            let to = format!("2027-{:02}-01T00:00:00Z", m + 2);
            let u = usage("acme", &from, *launches);
            metered += launches;
            let f = finalize(bank, &u, &b, Some((t(&from), t(&to))), true).map_err(fail)?;
            for inv in &f.document.invoices {
                prop_assert!(inv.total >= Decimal::ZERO);
                let applied: Decimal = inv.credits_applied.iter().map(|c| c.amount).sum();
                prop_assert_eq!(inv.total, inv.subtotal - applied);
                billed += inv
                    .lines
                    .iter()
                    .filter(|l| l.kind == LineKind::Usage)
                    .map(|l| l.billable_quantity.map_or(0, |q| q.0))
                    .sum::<u128>();
            }
            let moved = expire(bank, t(&to)).map_err(fail)?;
            expired += moved.iter().map(|(_, c)| *c).sum::<Decimal>();
        }
        let bal = balance(bank, "acme", t("2030-01-01T00:00:00Z")).map_err(fail)?;
        let carried: u128 = bal.fragments.iter().map(|f| f.quantity.0).sum();
        prop_assert_eq!(billed + carried, metered);
        let all = bank
            .atomically(false, |t| gpumeter_bank::grants::grants(t, Some("acme")))
            .map_err(fail)?;
        let remaining: Decimal = all.iter().map(|g| g.remaining).sum();
        let burned: Decimal = bank
            .atomically(false, |t| {
                let mut s = Decimal::ZERO;
                for tx in t.transactions(Some("finalize"))? {
                    for p in &tx.tx.postings {
                        if p.commodity == CREDITS && p.account.starts_with("tenant:") {
                            s -= p.amount;
                        }
                    }
                }
                Ok(s)
            })
            .map_err(fail)?;
        prop_assert_eq!(granted, burned + expired + remaining);
        for g in &all {
            prop_assert!(g.remaining >= Decimal::ZERO);
        }
        // Every transaction balances per commodity and the chain holds.
        let report = bank
            .atomically(false, |t| gpumeter_bank::verify(t))
            .map_err(fail)?;
        prop_assert!(report.transactions >= grants.len() as u64);
        Ok(())
    }

    /// Burn order under random grants: a grant burns only when every grant before it in
    /// (priority, expiry, age) order that may pay is empty or worth less than a minor unit.
    fn burn_order<L: Ledger>(
        bank: &mut L,
        grants: &BurnGrants,
        launches: u128,
    ) -> Result<(), TestCaseError> {
        let b = book();
        for (i, (credits, priority, expiry_month)) in grants.iter().enumerate() {
            let expires =
                (*expiry_month > 0).then(|| format!("2028-{:02}-01T00:00:00Z", expiry_month));
            let req = grant_req(
                "acme",
                &credits.to_string(),
                *priority,
                GrantKind::Purchased,
                expires.as_deref(),
                &format!("g{i}"),
            );
            grant(bank, &req).map_err(fail)?;
        }
        let order = bank
            .atomically(false, |t| gpumeter_bank::grants::grants(t, Some("acme")))
            .map_err(fail)?;
        let jan = (t("2027-01-01T00:00:00Z"), t("2027-02-01T00:00:00Z"));
        let u = usage("acme", "2027-01-01T00:00:00Z", launches);
        let f = finalize(bank, &u, &b, Some(jan), true).map_err(fail)?;
        let inv = &f.document.invoices[0];
        // Burned in burn order, and every grant before the last one burned is emptied.
        let burned: Vec<&str> = inv
            .credits_applied
            .iter()
            .map(|c| c.grant.as_str())
            .collect();
        let expected: Vec<&str> = order
            .iter()
            .map(|g| g.grant.grant.as_str())
            .filter(|g| burned.contains(g))
            .collect();
        prop_assert_eq!(&burned, &expected);
        if let Some(last) = burned.last() {
            for g in order.iter().take_while(|g| g.grant.grant != *last) {
                let used = inv
                    .credits_applied
                    .iter()
                    .find(|c| c.grant == g.grant.grant)
                    .map_or(Decimal::ZERO, |c| c.credits);
                prop_assert_eq!(
                    used,
                    g.remaining,
                    "grant {} burns before {}",
                    g.grant.grant,
                    last
                );
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn fragments_and_credits_conserve(months in months(), grants in conserve_grants()) {
            conserve(&mut MemoryLedger::new(), &months, &grants)?;
        }

        #[test]
        fn burn_order_is_priority_then_expiry_then_age(
            grants in burn_grants(),
            launches in 1_000u128..20_000,
        ) {
            burn_order(&mut MemoryLedger::new(), &grants, launches)?;
        }
    }

    /// Cases on SQLite and PostgreSQL, each on a new ledger (a file, a schema): fewer than on
    /// the memory ledger, where the laws are searched widely; these show that the stored
    /// ledgers keep them too.
    const STORED_CASES: u32 = 16;

    fn conserve_on(backend: Backend) {
        let cases = (months(), conserve_grants());
        support::run_cases(
            backend,
            "conserve",
            STORED_CASES,
            cases,
            |place, (months, grants)| conserve(&mut place.open(), &months, &grants),
        );
    }

    fn burn_order_on(backend: Backend) {
        let cases = (burn_grants(), 1_000u128..20_000);
        support::run_cases(
            backend,
            "burn_order",
            STORED_CASES,
            cases,
            |place, (grants, launches)| burn_order(&mut place.open(), &grants, launches),
        );
    }

    #[test]
    fn fragments_and_credits_conserve_on_sqlite() {
        conserve_on(Backend::Sqlite);
    }

    #[test]
    #[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
    fn fragments_and_credits_conserve_on_postgres() {
        conserve_on(Backend::Postgres);
    }

    #[test]
    fn burn_order_is_priority_then_expiry_then_age_on_sqlite() {
        burn_order_on(Backend::Sqlite);
    }

    #[test]
    #[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
    fn burn_order_is_priority_then_expiry_then_age_on_postgres() {
        burn_order_on(Backend::Postgres);
    }
}

// --- Regressions of the review (issue 11) --------------------------------------------------------

fn book_in(currency: &str, version: &str, extra: &str) -> PriceBook {
    PriceBook::from_toml_str(
        "b.toml",
        &format!(
            "schema = \"gpumeter.pricebook/v1\"\nversion = \"{version}\"\ncurrency = \"{currency}\"\n{extra}\n\
             [[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n\
             [[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1K\"\nunit_price = \"0.50\"\nincrement = \"1\"\n"
        ),
    )
    .expect("a book")
}

fn hour(h: u32) -> String {
    format!("2026-12-01T{h:02}:00:00Z")
}

#[test]
fn zero_amounts_store_and_verify_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut bank = gpumeter_bank::SqliteLedger::open(&dir.path().join("b.db")).expect("open");
    let b = book();
    // 500 launches: below one increment, a 0.00 invoice (its revenue posting was −0.00,
    // stored as text that reads back unsigned, so the chain hash broke).
    let zero = Some((t(&hour(0)), t(&hour(1))));
    let f = finalize(&mut bank, &usage("beta", &hour(0), 500), &b, zero, true).expect("0.00");
    assert_eq!(f.document.invoices[0].subtotal, d("0.00"));
    // 2001 launches leave a fragment of 1 launch, which closes at 0.00.
    finalize(&mut bank, &usage("acme", &hour(0), 2001), &b, zero, true).expect("finalize");
    close(&mut bank, "acme", &b, t(&hour(2))).expect("close a 1-launch fragment: 0.00");
    drop(bank);
    let mut again = gpumeter_bank::SqliteLedger::open(&dir.path().join("b.db")).expect("reopen");
    again
        .atomically(false, |t| gpumeter_bank::verify(t))
        .expect("an untouched ledger verifies");
}

#[test]
fn a_narrower_period_marks_only_its_own_windows_billed() {
    let mut bank = MemoryLedger::new();
    let b = book();
    let u = report_of(
        &[("acme", &hour(0), 3000), ("acme", &hour(1), 4000)],
        "two-hours",
    );
    finalize(&mut bank, &u, &b, Some((t(&hour(0)), t(&hour(1)))), true).expect("first hour");
    let f = finalize(&mut bank, &u, &b, Some((t(&hour(1)), t(&hour(2)))), true).expect("second");
    assert_eq!(
        f.document.invoices[0].subtotal,
        d("2.00"),
        "{:?}",
        f.document.invoices[0]
    );
}

/// A report one of whose sources was billed before is refused, naming that source (usage rows
/// do not say which source they came from); the new source alone is then a supplement of the
/// period (issue 30: until then the window was refused with advice, and the new source billed
/// as an invoice of its own).
#[test]
fn a_report_with_a_source_billed_before_is_refused_and_the_new_source_supplements() {
    let mut bank = MemoryLedger::new();
    let b = book();
    let a = report_of(&[("acme", &hour(0), 1000)], "a");
    finalize(&mut bank, &a, &b, None, true).expect("a");
    let mut both = report_of(&[("acme", &hour(0), 4000)], "a");
    both.sources.push(gpumeter_core::SourceEntry {
        name: "b.json".into(),
        format: "kineto".into(),
        sha256: hex_of("b"),
    });
    both.seal().expect("seal");
    let err = finalize(&mut bank, &both, &b, None, true).expect_err("mixed sources");
    assert!(err.to_string().contains("source a.json"), "{err}");
    // The new source alone: 1000 + 3000 launches in the period bill 2.00, of which 0.50 were.
    let only_b = report_of(&[("acme", &hour(0), 3000)], "b");
    let f = finalize(&mut bank, &only_b, &b, None, true).expect("b");
    let inv = &f.document.invoices[0];
    assert_eq!(inv.subtotal, d("1.50"));
    assert_eq!(inv.extensions.kind, Some(InvoiceKind::Supplement));
}

/// A period's supplement is rated with the book of its first invoice: another book is refused,
/// naming both (issue 30; until then the same usage under another book was billed again as
/// nothing). The same report under another book is refused first as billed before.
#[test]
fn a_supplement_under_another_book_is_refused() {
    let mut bank = MemoryLedger::new();
    let u = usage("acme", &hour(0), 1500);
    let m1 = book_in("USD", "m1", "invoice_minimum = \"0.50\"");
    let first = finalize(&mut bank, &u, &m1, None, true).expect("first");
    assert_eq!(first.document.invoices[0].total, d("0.50"));
    let m2 = book_in("USD", "m2", "invoice_minimum = \"0.50\"");
    let err = finalize(&mut bank, &u, &m2, None, true).expect_err("the same usage again");
    assert!(
        matches!(&err, BankError::Finalize(r) if matches!(r.as_ref(), FinalizeRefusal::SourceBilled { .. })),
        "{err}"
    );
    let late = report_of(&[("acme", &hour(0), 100)], "late");
    let err = finalize(&mut bank, &late, &m2, None, true).expect_err("another book");
    let text = err.to_string();
    assert!(
        text.contains("price book m1") && text.contains("not m2"),
        "{text}"
    );
    let bal = balance(&mut bank, "acme", t("2027-01-01T00:00:00Z")).expect("balance");
    assert_eq!(bal.receivable.get("USD"), Some(&d("0.50")));
    assert_eq!(bal.fragments[0].quantity, Quantity(500));
}

#[test]
fn a_reservation_is_billed_once_per_period_and_without_usage_too() {
    let mut bank = MemoryLedger::new();
    reserve(&mut bank, &reservation("acme", "2.00", None)).expect("reserve");
    let dec = Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z")));
    // A report of another tenant: acme still owes its fee.
    let f = finalize(
        &mut bank,
        &usage("beta", &hour(0), 1000),
        &book(),
        dec,
        true,
    )
    .expect("beta");
    let acme = f
        .document
        .invoices
        .iter()
        .find(|i| i.tenant == "acme")
        .expect("acme's invoice");
    assert_eq!(acme.subtotal, d("2.00"));
    // A report of acme's usage in the period, from another source: a supplement of the
    // fee-only invoice, with no second fee and no second conversion.
    let g = finalize(
        &mut bank,
        &report_of(&[("acme", &hour(0), 1000)], "acme-node"),
        &book(),
        dec,
        true,
    )
    .expect("again");
    let acme = g
        .document
        .invoices
        .iter()
        .find(|i| i.tenant == "acme")
        .expect("acme");
    assert!(
        acme.lines.iter().all(|l| l.kind != LineKind::Reservation),
        "{acme:?}"
    );
    assert!(
        acme.warnings
            .iter()
            .any(|w| *w.code() == WarningCode::ReservationBilledBefore && w.contains("billed for")),
        "{:?}",
        acme.warnings
    );
    let grants = bank
        .atomically(false, |t| gpumeter_bank::grants::grants(t, Some("acme")))
        .expect("grants");
    assert_eq!(grants.len(), 1, "one conversion for the period");
    // The first finalization converted all 5 (thousand) launches of capacity (acme had no usage
    // in that report); the second report's 1000 launches of the same period take 1 credit back.
    assert_eq!(grants[0].remaining, d("4"));
    assert!(
        acme.warnings
            .iter()
            .any(|w| *w.code() == WarningCode::CreditsTakenBack && w.contains("taken back")),
        "{:?}",
        acme.warnings
    );
}

#[test]
fn a_report_without_usage_in_a_given_period_still_bills_the_reservation_fee() {
    let mut bank = MemoryLedger::new();
    reserve(&mut bank, &reservation("acme", "2.00", None)).expect("reserve");
    // Usage only outside the period.
    let u = usage("beta", "2026-11-30T00:00:00Z", 1000);
    let jan = Some((t("2027-01-01T00:00:00Z"), t("2027-02-01T00:00:00Z")));
    let f = finalize(&mut bank, &u, &book(), jan, true).expect("finalize");
    let acme = f
        .document
        .invoices
        .iter()
        .find(|i| i.tenant == "acme")
        .expect("acme");
    assert_eq!(acme.subtotal, d("2.00"));
    // Again for the same period: nothing new (no second fee, no empty invoice).
    let g = finalize(
        &mut bank,
        &usage("beta", "2026-11-30T01:00:00Z", 1000),
        &book(),
        jan,
        true,
    )
    .expect("again");
    assert!(
        g.document.invoices.iter().all(|i| i.tenant != "acme"),
        "{:?}",
        g.document
    );
}

#[test]
fn close_with_a_book_of_another_currency_is_refused() {
    let mut bank = MemoryLedger::new();
    finalize(
        &mut bank,
        &usage("acme", &hour(0), 2500),
        &book(),
        None,
        true,
    )
    .expect("USD");
    let err = close(&mut bank, "acme", &book_in("JPY", "j", ""), t(&hour(3))).expect_err("JPY");
    assert!(err.to_string().contains("this bank bills in USD"), "{err}");
    // The bank still finalizes in USD.
    finalize(
        &mut bank,
        &usage("acme", &hour(1), 1000),
        &book(),
        None,
        true,
    )
    .expect("USD again");
}

#[test]
fn decimals_are_counted_on_the_value_not_as_written() {
    let mut bank = MemoryLedger::new();
    let req = grant_req("acme", "1.0000000000", 0, GrantKind::Purchased, None, "z");
    grant(&mut bank, &req).expect("1.0000000000 is 1");
}

#[test]
fn a_fee_finer_than_the_currency_is_never_rounded() {
    let mut bank = MemoryLedger::new();
    reserve(&mut bank, &reservation("acme", "2.005", None)).expect("no currency known yet");
    let dec = Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z")));
    // Finalizing bills the usage, not the fee, and says why (other tenants are not blocked).
    let f = finalize(
        &mut bank,
        &usage("acme", &hour(0), 1000),
        &book(),
        dec,
        true,
    )
    .expect("fin");
    let inv = &f.document.invoices[0];
    assert!(inv.lines.iter().all(|l| l.kind != LineKind::Reservation));
    assert!(
        inv.warnings
            .iter()
            .any(|w| *w.code() == WarningCode::ReservationFeeTooFine
                && w.contains("never rounded")),
        "{:?}",
        inv.warnings
    );
    // Once the bank's currency is known, such a reservation is refused when it is made.
    let mut r = reservation("beta", "2.005", None);
    r.terms.from = "2027-01-01T00:00:00Z".into();
    let err = reserve(&mut bank, &r).expect_err("2.005 USD");
    assert!(err.to_string().contains("finer than USD"), "{err}");
    // A fee of 2.000 is 2 cents-exact, whatever is written.
    let mut r = reservation("beta", "2.000", None);
    r.terms.from = "2027-01-01T00:00:00Z".into();
    reserve(&mut bank, &r).expect("2.000 USD");
}

#[test]
fn a_bank_bills_in_one_currency() {
    let mut bank = MemoryLedger::new();
    finalize(
        &mut bank,
        &usage("acme", &hour(0), 1000),
        &book(),
        None,
        true,
    )
    .expect("USD");
    let err = finalize(
        &mut bank,
        &usage("acme", &hour(1), 1000),
        &book_in("JPY", "j", ""),
        None,
        true,
    )
    .expect_err("JPY");
    assert!(err.to_string().contains("this bank bills in USD"), "{err}");
}

#[test]
fn credits_worth_less_than_a_nano_credit_per_cent_pay_nothing() {
    let mut bank = MemoryLedger::new();
    let mut req = grant_req("acme", "0.000000001", 0, GrantKind::Purchased, None, "tiny");
    // Rates above 10^6 are refused since issue 30 item 10 (this test used 3 × 10^7): at the
    // highest rate a nano-credit is worth 0.1 cent, so paying a cent costs 10 of them.
    req.rate = d("30000000");
    assert!(grant(&mut bank, &req).is_err(), "a rate above 10^6");
    req.rate = d("1000000");
    grant(&mut bank, &req).expect("grant");
    let f = finalize(
        &mut bank,
        &usage("acme", &hour(0), 1000),
        &book(),
        None,
        true,
    )
    .expect("fin");
    let inv = &f.document.invoices[0];
    for c in &inv.credits_applied {
        assert!(
            c.credits > Decimal::ZERO,
            "a burn of 0 credits paid {}",
            c.amount
        );
    }
}

#[test]
fn grants_and_reservations_refuse_terms_the_bank_cannot_keep() {
    let mut bank = MemoryLedger::new();
    let mut req = grant_req("acme", "1", 0, GrantKind::Purchased, None, "r");
    req.rate = d("0.0000000001");
    assert!(grant(&mut bank, &req).is_err(), "10 decimals of rate");
    let req = grant_req("acme", "0.0000000001", 0, GrantKind::Purchased, None, "c");
    assert!(grant(&mut bank, &req).is_err(), "10 decimals of credits");
    let err = reserve(
        &mut bank,
        &reservation("acme", "2.00", Some("2020-01-01T00:00:00Z")),
    )
    .expect_err("credits expiring before the reservation ends");
    assert!(err.to_string().contains("--credit-expiry"), "{err}");
}

#[test]
fn a_take_back_touches_only_the_conversion_of_the_period_it_concerns() {
    let mut bank = MemoryLedger::new();
    let mut r = reservation("acme", "2.00", Some("2027-06-01T00:00:00Z"));
    r.terms.to = "2027-03-01T00:00:00Z".into();
    reserve(&mut bank, &r).expect("reserve");
    let b = book();
    let dec = Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z")));
    let jan = Some((t("2027-01-01T00:00:00Z"), t("2027-02-01T00:00:00Z")));
    // December converts 3 credits; January burns them and converts 4.
    finalize(
        &mut bank,
        &report_of(&[("acme", &hour(0), 2000)], "dec-a"),
        &b,
        dec,
        true,
    )
    .expect("dec");
    finalize(
        &mut bank,
        &report_of(&[("acme", "2027-01-01T00:00:00Z", 1000)], "jan"),
        &b,
        jan,
        true,
    )
    .expect("jan");
    // A late December report: December's conversion is used up, so nothing is taken back, and
    // January's conversion is untouched.
    let late = finalize(
        &mut bank,
        &report_of(&[("acme", &hour(1), 4000)], "dec-b"),
        &b,
        dec,
        true,
    )
    .expect("late dec");
    let inv = &late.document.invoices[0];
    assert!(
        inv.warnings
            .iter()
            .any(|w| *w.code() == WarningCode::CreditsNotTakenBack
                && w.contains("cannot be taken back")),
        "{:?}",
        inv.warnings
    );
    let all = bank
        .atomically(false, |t| gpumeter_bank::grants::grants(t, Some("acme")))
        .expect("grants");
    let left: Decimal = all.iter().map(|g| g.remaining).sum();
    assert_eq!(left, d("4"), "January's 4 converted credits stay");
}

#[test]
fn two_reservations_of_one_meter_share_the_usage() {
    let mut bank = MemoryLedger::new();
    let mut six = reservation("acme", "2.00", None);
    six.terms.capacity = d("6");
    reserve(&mut bank, &reservation("acme", "2.00", None)).expect("5");
    reserve(&mut bank, &six).expect("6");
    let dec = Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z")));
    finalize(
        &mut bank,
        &usage("acme", &hour(0), 2000),
        &book(),
        dec,
        true,
    )
    .expect("dec");
    let all = bank
        .atomically(false, |t| gpumeter_bank::grants::grants(t, Some("acme")))
        .expect("grants");
    let converted: Decimal = all.iter().map(|g| g.remaining).sum();
    assert_eq!(converted, d("9"), "11 reserved − 2 used");
}

#[test]
fn a_rerun_returns_the_fee_only_invoice_it_finalized() {
    let mut bank = MemoryLedger::new();
    reserve(&mut bank, &reservation("bob", "2.00", None)).expect("reserve");
    let dec = Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z")));
    let u = usage("acme", &hour(0), 1000);
    let first = finalize(&mut bank, &u, &book(), dec, true).expect("first");
    let again = finalize(&mut bank, &u, &book(), dec, true).expect("again");
    assert_eq!(first.document, again.document);
    assert_eq!(
        again.outcomes,
        vec![Outcome::AlreadyFinalized, Outcome::AlreadyFinalized]
    );
    // A capacity the bank cannot convert is refused when reserved.
    let mut huge = reservation("acme", "2.00", None);
    huge.terms.capacity = d("99999999999999999999999");
    assert!(reserve(&mut bank, &huge).is_err());
}

/// A reservation whose span holds only part of the period bills no fee there, and says so with
/// its code.
#[test]
fn a_reservation_over_part_of_the_period_is_warned_with_its_code() {
    let mut bank = MemoryLedger::new();
    reserve(&mut bank, &reservation("acme", "2.00", None)).expect("reserve");
    let f = finalize(
        &mut bank,
        &usage("acme", &hour(0), 1000),
        &book(),
        Some((t("2026-11-15T00:00:00Z"), t("2026-12-15T00:00:00Z"))),
        true,
    )
    .expect("finalize");
    let inv = &f.document.invoices[0];
    assert!(inv.lines.iter().all(|l| l.kind != LineKind::Reservation));
    assert!(
        inv.warnings
            .iter()
            .any(|w| *w.code() == WarningCode::ReservationPartOfPeriod
                && w.contains("covers only part")),
        "{:?}",
        inv.warnings
    );
}

/// The bank's invoice warnings carry codes a pipeline matches on (issue 14): a reservation
/// billed over the usage's span, a grant not in force at the period's end, and a usage
/// report's own warning copied with its code. Then the same ledger as an older gpumeter wrote
/// it (the finalization's invoice warnings as plain strings) still verifies, and a rerun reads
/// its invoice back: uncoded warnings with the same messages, written back as the strings
/// they were, the invoice's digest over them.
#[test]
fn invoice_warnings_are_coded_and_a_ledger_written_before_codes_still_verifies() {
    let mut bank = MemoryLedger::new();
    reserve(&mut bank, &reservation("acme", "2.00", None)).expect("reserve");
    grant(
        &mut bank,
        &grant_req(
            "acme",
            "5",
            1,
            GrantKind::Purchased,
            Some("2026-11-15T00:00:00Z"),
            "po-expired",
        ),
    )
    .expect("grant");
    let mut u = usage("acme", &hour(0), 1000);
    u.warnings.push(Warning::new(
        WarningCode::InstrumentedRun,
        "time meters come from an instrumented run",
    ));
    u.seal().expect("seal");
    let first = finalize(&mut bank, &u, &book(), None, true).expect("finalize");
    let inv = &first.document.invoices[0];
    let codes: Vec<&WarningCode> = inv.warnings.iter().map(Warning::code).collect();
    for want in [
        WarningCode::ReservationDefaultPeriod,
        WarningCode::GrantNotInForce,
        WarningCode::InstrumentedRun,
    ] {
        assert!(codes.contains(&&want), "{want}: {:?}", inv.warnings);
    }
    let json = serde_json::to_value(inv).expect("json");
    for w in json["warnings"].as_array().expect("warnings") {
        assert!(w["code"].is_string() && w["message"].is_string(), "{w}");
    }

    // The same transactions, the invoice's warnings as plain strings.
    let stored = bank
        .atomically(false, |t| t.transactions(None))
        .expect("transactions");
    let mut old = MemoryLedger::new();
    let mut legacy = 0;
    for s in stored {
        let mut tx = s.tx.clone();
        if let Some(ws) = tx.memo["invoice"]["warnings"].as_array_mut() {
            for w in ws.iter_mut() {
                *w = w["message"].clone();
                legacy += 1;
            }
        }
        old.atomically(true, |t| t.append(tx.clone()).map(|_| ()))
            .expect("append");
    }
    assert!(legacy >= 3, "{legacy}");
    old.atomically(false, |t| gpumeter_bank::verify(t))
        .expect("an old ledger verifies");
    let again = finalize(&mut old, &u, &book(), None, true).expect("rerun");
    assert!(
        again
            .outcomes
            .iter()
            .all(|o| *o == Outcome::AlreadyFinalized),
        "{:?}",
        again.outcomes
    );
    let read = &again.document.invoices[0];
    assert!(read.verify_digest());
    assert_eq!(
        read.warnings
            .iter()
            .map(|w| w.message())
            .collect::<Vec<_>>(),
        inv.warnings.iter().map(|w| w.message()).collect::<Vec<_>>()
    );
    assert!(read
        .warnings
        .iter()
        .all(|w| *w.code() == WarningCode::Uncoded));
    // The digest is over the strings as written: recomputed here from the JSON alone.
    let json = serde_json::to_value(read).expect("json");
    assert!(json["warnings"][0].is_string(), "{}", json["warnings"]);
    assert_eq!(
        gpumeter_core::document_sha256(&json, "sha256").expect("digest"),
        read.sha256
    );
}
