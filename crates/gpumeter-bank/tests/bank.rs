//! The bank's operations on a ledger: the worked example of docs/BANK.md (two periods with a
//! grant, usage with a fragment, an expiry and a reservation), idempotent finalization, and
//! the conservation laws of DESIGN §6 as property tests.

use std::str::FromStr;

use gpumeter_bank::{
    balance, close, expire, finalize, grant, reserve, BankError, GrantKind, GrantRequest, Ledger,
    MemoryLedger, Outcome, Reservation, ReserveRequest, CREDITS,
};
use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::{DeviceEntry, MeterKind, Quantity, RecordCounts, UsageReport, UsageRow};
use gpumeter_rating::{InvoiceDocument, LineKind, PriceBook};
use rust_decimal::Decimal;

fn t(s: &str) -> u64 {
    parse_rfc3339(s).expect("an RFC 3339 time")
}

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).expect("a decimal")
}

/// 0.50 USD per 1000 kernel launches on H100s, billed in whole thousands.
fn book() -> PriceBook {
    PriceBook::from_toml_str(
        "bank.toml",
        "schema = \"gpumeter.pricebook/v1\"\nversion = \"bank-example\"\ncurrency = \"USD\"\n\
         [[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1K\"\nunit_price = \"0.50\"\nincrement = \"1\"\n",
    )
    .expect("the example book")
}

/// A sealed report of `launches` by `tenant` in the hour starting `window`.
fn usage(tenant: &str, window: &str, launches: u128) -> UsageReport {
    let mut r = UsageReport {
        schema: "gpumeter.usage/v1".into(),
        metering_policy: "v1".into(),
        window_seconds: 3600,
        sources: vec![gpumeter_core::SourceEntry {
            name: format!("{tenant}-{window}.json"),
            format: "kineto".into(),
            sha256: format!("{:0>64}", launches),
        }],
        devices: vec![DeviceEntry {
            device: 0,
            device_key: "GPU-0".into(),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            sm_count: Some(132),
            compute_capability: Some("9.0".into()),
            not_meterable: vec![],
        }],
        records: RecordCounts::default(),
        loss: vec![],
        usage: vec![UsageRow {
            tenant: tenant.into(),
            device: 0,
            device_key: "GPU-0".into(),
            window_start: window.into(),
            meter: MeterKind::KernelLaunches,
            quantity: Quantity(launches),
        }],
        totals: vec![],
        open_allocations: vec![],
        extensions: Default::default(),
        warnings: vec![],
        sha256: String::new(),
    };
    r.seal().expect("seal");
    r
}

fn grant_req(
    tenant: &str,
    credits: &str,
    priority: i64,
    kind: GrantKind,
    expires: Option<&str>,
    key: &str,
) -> GrantRequest {
    GrantRequest {
        tenant: tenant.into(),
        credits: d(credits),
        rate: d("0.10"),
        priority,
        effective: t("2026-11-01T00:00:00Z"),
        expires: expires.map(t),
        kind,
        skus: vec![],
        meters: vec![],
        key: Some(key.into()),
        at: t("2026-11-01T00:00:00Z"),
    }
}

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
    // Credits: granted 50 + 15 + 2.5 + 2.8 = burned 30 + 2.5 + 20 + expired 15 + left 2.8.
    let left: Decimal = bal.credits.iter().map(|c| c.remaining).sum();
    assert_eq!(left, d("2.8"));
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

#[test]
fn the_worked_example_on_an_sqlite_ledger_survives_reopening() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bank.db");
    let mut bank = gpumeter_bank::SqliteLedger::open(&path).expect("a new ledger");
    worked_example(&mut bank).expect("the worked example");
    drop(bank);
    let mut again = gpumeter_bank::SqliteLedger::open(&path).expect("reopen");
    let report = again
        .atomically(false, |t| gpumeter_bank::verify(t))
        .expect("verify");
    // 2 grants, a reservation, 2 finalizations each with its converted grant, 1 expiry, 1 close.
    assert_eq!(report.transactions, 9);
    let bal = balance(&mut again, "acme", t("2027-02-01T00:00:00Z")).expect("balance");
    assert_eq!(bal.receivable.get("USD"), Some(&d("0.85")));
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

