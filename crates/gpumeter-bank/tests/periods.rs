//! A period is one unit (issue 30 item 1, DESIGN §5 "Invoices"): a (tenant, period) finalized
//! from several reports bills what the period's usage rated at once bills, to the cent:
//! graduated tiers continue, flat fees and the invoice minimum are charged once, a volume tier
//! is re-chosen (a credit note when the price falls).
//!
//! Each body runs on a memory ledger, on SQLite and (feature `postgres`, the test server) on
//! PostgreSQL.

mod support;

use gpumeter_bank::{finalize, BankError, Ledger, MemoryLedger};
use gpumeter_core::{MeterKind, Quantity, UsageReport, UsageRow};
use gpumeter_rating::PriceBook;
use rust_decimal::Decimal;
use support::{d, hex_of, t, usage, Backend, Place};

/// December 2026, the period every test here bills.
fn dec() -> (u64, u64) {
    (t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"))
}

/// A book of kernel launches on H100s, per 1K, with `rate` (the `[[rate]]` keys after `unit`)
/// and `extra` book-level keys (an invoice minimum).
fn book_with(extra: &str, rate: &str) -> PriceBook {
    PriceBook::from_toml_str(
        "periods.toml",
        &format!(
            "schema = \"gpumeter.pricebook/v1\"\nversion = \"periods\"\ncurrency = \"USD\"\n{extra}\n\
             [[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n\
             [[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1K\"\n{rate}\n"
        ),
    )
    .expect("the test's price book")
}

/// Graduated: the first 10K launches at 1.00 per 1K, the rest at 0.80 with a flat fee of 2.00
/// for reaching the second tier.
fn graduated() -> PriceBook {
    book_with(
        "",
        "model = \"graduated\"\ntiers = [ { up_to = \"10\", unit_price = \"1.00\" }, \
         { up_to = \"inf\", unit_price = \"0.80\", flat_fee = \"2.00\" } ]",
    )
}

/// 0.50 per 1K launches with an invoice minimum of 5.00.
fn with_minimum() -> PriceBook {
    book_with("invoice_minimum = \"5.00\"", "unit_price = \"0.50\"")
}

/// A sealed report of `tenant`'s launches in the given hours of December 2026, from one source
/// of its own named `source`.
fn report(tenant: &str, hours: &[(u32, u128)], source: &str) -> UsageReport {
    let mut r = usage(tenant, "2026-12-01T00:00:00Z", 1);
    r.sources[0].name = format!("{source}.json");
    r.sources[0].sha256 = hex_of(source);
    r.usage = hours
        .iter()
        .map(|&(h, q)| UsageRow {
            tenant: tenant.into(),
            device: 0,
            device_key: "GPU-0".into(),
            window_start: format!("2026-12-01T{h:02}:00:00Z"),
            meter: MeterKind::KernelLaunches,
            quantity: Quantity(q),
        })
        .collect();
    r.seal().expect("seal");
    r
}

/// Σ subtotals of every invoice of `reports`, each finalized in turn for December.
fn billed<L: Ledger>(
    bank: &mut L,
    book: &PriceBook,
    reports: &[UsageReport],
) -> Result<Decimal, BankError> {
    let mut sum = Decimal::ZERO;
    for r in reports {
        let f = finalize(bank, r, book, Some(dec()), true)?;
        sum += f
            .document
            .invoices
            .iter()
            .map(|i| i.subtotal)
            .sum::<Decimal>();
    }
    Ok(sum)
}

/// 16K launches in one report bill 10 × 1.00 + 6 × 0.80 + the fee 2.00 = 16.80; the same
/// launches in two reports of 8K each (two nodes) bill the same, not 8.00 + 8.00 (each report
/// restarting the tiers) — and three reports of one month bill one minimum, not three.
fn two_reports_of_one_period_bill_as_one<L: Ledger>(
    one: &mut L,
    two: &mut L,
    three: &mut L,
) -> Result<(), BankError> {
    let b = graduated();
    let whole = billed(one, &b, &[report("acme", &[(0, 16_000)], "node-ab")])?;
    assert_eq!(whole, d("16.80"));
    let split = billed(
        two,
        &b,
        &[
            report("acme", &[(0, 8_000)], "node-a"),
            report("acme", &[(0, 8_000)], "node-b"),
        ],
    )?;
    assert_eq!(split, whole, "one period split over two reports");

    // 1K launches in each of three reports: 1.50 of usage, topped up once to 5.00.
    let m = with_minimum();
    let three_reports: Vec<UsageReport> = (0..3)
        .map(|i| report("acme", &[(i, 1_000)], &format!("day-{i}")))
        .collect();
    assert_eq!(billed(three, &m, &three_reports)?, d("5.00"), "one minimum");
    Ok(())
}

#[test]
fn two_reports_of_one_period_bill_as_one_on_memory() {
    two_reports_of_one_period_bill_as_one(
        &mut MemoryLedger::new(),
        &mut MemoryLedger::new(),
        &mut MemoryLedger::new(),
    )
    .expect("finalizations");
}

fn two_reports_of_one_period_bill_as_one_on(backend: Backend) {
    let (Some(a), Some(b), Some(c)) = (
        Place::new(backend, "period_one"),
        Place::new(backend, "period_two"),
        Place::new(backend, "period_three"),
    ) else {
        return;
    };
    two_reports_of_one_period_bill_as_one(&mut a.open(), &mut b.open(), &mut c.open())
        .expect("finalizations");
}

#[test]
fn two_reports_of_one_period_bill_as_one_on_sqlite() {
    two_reports_of_one_period_bill_as_one_on(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn two_reports_of_one_period_bill_as_one_on_postgres() {
    two_reports_of_one_period_bill_as_one_on(Backend::Postgres);
}
