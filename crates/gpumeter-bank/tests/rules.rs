//! Issue 30's rules for grants, reservations, keys and contract close, across requests:
//! a keyed retry with other parameters is refused naming the first difference (item 8); a
//! caller's key never takes a key the bank makes for itself, and a conversion is always made
//! (item 6); a reservation's fee is positive, and a fee-0 reservation of an older ledger bills
//! and converts nothing (item 6); a burn never gives away a minor unit (item 6); one request
//! cannot take the bank's headroom from the others (item 10); a close under a package rate
//! bills at most a pro-rata share of a package, nothing that paid packages hold (item 5); and
//! `idle` is never invoiced nor granted (item 7).

mod support;

use gpumeter_bank::grants::{pay, MAX_AMOUNT, MAX_CREDITS};
use gpumeter_bank::{
    balance, close, finalize, grant, reserve, BankError, GrantKind, GrantRequest, Ledger,
    MemoryLedger, NewTransaction, Reservation, StoredTransaction,
};
use gpumeter_core::{MeterKind, Quantity, WarningCode};
use gpumeter_rating::{LineKind, PriceBook};
use rust_decimal::Decimal;
use support::{book, d, grant_req, report_of, reservation, t};

const DEC: (&str, &str) = ("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z");
const JAN: (&str, &str) = ("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z");

fn period((from, to): (&str, &str)) -> Option<(u64, u64)> {
    Some((t(from), t(to)))
}

fn all(bank: &mut MemoryLedger) -> Vec<StoredTransaction> {
    bank.atomically(false, |t| t.transactions(None))
        .expect("transactions")
}

fn append(bank: &mut MemoryLedger, tx: NewTransaction) {
    bank.atomically(true, |t| t.append(tx.clone()))
        .expect("append");
}

/// A book of one kernel-launches rate on SKU `h100`, from its TOML body, in `currency`.
fn book_of(currency: &str, rate: &str) -> PriceBook {
    PriceBook::from_toml_str(
        "rules.toml",
        &format!(
            "schema = \"gpumeter.pricebook/v1\"\nversion = \"rules\"\ncurrency = \"{currency}\"\n\
             [[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n\
             [[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1\"\n{rate}\n"
        ),
    )
    .expect("book")
}

// --- Item 8: idempotency keys -------------------------------------------------------------