#[test]
fn a_source_billed_for_a_window_is_not_billed_again_under_another_period() {
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
    // The same report over another period (a different finalization key).
    let f = finalize(
        &mut bank,
        &u,
        &b,
        Some((t("2026-11-01T00:00:00Z"), t("2027-01-01T00:00:00Z"))),
        true,
    )
    .expect("finalize again");
    let inv = &f.document.invoices[0];
    assert_eq!(inv.subtotal, d("0.00"), "{inv:?}");
    assert!(
        inv.warnings.iter().any(|w| w.contains("was billed before")),
        "{:?}",
        inv.warnings
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Over any number of periods and increments: Σ billed + fragment balance = Σ metered
        /// per tenant; credits granted = burned + expired + remaining; no total is negative;
        /// every transaction balances (the ledger refuses others).
        #[test]
        fn fragments_and_credits_conserve(
            months in proptest::collection::vec((0u128..5_000, 0u32..3), 1..6),
            grants in proptest::collection::vec((1u32..400, 0i64..3, any::<bool>(), 0u32..8), 0..5),
        ) {
            let b = book();
            let mut bank = MemoryLedger::new();
            let mut granted = Decimal::ZERO;
            for (i, (credits, priority, promo, expiry_month)) in grants.iter().enumerate() {
                let c = Decimal::from(*credits) / Decimal::from(10);
                granted += c;
                let expires = (*expiry_month > 0).then(|| format!("2027-{:02}-01T00:00:00Z", expiry_month));
                let kind = if *promo { GrantKind::Promotional } else { GrantKind::Purchased };
                grant(&mut bank, &grant_req("acme", &c.to_string(), *priority, kind, expires.as_deref(), &format!("g{i}")))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            let mut metered = 0u128;
            let mut billed = 0u128;
            let mut expired = Decimal::ZERO;
            for (m, (launches, _)) in months.iter().enumerate() {
                let from = format!("2027-{:02}-01T00:00:00Z", m + 1);
                let to = format!("2027-{:02}-01T00:00:00Z", m + 2);
                let u = usage("acme", &from, *launches);
                metered += launches;
                let f = finalize(&mut bank, &u, &b, Some((t(&from), t(&to))), true)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                for inv in &f.document.invoices {
                    prop_assert!(inv.total >= Decimal::ZERO);
                    let applied: Decimal = inv.credits_applied.iter().map(|c| c.amount).sum();
                    prop_assert_eq!(inv.total, inv.subtotal - applied);
                    billed += inv.lines.iter().filter(|l| l.kind == LineKind::Usage)
                        .map(|l| l.billable_quantity.map_or(0, |q| q.0)).sum::<u128>();
                }
                let moved = expire(&mut bank, t(&to)).map_err(|e| TestCaseError::fail(e.to_string()))?;
                expired += moved.iter().map(|(_, c)| *c).sum::<Decimal>();
            }
            let bal = balance(&mut bank, "acme", t("2030-01-01T00:00:00Z")).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let carried: u128 = bal.fragments.iter().map(|f| f.quantity.0).sum();
            prop_assert_eq!(billed + carried, metered);
            let all = bank.atomically(false, |t| gpumeter_bank::grants::grants(t, Some("acme")))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let remaining: Decimal = all.iter().map(|g| g.remaining).sum();
            let burned: Decimal = bank.atomically(false, |t| {
                let mut s = Decimal::ZERO;
                for tx in t.transactions(Some("finalize"))? {
                    for p in &tx.tx.postings {
                        if p.commodity == CREDITS && p.account.starts_with("tenant:") {
                            s -= p.amount;
                        }
                    }
                }
                Ok(s)
            }).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(granted, burned + expired + remaining);
            for g in &all {
                prop_assert!(g.remaining >= Decimal::ZERO);
            }
            // Every transaction balances per commodity and the chain holds.
            let report = bank.atomically(false, |t| gpumeter_bank::verify(t))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(report.transactions >= grants.len() as u64);
        }

        /// Burn order under random grants: a grant burns only when every grant before it in
        /// (priority, expiry, age) order that may pay is empty or worth less than a minor unit.
        #[test]
        fn burn_order_is_priority_then_expiry_then_age(
            grants in proptest::collection::vec((1u32..60, 0i64..3, 0u32..4), 1..6),
            launches in 1_000u128..20_000,
        ) {
            let b = book();
            let mut bank = MemoryLedger::new();
            for (i, (credits, priority, expiry_month)) in grants.iter().enumerate() {
                let expires = (*expiry_month > 0).then(|| format!("2028-{:02}-01T00:00:00Z", expiry_month));
                grant(&mut bank, &grant_req("acme", &credits.to_string(), *priority, GrantKind::Purchased, expires.as_deref(), &format!("g{i}")))
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            let order = bank.atomically(false, |t| gpumeter_bank::grants::grants(t, Some("acme")))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let f = finalize(&mut bank, &usage("acme", "2027-01-01T00:00:00Z", launches), &b,
                Some((t("2027-01-01T00:00:00Z"), t("2027-02-01T00:00:00Z"))), true)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let inv = &f.document.invoices[0];
            // Burned in burn order, and every grant before the last one burned is emptied.
            let burned: Vec<&str> = inv.credits_applied.iter().map(|c| c.grant.as_str()).collect();
            let expected: Vec<&str> = order.iter().map(|g| g.grant.grant.as_str()).filter(|g| burned.contains(g)).collect();
            prop_assert_eq!(&burned, &expected);
            if let Some(last) = burned.last() {
                for g in order.iter().take_while(|g| g.grant.grant != *last) {
                    let used = inv.credits_applied.iter().find(|c| c.grant == g.grant.grant).map_or(Decimal::ZERO, |c| c.credits);
                    prop_assert_eq!(used, g.remaining, "grant {} burns before {}", g.grant.grant, last);
                }
            }
            let _ = rfc3339(0);
        }
    }
}