/// Stripe's rule: the key names one request. The same request again is answered with the
/// grant recorded then; any other parameter is refused naming it, and nothing is applied.
#[test]
fn a_keyed_retry_with_other_parameters_is_refused_naming_the_first_difference() {
    let mut bank = MemoryLedger::new();
    let mut base = grant_req(
        "acme",
        "5",
        1,
        GrantKind::Purchased,
        Some("2027-06-01T00:00:00Z"),
        "po-7",
    );
    base.skus = vec!["h100".into(), "a100".into()];
    let (g, new) = grant(&mut bank, &base).expect("grant");
    assert!(new);
    let n = all(&mut bank).len();

    // The same request: as written, with an amount written otherwise, the scope in another
    // order, and without a start (a default start is the first request's instant).
    let mut same = base.clone();
    same.credits = d("5.000");
    same.skus = vec!["a100".into(), "h100".into(), "h100".into()];
    same.effective = None;
    same.at = t("2026-11-20T00:00:00Z");
    for req in [&base, &same] {
        let (again, new) = grant(&mut bank, req).expect("the same request");
        assert!(!new);
        assert_eq!(again, g);
    }

    type Change = fn(&mut GrantRequest);
    let cases: [(&str, Change); 9] = [
        ("tenant", |r| r.tenant = "bob".into()),
        ("credits", |r| r.credits = d("6")),
        ("rate", |r| r.rate = d("0.20")),
        ("priority", |r| r.priority = 2),
        ("effective", |r| {
            r.effective = Some(t("2026-11-02T00:00:00Z"))
        }),
        ("expires", |r| r.expires = None),
        ("kind", |r| r.kind = GrantKind::Promotional),
        ("skus", |r| r.skus = vec!["h100".into()]),
        ("meters", |r| r.meters = vec![MeterKind::SmNs]),
    ];
    for (field, change) in cases {
        let mut other = base.clone();
        change(&mut other);
        match grant(&mut bank, &other) {
            Err(BankError::KeyReused {
                key, field: named, ..
            }) => {
                assert_eq!((key.as_str(), named), ("po-7", field));
            }
            other => panic!("{field}: {other:?}"),
        }
        assert_eq!(all(&mut bank).len(), n, "{field}: nothing applied");
    }
    // Two differences: the first one in the request's order is named.
    let mut two = base.clone();
    two.priority = 9;
    two.credits = d("7");
    let err = grant(&mut bank, &two).expect_err("two differences");
    assert!(
        matches!(&err, BankError::KeyReused { field: "credits", recorded, requested, .. }
            if recorded == "5" && requested == "7"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("`po-7`") && text.contains("its credits was 5") && text.contains("is 7"),
        "{text}"
    );
}

/// A grant recorded without a key before issue 30 (`grant:<sha256>`) is found by a retry of
/// the same request at the same instant (the C ABI's `at_ns`), not granted twice.
#[test]
fn a_keyless_grant_recorded_before_issue_30_is_found_by_its_retry() {
    let mut req = grant_req("acme", "5", 0, GrantKind::Purchased, None, "unused");
    req.key = None;
    // Today's key, and the ledger as an older version wrote it (the same transaction under
    // `grant:<sha256>`).
    let mut today = MemoryLedger::new();
    grant(&mut today, &req).expect("grant");
    let recorded = all(&mut today).remove(0);
    let digest = recorded
        .tx
        .key
        .strip_prefix("grant-terms:")
        .unwrap_or_else(|| panic!("a derived key: {}", recorded.tx.key))
        .to_string();
    let mut old = MemoryLedger::new();
    let mut tx = recorded.tx.clone();
    tx.key = format!("grant:{digest}");
    append(&mut old, tx);
    let (g, new) = grant(&mut old, &req).expect("retry");
    assert!(!new, "found, not granted again");
    assert_eq!(g.credits, d("5"));
    assert_eq!(all(&mut old).len(), 1);
    // The same terms at another instant are another grant, as before.
    req.at += 1;
    let (_, new) = grant(&mut old, &req).expect("another instant");
    assert!(new);
}

// --- Item 6: no credit from nothing --------------------------------------------------------

/// December: 2 000 launches of a 5 000-launch reservation, so 3 credits convert. Returns the
/// bank and the key of the conversion's transaction.
fn december_with_a_conversion(bank: &mut MemoryLedger, before: impl FnOnce(&mut MemoryLedger)) {
    reserve(bank, &reservation("acme", "2.00", None)).expect("reserve");
    before(bank);
    finalize(
        bank,
        &report_of(&[("acme", "2026-12-03T00:00:00Z", 2000)], "dec"),
        &book(),
        period(DEC),
        true,
    )
    .expect("finalize");
}

fn conversion(bank: &mut MemoryLedger) -> Option<StoredTransaction> {
    all(bank)
        .into_iter()
        .find(|t| t.tx.kind == "grant" && t.tx.memo["kind"] == "reservation")
}

/// Before issue 30 a conversion's key was `grant:<finalization key>:<grant id>`, which
/// `--key <finalization key>:<grant id>` took first: the finalization then found "its"
/// grant and the tenant's unused capacity never converted. Keys the bank makes live in their
/// own namespace now: the caller's grant and the conversion are both made.
#[test]
fn a_callers_key_never_takes_the_key_of_a_conversion() {
    // Where the conversion goes, found by making it once.
    let mut first = MemoryLedger::new();
    december_with_a_conversion(&mut first, |_| {});
    let made = conversion(&mut first).expect("a conversion");
    let suffix = made
        .tx
        .key
        .strip_prefix("conversion:")
        .unwrap_or_else(|| panic!("an internal key: {}", made.tx.key))
        .to_string();
    assert_eq!(made.tx.memo["credits"], "3");

    // Another bank, the same requests, and a caller's grant under the old conversion key
    // taken first.
    let mut bank = MemoryLedger::new();
    december_with_a_conversion(&mut bank, |b| {
        let mut squat = grant_req("acme", "0.5", 0, GrantKind::Purchased, None, &suffix);
        squat.effective = Some(t("2027-01-01T00:00:00Z"));
        grant(b, &squat).expect("a caller's grant");
    });
    let converted = conversion(&mut bank).expect("the conversion is made all the same");
    assert_eq!(converted.tx.key, made.tx.key);
    assert_eq!(converted.tx.memo["credits"], "3");
    let b = balance(&mut bank, "acme", t("2027-01-15T00:00:00Z")).expect("balance");
    let kinds: Vec<(GrantKind, Decimal)> =
        b.credits.iter().map(|c| (c.kind, c.remaining)).collect();
    assert!(
        kinds.contains(&(GrantKind::Reservation, d("3"))),
        "{kinds:?}"
    );
    assert!(
        kinds.contains(&(GrantKind::Purchased, d("0.5"))),
        "{kinds:?}"
    );

    // A ledger written before issue 30 keeps its conversions under `grant:…`: a caller's key
    // that names one is another request, refused, never answered with the conversion.
    let mut old = MemoryLedger::new();
    for stored in all(&mut first) {
        let mut tx = stored.tx;
        if tx.key == made.tx.key {
            tx.key = format!("grant:{suffix}");
        }
        append(&mut old, tx);
    }
    let n = all(&mut old).len();
    let err = grant(
        &mut old,
        &grant_req("acme", "3", 0, GrantKind::Purchased, None, &suffix),
    )
    .expect_err("the key of a conversion");
    match &err {
        BankError::KeyReused {
            field: "kind",
            recorded,
            ..
        } => assert!(
            recorded.contains("a conversion of reservation"),
            "{recorded}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(all(&mut old).len(), n);
}

/// `reserve` refuses a fee of 0 or less: unpaid capacity never converts.
#[test]
fn a_reservation_needs_a_positive_fee() {
    let mut bank = MemoryLedger::new();
    for fee in ["0", "0.00", "-1"] {
        let err = reserve(&mut bank, &reservation("acme", fee, None)).expect_err(fee);
        assert!(
            matches!(&err, BankError::Refused(m) if m.contains("--fee") && m.contains("positive")),
            "{fee}: {err}"
        );
    }
    assert!(all(&mut bank).is_empty());
}

/// A fee-0 reservation an older version recorded converted 3 credits from nothing every
/// period. Now it bills nothing and converts nothing, period after period, and says so.
#[test]
fn a_fee_0_reservation_of_an_older_ledger_bills_and_converts_nothing() {
    let mut bank = MemoryLedger::new();
    let mut r = reservation("acme", "0", None).terms;
    r.reservation = "r-fee0".into();
    append(
        &mut bank,
        NewTransaction {
            key: "reserve:an-older-version".into(),
            kind: "reserve".into(),
            at: "2026-11-01T00:00:00Z".into(),
            tenant: Some("acme".into()),
            postings: vec![],
            memo: serde_json::to_value(&r).expect("memo"),
        },
    );
    for (p, source) in [(DEC, "dec"), (JAN, "jan")] {
        let window = p.0.replace("01T00", "03T00");
        let f = finalize(
            &mut bank,
            &report_of(&[("acme", &window, 2000)], source),
            &book(),
            period(p),
            true,
        )
        .expect("finalize");
        let inv = &f.document.invoices[0];
        let kinds: Vec<LineKind> = inv.lines.iter().map(|l| l.kind).collect();
        assert_eq!(kinds, [LineKind::Usage], "{p:?}: no fee line");
        assert_eq!(inv.subtotal, d("1.00"), "2 000 launches at 0.50 per 1K");
        assert!(
            inv.warnings
                .iter()
                .any(|w| *w.code() == WarningCode::ReservationUnpaid && w.contains("r-fee0")),
            "{:?}",
            inv.warnings
        );
        assert!(conversion(&mut bank).is_none(), "{p:?}: nothing converted");
    }
    let b = balance(&mut bank, "acme", t("2027-03-01T00:00:00Z")).expect("balance");
    assert!(b.credits.is_empty(), "{:?}", b.credits);
}

/// A burn gives the tenant less than one minor unit beyond the credits it burns, whatever
/// the rate: a CLF line (4 decimals) of 0.0123 paid by a credit worth 1 000 000 CLF costs
/// 0.000000012 credits = 0.0120 CLF, and 0.0003 is left to pay (it was covered whole before:
/// 3 minor units given away on one line).
#[test]
fn a_burn_at_a_high_rate_covers_only_what_its_credits_are_worth() {
    let mut bank = MemoryLedger::new();
    let mut req = grant_req("acme", "1", 0, GrantKind::Purchased, None, "clf");
    req.rate = d("1000000");
    grant(&mut bank, &req).expect("grant");
    let f = finalize(
        &mut bank,
        &report_of(&[("acme", "2026-12-03T00:00:00Z", 1)], "one"),
        &book_of("CLF", "unit_price = \"0.0123\""),
        period(DEC),
        true,
    )
    .expect("finalize");
    let inv = &f.document.invoices[0];
    assert_eq!(inv.subtotal, d("0.0123"));
    assert_eq!(inv.credits_applied.len(), 1);
    assert_eq!(inv.credits_applied[0].credits, d("0.000000012"));
    assert_eq!(inv.credits_applied[0].amount, d("0.0120"));
    assert_eq!(inv.total, d("0.0003"));
}

mod gift {
    use super::*;
    use num_bigint::BigInt;
    use proptest::prelude::*;

    fn exact(x: Decimal) -> (BigInt, u32) {
        (BigInt::from(x.mantissa()), x.scale())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// For any line, credits and rate within the bounds and any currency scale: the
        /// credits burned are at most those left, the minor units covered at most those due,
        /// and what the tenant gets beyond the burned credits' value is at least 0 and less
        /// than one minor unit. Up to a rate of 10^(9 − scale) a grant covers the line in
        /// full up to its worth, as it always did.
        #[test]
        fn a_burn_gives_away_less_than_one_minor_unit(
            due in 0u128..2_000_000,
            credits_nano in 1i64..2_000_000_000_000,
            rate_digits in 1i64..1000,
            rate_exponent in 0u32..16,
            scale in 0u32..5,
        ) {
            let remaining = Decimal::new(credits_nano, 9).normalize();
            // 10^-9 to 10^6, every order of magnitude alike.
            let rate = (Decimal::from(rate_digits)
                * Decimal::from(10u64.pow(rate_exponent))
                / Decimal::from(1_000_000_000u64))
            .min(gpumeter_bank::grants::MAX_CREDIT_RATE)
            .normalize();
            let (burned, covered) = pay(due, remaining, rate, scale).expect("a positive rate");
            prop_assert!(burned >= Decimal::ZERO && burned <= remaining);
            prop_assert!(covered <= due);
            // covered × 10^(cs + rs) − burned × rate × 10^scale, in units of 10^-(cs+rs) minor units.
            let ((cm, cs), (rm, rs)) = (exact(burned), exact(rate));
            let one = num_traits::pow(BigInt::from(10), (cs + rs) as usize);
            let value = cm * rm * num_traits::pow(BigInt::from(10), scale as usize);
            let gift = BigInt::from(covered) * &one - value;
            prop_assert!(gift >= BigInt::from(0), "covered less than burned: {}", gift);
            prop_assert!(gift < one, "a gift of a minor unit or more: {} / {}", gift, one);
            let worth = gpumeter_bank::grants::value_minor(remaining, rate, scale).expect("worth");
            let nano_worth_at_most_a_minor_unit =
                rate * Decimal::from(10u64.pow(scale)) <= Decimal::from(1_000_000_000u64);
            if nano_worth_at_most_a_minor_unit {
                prop_assert_eq!(covered, due.min(worth));
            }
        }
    }
}

// --- Item 10: bounded requests --------------------------------------------------------------

/// One grant of the largest decimal used to fill `provider:credit_sales`, so that every later
/// purchased grant of every tenant failed. Grants and reservations are bounded per request
/// now, and after maximal grants another tenant's grant and finalizations still work.
#[test]
fn one_request_cannot_take_the_banks_headroom_from_the_others() {
    let mut bank = MemoryLedger::new();
    let refused = |bank: &mut MemoryLedger, req: &GrantRequest, says: &str| {
        let err = grant(bank, req).expect_err(says);
        assert!(
            matches!(&err, BankError::Refused(m) if m.contains(says)),
            "{says}: {err}"
        );
    };
    let mut huge = grant_req("whale", "1", 0, GrantKind::Purchased, None, "huge");
    huge.credits = Decimal::MAX;
    refused(&mut bank, &huge, "more than 1000000000000");
    huge.credits = MAX_CREDITS;
    huge.rate = d("1000001");
    refused(&mut bank, &huge, "more than 1000000");
    huge.rate = d("1001");
    refused(&mut bank, &huge, "worth 1001000000000000");
    assert!(all(&mut bank).is_empty());

    // Maximal grants: 10^12 credits worth 10^15.
    for i in 0..200 {
        let mut max = grant_req(
            "whale",
            "1",
            0,
            GrantKind::Purchased,
            None,
            &format!("max-{i}"),
        );
        max.credits = MAX_CREDITS;
        max.rate = d("1000");
        grant(&mut bank, &max).expect("a maximal grant");
    }
    let sales = bank
        .atomically(false, |t| {
            t.balance(
                gpumeter_bank::accounts::CREDIT_SALES,
                gpumeter_bank::CREDITS,
            )
        })
        .expect("balance");
    assert_eq!(sales, -MAX_CREDITS * Decimal::from(200));
    // Another tenant's grant, and finalizations that burn on `provider:credit_sales`.
    grant(
        &mut bank,
        &grant_req("acme", "50", 0, GrantKind::Purchased, None, "po-1"),
    )
    .expect("another tenant's grant");
    for (tenant, source) in [("acme", "a"), ("whale", "w")] {
        let f = finalize(
            &mut bank,
            &report_of(&[(tenant, "2026-12-03T00:00:00Z", 4000)], source),
            &book(),
            period(DEC),
            true,
        )
        .expect("finalize");
        assert_eq!(
            f.document.invoices[0].total,
            d("0.00"),
            "{tenant}: paid by credits"
        );
    }

    // Reservations: capacity, fee, capacity × rate.
    type Change = fn(&mut Reservation);
    let cases: [(&str, Change); 3] = [
        ("--capacity", |r| r.capacity = d("1000000000001")),
        ("--fee", |r| r.fee = MAX_AMOUNT + d("0.01")),
        ("worth", |r| {
            r.capacity = MAX_CREDITS;
            r.rate = d("1000.01");
        }),
    ];
    for (says, change) in cases {
        let mut r = reservation("acme", "2.00", None);
        change(&mut r.terms);
        let err = reserve(&mut bank, &r).expect_err(says);
        assert!(
            matches!(&err, BankError::Refused(m) if m.contains(says) && m.contains("more than")),
            "{says}: {err}"
        );
    }
}

// --- Item 5: contract close under a package rate ------------------------------------------

/// Packages of 25 launches at 2.00, billed in increments of 10.
fn package_book() -> PriceBook {
    book_of(
        "USD",
        "model = \"package\"\npackage_size = \"25\"\nunit_price = \"2.00\"\nincrement = \"10\"",
    )
}

fn closed_after(launches: &[(&str, (&str, &str), u128)]) -> gpumeter_bank::Closed {
    let mut bank = MemoryLedger::new();
    for &(source, p, q) in launches {
        let window = p.0.replace("01T00", "03T00");
        finalize(
            &mut bank,
            &report_of(&[("acme", &window, q)], source),
            &package_book(),
            period(p),
            true,
        )
        .expect("finalize");
    }
    let closed = close(
        &mut bank,
        "acme",
        &package_book(),
        t("2027-03-01T00:00:00Z"),
    )
    .expect("close");
    // Closing again bills nothing: the fragment is gone.
    let again = close(
        &mut bank,
        "acme",
        &package_book(),
        t("2027-03-02T00:00:00Z"),
    )
    .expect("again");
    assert!(again.lines.is_empty());
    closed
}

/// `close` priced a fragment per launch at the package's price (8 launches × 2.00 = 16.00,
/// a factor of the package size too much). It bills the fragment's pro-rata share of a
/// package now, less what the period's paid packages hold.
#[test]
fn a_close_under_a_package_rate_bills_at_most_a_pro_rata_share_of_a_package() {
    // 78 launches: 70 billed (3 packages hold 75), 8 carried; 5 of them in the packages paid
    // for, 3 billed at close: 3 × 2.00 ÷ 25 = 0.24.
    let c = closed_after(&[("dec", DEC, 78)]);
    assert_eq!(c.lines.len(), 1);
    let l = &c.lines[0];
    assert_eq!(
        (l.quantity, l.package_size, l.covered, l.amount),
        (
            Quantity(8),
            Some(Quantity(25)),
            Some(Quantity(5)),
            d("0.24")
        )
    );
    assert_eq!(c.total, d("0.24"));
    // 96 launches: 90 billed (4 packages hold 100), 6 carried, all held: nothing to bill.
    let c = closed_after(&[("dec", DEC, 96)]);
    assert_eq!(
        (c.lines[0].quantity, c.lines[0].covered, c.total),
        (Quantity(6), Some(Quantity(6)), d("0.00"))
    );
    // 105 launches: 100 billed in 4 full packages, 5 carried, none held: 5 × 2.00 ÷ 25.
    let c = closed_after(&[("dec", DEC, 105)]);
    assert_eq!(
        (c.lines[0].quantity, c.lines[0].covered, c.total),
        (Quantity(5), Some(Quantity(0)), d("0.40"))
    );
}

/// Across periods the latest finalization says what was paid: December's 8 are carried into
/// January, whose 20 + 8 bill 20 (1 package holds 25) and carry 8 again: 5 held, 3 billed.
#[test]
fn a_close_reads_the_packages_of_the_period_that_carried_the_fragment_out() {
    let c = closed_after(&[("dec", DEC, 78), ("jan", JAN, 20)]);
    assert_eq!(
        (c.lines[0].quantity, c.lines[0].covered, c.total),
        (Quantity(8), Some(Quantity(5)), d("0.24"))
    );
}

/// A fragment carried out of per-unit usage and closed under a package rate: no package was
/// paid for it, so its pro-rata share (8 × 2.00 ÷ 25 = 0.64), never 8 × 2.00.
#[test]
fn a_close_under_a_package_rate_of_a_fragment_no_package_holds_bills_its_share() {
    let mut bank = MemoryLedger::new();
    let per_unit = book_of("USD", "unit_price = \"0.10\"\nincrement = \"10\"");
    finalize(
        &mut bank,
        &report_of(&[("acme", "2026-12-03T00:00:00Z", 78)], "dec"),
        &per_unit,
        period(DEC),
        true,
    )
    .expect("finalize");
    let c = close(
        &mut bank,
        "acme",
        &package_book(),
        t("2027-03-01T00:00:00Z"),
    )
    .expect("close");
    assert_eq!(
        (c.lines[0].quantity, c.lines[0].covered, c.total),
        (Quantity(8), Some(Quantity(0)), d("0.64"))
    );
    // Under the per-unit book it is 8 × 0.10, as before.
    let mut bank = MemoryLedger::new();
    finalize(
        &mut bank,
        &report_of(&[("acme", "2026-12-03T00:00:00Z", 78)], "dec"),
        &per_unit,
        period(DEC),
        true,
    )
    .expect("finalize");
    let c = close(&mut bank, "acme", &per_unit, t("2027-03-01T00:00:00Z")).expect("close");
    assert_eq!(
        (c.lines[0].package_size, c.lines[0].covered, c.total),
        (None, None, d("0.80"))
    );
}

/// A close after a period split over reports (a first invoice and its supplements) bills what
/// a close after the period in one report bills. 78 launches as 40 + 38: the supplement's
/// lines carry the change of the packages (`extensions.change`), not the period's packages,
/// and the close read no room in them and billed the 8 carried at 8 × 2.00 ÷ 25 = 0.64; the
/// period's 3 packages hold 75 of which 70 are billed, so 5 of the 8 are paid for: 0.24.
#[test]
fn a_close_after_a_supplement_reads_the_period_s_packages() {
    let whole = closed_after(&[("dec", DEC, 78)]);
    assert_eq!(whole.total, d("0.24"));
    for split in [
        &[("dec-a", DEC, 40), ("dec-b", DEC, 38)][..],
        &[("dec-a", DEC, 70), ("dec-b", DEC, 8)][..],
        &[("dec-a", DEC, 3), ("dec-b", DEC, 50), ("dec-c", DEC, 25)][..],
    ] {
        assert_eq!(closed_after(split), whole, "{split:?}");
    }
    // Carried into January, whose two reports (20 + 8 carried = 28: 1 package holds 25, 20
    // billed, 8 carried) bill as one.
    let whole = closed_after(&[("dec", DEC, 78), ("jan", JAN, 20)]);
    let split = closed_after(&[("dec", DEC, 78), ("jan-a", JAN, 9), ("jan-b", JAN, 11)]);
    assert_eq!(split, whole);
    assert_eq!(whole.total, d("0.24"));
}

/// A finalization's memo keeps its period's last package span (`paid_packages`); a memo of a
/// gpumeter before it is read from its invoice's own lines, as then: the 78 launches of one
/// report close for 0.24 either way, and a supplement's memo without them finds no room, as
/// before (0.64).
#[test]
fn a_close_reads_an_older_memo_without_paid_packages_from_its_invoice() {
    let older = |reports: &[(&str, u128)]| -> gpumeter_bank::Closed {
        let mut bank = MemoryLedger::new();
        for &(source, q) in reports {
            finalize(
                &mut bank,
                &report_of(&[("acme", "2026-12-03T00:00:00Z", q)], source),
                &package_book(),
                period(DEC),
                true,
            )
            .expect("finalize");
        }
        let mut old = MemoryLedger::new();
        let mut stripped = 0;
        for stored in all(&mut bank) {
            let mut tx = stored.tx;
            if let Some(memo) = tx.memo.as_object_mut() {
                stripped += usize::from(memo.remove("paid_packages").is_some());
            }
            append(&mut old, tx);
        }
        assert_eq!(stripped, reports.len());
        close(&mut old, "acme", &package_book(), t("2027-03-01T00:00:00Z")).expect("close")
    };
    assert_eq!(older(&[("dec", 78)]).total, d("0.24"));
    assert_eq!(older(&[("dec-a", 40), ("dec-b", 38)]).total, d("0.64"));
}

mod close_after_split {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// For any December usage split into one to four reports (and, when `january` is
        /// not 0, January's usage after it split likewise), a close bills what it bills after
        /// each period in one report.
        #[test]
        fn a_close_after_any_split_bills_as_after_the_whole(
            december in proptest::collection::vec(1u128..80, 1..5),
            january in proptest::collection::vec(0u128..40, 1..4),
        ) {
            let sources: Vec<String> = (0..8).map(|i| format!("part-{i}")).collect();
            let mut split: Vec<(&str, (&str, &str), u128)> = december
                .iter()
                .enumerate()
                .map(|(i, &q)| (sources[i].as_str(), DEC, q))
                .collect();
            let mut whole = vec![("dec", DEC, december.iter().sum::<u128>())];
            let jan: u128 = january.iter().sum();
            if jan > 0 {
                split.extend(
                    january
                        .iter()
                        .enumerate()
                        .filter(|(_, &q)| q > 0)
                        .map(|(i, &q)| (sources[4 + i].as_str(), JAN, q)),
                );
                whole.push(("jan", JAN, jan));
            }
            prop_assert_eq!(closed_after(&split), closed_after(&whole));
        }
    }
}

// --- Item 7: idle ---------------------------------------------------------------------------

/// A report with `idle` rows finalizes its tenants only: `idle` gets no invoice, no
/// receivable, no fragment, and its balance shows nothing; it cannot be granted, reserved for
/// or closed.
#[test]
fn idle_is_never_finalized_granted_reserved_or_closed() {
    let mut bank = MemoryLedger::new();
    let f = finalize(
        &mut bank,
        &report_of(
            &[
                ("acme", "2026-12-03T00:00:00Z", 2000),
                (gpumeter_core::IDLE, "2026-12-03T00:00:00Z", 700),
            ],
            "dec",
        ),
        &book(),
        period(DEC),
        true,
    )
    .expect("finalize");
    let tenants: Vec<&str> = f
        .document
        .invoices
        .iter()
        .map(|i| i.tenant.as_str())
        .collect();
    assert_eq!(tenants, ["acme"]);
    let idle = f
        .document
        .extensions
        .idle
        .as_ref()
        .expect("idle listed apart");
    assert_eq!(idle.usage[0].quantity, Quantity(700));
    assert!(all(&mut bank)
        .iter()
        .all(|t| t.tx.tenant.as_deref() != Some(gpumeter_core::IDLE)));
    let b = balance(&mut bank, gpumeter_core::IDLE, t("2027-03-01T00:00:00Z")).expect("balance");
    assert!(b.credits.is_empty() && b.fragments.is_empty() && b.receivable.is_empty());

    let n = all(&mut bank).len();
    let g = grant_req(
        gpumeter_core::IDLE,
        "5",
        0,
        GrantKind::Purchased,
        None,
        "idle",
    );
    assert!(
        matches!(grant(&mut bank, &g), Err(BankError::Refused(m)) if m.contains("never invoiced"))
    );
    let r = reservation(gpumeter_core::IDLE, "2.00", None);
    assert!(
        matches!(reserve(&mut bank, &r), Err(BankError::Refused(m)) if m.contains("never invoiced"))
    );
    let c = close(
        &mut bank,
        gpumeter_core::IDLE,
        &book(),
        t("2027-03-01T00:00:00Z"),
    );
    assert!(matches!(c, Err(BankError::Refused(m)) if m.contains("never invoiced")));
    assert_eq!(all(&mut bank).len(), n);
}

/// The same reservation terms spelled otherwise (a fee of `2` after `2.00`, a capacity of
/// `5.000` after `5`, the span in another time zone) are the one reservation recorded: the
/// retry is not applied, and the period bills one fee. Before, each spelling hashed to its own
/// key, so December billed three fees and made three conversions (hostile review of issue 30).
#[test]
fn the_same_reservation_terms_by_value_are_one_reservation() {
    let mut bank = MemoryLedger::new();
    let (first, new) = reserve(&mut bank, &reservation("acme", "2.00", None)).expect("reserve");
    assert!(new);
    let mut spellings = vec![reservation("acme", "2", None)];
    let mut five = reservation("acme", "2.0", None);
    five.terms.capacity = d("5.000");
    spellings.push(five);
    let mut zoned = reservation("acme", "2.00", None);
    zoned.terms.from = "2026-11-30T19:00:00-05:00".into();
    spellings.push(zoned);
    for again in &spellings {
        let (r, new) = reserve(&mut bank, again).expect("reserve again");
        assert!(!new, "{:?}", again.terms);
        assert_eq!(r, first);
    }
    // Other terms are another reservation.
    let (other, new) = reserve(&mut bank, &reservation("acme", "3.00", None)).expect("reserve");
    assert!(new);
    assert_ne!(other.reservation, first.reservation);
    let f = finalize(
        &mut bank,
        &report_of(&[("acme", "2026-12-03T00:00:00Z", 1000)], "dec"),
        &book(),
        Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"))),
        true,
    )
    .expect("finalize");
    let fees: Vec<Decimal> = f.document.invoices[0]
        .lines
        .iter()
        .filter(|l| l.kind == LineKind::Reservation)
        .map(|l| l.amount)
        .collect();
    assert_eq!(fees, vec![d("2.00"), d("3.00")]);
}

/// Two reports of one day finalized without a period (the CLI's default: each report's usage
/// span) are two periods, each billing the invoice minimum: each invoice says so
/// (`period_from_usage`). With the month given, the second is a supplement and bills the
/// minimum once, without the warning; an invoice with nothing billed per period (no minimum,
/// flat fee, tier or package) has no such warning either (hostile review of issue 30).
#[test]
fn a_period_from_the_usage_warns_when_it_bills_per_period() {
    let with_minimum = PriceBook::from_toml_str(
        "minimum.toml",
        "schema = \"gpumeter.pricebook/v1\"\nversion = \"m\"\ncurrency = \"USD\"\n\
         invoice_minimum = \"5.00\"\n\
         [[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1\"\n\
         unit_price = \"0.0005\"\n",
    )
    .expect("book");
    let first = report_of(&[("acme", "2026-12-03T00:00:00Z", 1000)], "a");
    let second = report_of(&[("acme", "2026-12-03T05:00:00Z", 1000)], "b");
    let warned = |f: &gpumeter_bank::Finalized| {
        f.document.invoices[0]
            .warnings
            .iter()
            .any(|w| *w.code() == WarningCode::PeriodFromUsage)
    };
    let mut bank = MemoryLedger::new();
    for r in [&first, &second] {
        let f = finalize(&mut bank, r, &with_minimum, None, true).expect("finalize");
        assert_eq!(f.document.invoices[0].subtotal, d("5.00"));
        assert!(warned(&f), "{:?}", f.document.invoices[0].warnings);
    }
    let month = Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z")));
    let mut bank = MemoryLedger::new();
    let a = finalize(&mut bank, &first, &with_minimum, month, true).expect("finalize");
    let b = finalize(&mut bank, &second, &with_minimum, month, true).expect("supplement");
    assert_eq!(
        a.document.invoices[0].subtotal + b.document.invoices[0].subtotal,
        d("5.00")
    );
    assert!(!warned(&a) && !warned(&b));
    // Per unit, no minimum: nothing restarts with a period, so no warning.
    let mut bank = MemoryLedger::new();
    let f = finalize(&mut bank, &first, &book(), None, true).expect("finalize");
    assert!(!warned(&f), "{:?}", f.document.invoices[0].warnings);
}

/// A tenant with a reservation whose own periods run mid-month does not block another
/// tenant's report of a calendar month: the fee-only invoice it would get for that month
/// overlaps its finalized period, so it gets none (its fee is billed with its own periods),
/// and the other tenant's month finalizes. Before, every December report of every tenant was
/// refused with "period overlap" naming acme (hostile review of issue 30).
#[test]
fn another_tenants_reservation_never_blocks_a_finalization() {
    let mut bank = MemoryLedger::new();
    finalize(
        &mut bank,
        &report_of(&[("acme", "2026-11-20T00:00:00Z", 1000)], "acme-mid"),
        &book(),
        Some((t("2026-11-15T00:00:00Z"), t("2026-12-15T00:00:00Z"))),
        true,
    )
    .expect("acme's mid-month period");
    reserve(&mut bank, &reservation("acme", "2.00", None)).expect("reserve");
    let f = finalize(
        &mut bank,
        &report_of(&[("beta", "2026-12-20T00:00:00Z", 1000)], "beta-dec"),
        &book(),
        Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"))),
        true,
    )
    .expect("beta's December is not refused because of acme");
    let tenants: Vec<&str> = f
        .document
        .invoices
        .iter()
        .map(|i| i.tenant.as_str())
        .collect();
    assert_eq!(tenants, ["beta"]);
    // acme's own next period, inside the reservation's span, bills the fee.
    let f = finalize(
        &mut bank,
        &report_of(&[("acme", "2026-12-20T00:00:00Z", 1000)], "acme-next"),
        &book(),
        Some((t("2026-12-15T00:00:00Z"), t("2027-01-15T00:00:00Z"))),
        true,
    )
    .expect("acme's next period");
    assert!(f.document.invoices[0]
        .lines
        .iter()
        .any(|l| l.kind == LineKind::Reservation));
}
