//! Pricing rules of docs/ARCHITECTURE.md, "Rating in brief", each invoice computed by hand: tiers (graduated, volume,
//! package, flat fees), time-of-use bands in real zones across DST, effective dating, billing
//! increments with carried fragments, rounding; and the conservation and exactness laws as
//! property tests.

use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::{DeviceEntry, MeterKind, Quantity, RecordCounts, UsageReport, UsageRow};
use gpumeter_rating::{
    rate, CarriedFragments, FragmentKey, Invoice, InvoiceDocument, Line, LineKind, PriceBook,
};
use rust_decimal::Decimal;
use std::str::FromStr;

const HOUR: u64 = 3_600_000_000_000;

fn t(s: &str) -> u64 {
    match parse_rfc3339(s) {
        Ok(t) => t,
        Err(e) => panic!("{s}: {e}"),
    }
}

fn dec(s: &str) -> Decimal {
    match Decimal::from_str(s) {
        Ok(d) => d,
        Err(e) => panic!("{s}: {e}"),
    }
}

/// A book in `currency` with one SKU `h100` and the given rate/band tables.
fn book(currency: &str, rounding: &str, tables: &str) -> PriceBook {
    let text = format!(
        "schema = \"gpumeter.pricebook/v1\"\nversion = \"t\"\ncurrency = \"{currency}\"\n\
         rounding = \"{rounding}\"\n[[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n{tables}"
    );
    match PriceBook::from_toml_str("t.toml", &text) {
        Ok(b) => b,
        Err(e) => panic!("book should parse: {e}\n{text}"),
    }
}

/// One launch-priced rate (`kernel_launches`, unit `1`) with extra keys.
fn launches_rate(extra: &str) -> String {
    format!("[[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1\"\n{extra}\n")
}

/// A sealed report of `kernel_launches` rows `(tenant, window start, launches)` on one H100.
fn launches(rows: &[(&str, u64, u128)]) -> UsageReport {
    report(
        rows.iter()
            .map(|&(tenant, ws, q)| (tenant, ws, MeterKind::KernelLaunches, q))
            .collect(),
    )
}

fn report(rows: Vec<(&str, u64, MeterKind, u128)>) -> UsageReport {
    let mut r = UsageReport {
        schema: "gpumeter.usage/v1".to_string(),
        metering_policy: "v1".to_string(),
        window_seconds: 3600,
        complete: Some(true),
        sources: vec![],
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
        usage: rows
            .into_iter()
            .map(|(tenant, ws, meter, q)| UsageRow {
                tenant: tenant.into(),
                device: 0,
                device_key: "GPU-0".into(),
                window_start: rfc3339(ws),
                meter,
                quantity: Quantity(q),
            })
            .collect(),
        totals: vec![],
        open_allocations: vec![],
        extensions: Default::default(),
        warnings: vec![],
        sha256: String::new(),
    };
    if let Err(e) = r.seal() {
        panic!("seal: {e}");
    }
    r
}

fn rated_with(
    u: &UsageReport,
    b: &PriceBook,
    period: Option<(u64, u64)>,
    carried: &CarriedFragments,
) -> InvoiceDocument {
    match rate(u, b, period, carried) {
        Ok(d) => d,
        Err(e) => panic!("rating should succeed: {e}"),
    }
}

fn rated(u: &UsageReport, b: &PriceBook) -> Invoice {
    let doc = rated_with(u, b, None, &CarriedFragments::new());
    assert_eq!(doc.invoices.len(), 1, "{doc:?}");
    let inv = doc.invoices[0].clone();
    let sum = inv.lines.iter().fold(Decimal::ZERO, |a, l| a + l.amount);
    assert_eq!(sum, inv.subtotal, "Σ lines = subtotal");
    assert!(inv.verify_digest());
    inv
}

/// (kind, band, tier, quantity, billable, fragment, unit price, amount) of each line, as text.
fn summary(inv: &Invoice) -> Vec<String> {
    inv.lines.iter().map(line_text).collect()
}

fn line_text(l: &Line) -> String {
    let q = |x: Option<Quantity>| x.map_or("-".to_string(), |q| q.0.to_string());
    format!(
        "{:?} band={} tier={} q={} billable={} frag={} price={} amount={}",
        l.kind,
        l.band.as_deref().unwrap_or("-"),
        l.tier.as_deref().unwrap_or("-"),
        q(l.quantity),
        q(l.billable_quantity),
        q(l.fragment_carried),
        l.unit_price.map_or("-".to_string(), |p| p.to_string()),
        l.amount
    )
}

const DEC1: &str = "2026-12-01T00:00:00Z";

const GRADUATED: &str = "model = \"graduated\"\ntiers = [ { up_to = \"100\", unit_price = \"0.10\" }, { up_to = \"inf\", unit_price = \"0.05\" } ]";

#[test]
fn graduated_tier_edge_inside_one_window_splits_it_into_two_lines() {
    let d = t(DEC1);
    // 60 launches, then 60: the 100th launch is in the second window, which splits 40 | 20.
    let inv = rated(
        &launches(&[("a", d, 60), ("a", d + HOUR, 60)]),
        &book("USD", "half_even", &launches_rate(GRADUATED)),
    );
    assert_eq!(
        summary(&inv),
        [
            "Usage band=- tier=1: 0–100 q=100 billable=100 frag=0 price=0.10 amount=10.00",
            "Usage band=- tier=2: 100–inf q=20 billable=20 frag=0 price=0.05 amount=1.00",
        ]
    );
    assert_eq!(inv.subtotal, dec("11.00"));
}

#[test]
fn a_quantity_exactly_on_a_tier_edge_stays_in_that_tier() {
    let d = t(DEC1);
    let u = launches(&[("a", d, 100)]);
    let g = rated(&u, &book("USD", "half_even", &launches_rate(GRADUATED)));
    assert_eq!(
        summary(&g),
        ["Usage band=- tier=1: 0–100 q=100 billable=100 frag=0 price=0.10 amount=10.00"]
    );
    let volume = GRADUATED.replace("graduated", "volume");
    let v = rated(&u, &book("USD", "half_even", &launches_rate(&volume)));
    assert_eq!(
        summary(&v),
        ["Usage band=- tier=1: 0–100 q=100 billable=100 frag=0 price=0.10 amount=10.00"]
    );
    // One more launch: volume moves every launch to tier 2.
    let v = rated(
        &launches(&[("a", d, 100), ("a", d + HOUR, 1)]),
        &book("USD", "half_even", &launches_rate(&volume)),
    );
    assert_eq!(
        summary(&v),
        ["Usage band=- tier=2: 100–inf q=101 billable=101 frag=0 price=0.05 amount=5.05"]
    );
}

#[test]
fn volume_prices_every_unit_at_the_tier_of_the_period_total() {
    let d = t(DEC1);
    let volume = GRADUATED.replace("graduated", "volume");
    let inv = rated(
        &launches(&[("a", d, 60), ("a", d + HOUR, 60)]),
        &book("USD", "half_even", &launches_rate(&volume)),
    );
    // 120 × 0.05 = 6.00
    assert_eq!(
        summary(&inv),
        ["Usage band=- tier=2: 100–inf q=120 billable=120 frag=0 price=0.05 amount=6.00"]
    );
}

#[test]
fn packages_round_up_whole_and_zero_usage_is_zero_packages() {
    let d = t(DEC1);
    let package = "model = \"package\"\npackage_size = \"50\"\nunit_price = \"2.00\"";
    let b = book("USD", "half_even", &launches_rate(package));
    // 30 + 30 = 60 launches: 2 packages of 50, not one per window rounded up separately.
    let inv = rated(&launches(&[("a", d, 30), ("a", d + HOUR, 30)]), &b);
    assert_eq!(
        summary(&inv),
        ["Usage band=- tier=- q=60 billable=60 frag=0 price=2.00 amount=4.00"]
    );
    assert_eq!(inv.lines[0].extensions.packages, Some(Quantity(2)));
    // 120 launches: ⌈120 / 50⌉ = 3 packages = 6.00.
    let inv = rated(&launches(&[("a", d, 120)]), &b);
    assert_eq!(inv.lines[0].amount, dec("6.00"));
    assert_eq!(inv.lines[0].extensions.packages, Some(Quantity(3)));
    // Exactly 100 launches: 2 packages.
    let inv = rated(&launches(&[("a", d, 100)]), &b);
    assert_eq!(inv.lines[0].extensions.packages, Some(Quantity(2)));
    // Zero launches: zero packages, zero amount.
    let inv = rated(&launches(&[("a", d, 0)]), &b);
    assert_eq!(inv.lines[0].extensions.packages, Some(Quantity(0)));
    assert_eq!(inv.lines[0].amount, dec("0.00"));
}

#[test]
fn tier_flat_fees_are_charged_once_per_tier_reached_or_chosen() {
    let d = t(DEC1);
    let tiers = "tiers = [ { up_to = \"100\", unit_price = \"0.10\", flat_fee = \"1.00\" }, { up_to = \"inf\", unit_price = \"0.05\", flat_fee = \"5.00\" } ]";
    let graduated = book(
        "USD",
        "half_even",
        &launches_rate(&format!("model = \"graduated\"\n{tiers}")),
    );
    // 120 launches over two windows reach both tiers: one fee each, once per period.
    let inv = rated(&launches(&[("a", d, 60), ("a", d + HOUR, 60)]), &graduated);
    assert_eq!(
        summary(&inv),
        [
            "Usage band=- tier=1: 0–100 q=100 billable=100 frag=0 price=0.10 amount=10.00",
            "Usage band=- tier=2: 100–inf q=20 billable=20 frag=0 price=0.05 amount=1.00",
            "FlatFee band=- tier=1: 0–100 q=- billable=- frag=- price=1.00 amount=1.00",
            "FlatFee band=- tier=2: 100–inf q=- billable=- frag=- price=5.00 amount=5.00",
        ]
    );
    assert_eq!(inv.subtotal, dec("17.00"));
    // 80 launches reach tier 1 only.
    let inv = rated(&launches(&[("a", d, 80)]), &graduated);
    assert_eq!(inv.lines.len(), 2);
    assert_eq!(inv.lines[1].kind, LineKind::FlatFee);
    assert_eq!(inv.subtotal, dec("9.00"));
    // Volume: the one tier chosen.
    let volume = book(
        "USD",
        "half_even",
        &launches_rate(&format!("model = \"volume\"\n{tiers}")),
    );
    let inv = rated(&launches(&[("a", d, 120)]), &volume);
    assert_eq!(
        summary(&inv),
        [
            "Usage band=- tier=2: 100–inf q=120 billable=120 frag=0 price=0.05 amount=6.00",
            "FlatFee band=- tier=2: 100–inf q=- billable=- frag=- price=5.00 amount=5.00",
        ]
    );
}

/// One launch in each hourly window of `[from, to)`.
fn hourly(from: u64, to: u64) -> UsageReport {
    let mut rows = Vec::new();
    let mut ws = from;
    while ws < to {
        rows.push(("a", ws, 1u128));
        ws += HOUR;
    }
    launches(&rows)
}

fn band_quantity(inv: &Invoice, band: Option<&str>) -> u128 {
    inv.lines
        .iter()
        .filter(|l| l.band.as_deref() == band)
        .map(|l| l.quantity.map_or(0, |q| q.0))
        .sum()
}

const NIGHT_NY: &str = "[[band]]\nname = \"night\"\ntz = \"America/New_York\"\nhours = \"00:00-07:00\"\nmultiplier = \"0.5\"\n";

#[test]
fn a_band_in_new_york_follows_the_march_dst_change() {
    let b = book(
        "USD",
        "half_even",
        &format!("{}{NIGHT_NY}", launches_rate("unit_price = \"1.00\"")),
    );
    // Local 2027-03-13 00:00 EST (05:00Z) to 2027-03-16 00:00 EDT (04:00Z): 71 hours, since
    // 2027-03-14 02:00 EST jumps to 03:00 EDT. Night hours: 7 (05Z–12Z), 6 (05Z–11Z on the
    // DST day: its 02:00–03:00 does not exist), 7 (04Z–11Z).
    let inv = rated(
        &hourly(t("2027-03-13T05:00:00Z"), t("2027-03-16T04:00:00Z")),
        &b,
    );
    assert_eq!(band_quantity(&inv, Some("night")), 7 + 6 + 7);
    assert_eq!(band_quantity(&inv, None), 71 - 20);
    assert_eq!(
        summary(&inv),
        [
            "Usage band=- tier=- q=51 billable=51 frag=0 price=1.00 amount=51.00",
            "Usage band=night tier=- q=20 billable=20 frag=0 price=0.50 amount=10.00",
        ]
    );
}

#[test]
fn a_band_in_new_york_follows_the_november_dst_change() {
    let b = book(
        "USD",
        "half_even",
        &format!("{}{NIGHT_NY}", launches_rate("unit_price = \"1.00\"")),
    );
    // Local 2027-11-06 00:00 EDT (04:00Z) to 2027-11-09 00:00 EST (05:00Z): 73 hours, since
    // 2027-11-07 02:00 EDT falls back to 01:00 EST. Night hours: 7 (04Z–11Z), 8 (04Z–12Z on
    // the DST day: 01:00–02:00 happens twice), 7 (05Z–12Z).
    let inv = rated(
        &hourly(t("2027-11-06T04:00:00Z"), t("2027-11-09T05:00:00Z")),
        &b,
    );
    assert_eq!(band_quantity(&inv, Some("night")), 7 + 8 + 7);
    assert_eq!(band_quantity(&inv, None), 73 - 22);
}

#[test]
fn a_band_wrapping_midnight_takes_its_day_from_the_window_start() {
    let band = "[[band]]\nname = \"late\"\ntz = \"UTC\"\ndays = [\"sat\"]\nhours = \"22:00-06:00\"\nmultiplier = \"0\"\n";
    let b = book(
        "USD",
        "half_even",
        &format!("{}{band}", launches_rate("unit_price = \"1.00\"")),
    );
    // Friday 2026-12-04 and Saturday 2026-12-05, UTC: Saturday's 00–06 and 22–24 are in the
    // band (8 windows); Friday's 22–24 are not (their local date is a Friday).
    let inv = rated(
        &hourly(t("2026-12-04T00:00:00Z"), t("2026-12-06T00:00:00Z")),
        &b,
    );
    assert_eq!(band_quantity(&inv, Some("late")), 8);
    assert_eq!(band_quantity(&inv, None), 40);
    assert_eq!(inv.subtotal, dec("40.00"));
}

#[test]
fn a_band_edge_inside_a_window_is_refused_naming_band_and_instant() {
    // India is UTC+05:30: a band from local midnight begins at hh:30Z, inside hourly windows.
    let band = "[[band]]\nname = \"ist-night\"\ntz = \"Asia/Kolkata\"\nhours = \"00:00-06:00\"\nmultiplier = \"0.5\"\n";
    let b = book(
        "USD",
        "half_even",
        &format!("{}{band}", launches_rate("unit_price = \"1.00\"")),
    );
    let u = hourly(t("2026-12-01T18:00:00Z"), t("2026-12-01T20:00:00Z"));
    let err = match rate(&u, &b, None, &CarriedFragments::new()) {
        Ok(d) => panic!("should be refused: {d:?}"),
        Err(e) => e.to_string(),
    };
    // The book's line and column of the band's `hours`, as `prices check` gives them.
    assert!(err.starts_with("t.toml:16:1: band[0].hours"), "{err}");
    assert!(err.contains("2026-12-01T18:30:00Z"), "{err}");
    assert!(err.contains("Asia/Kolkata"), "{err}");
}

#[test]
fn a_price_change_mid_period_gives_one_line_per_validity_span() {
    let tables = format!(
        "{}{}",
        launches_rate(&format!("unit_price = \"1.00\"\nvalid_to = \"{DEC1}\"")),
        launches_rate(&format!("unit_price = \"2.00\"\nvalid_from = \"{DEC1}\""))
    );
    let b = book("USD", "half_even", &tables);
    let d = t(DEC1);
    let inv = rated(&launches(&[("a", d - HOUR, 10), ("a", d, 10)]), &b);
    assert_eq!(
        summary(&inv),
        [
            "Usage band=- tier=- q=10 billable=10 frag=0 price=1.00 amount=10.00",
            "Usage band=- tier=- q=10 billable=10 frag=0 price=2.00 amount=20.00",
        ]
    );
}

const OFF_PEAK_UTC: &str =
    "[[band]]\nname = \"off-peak\"\ntz = \"UTC\"\nhours = \"01:00-02:00\"\nmultiplier = \"0.5\"\n";

#[test]
fn an_increment_carries_the_tail_of_the_period_as_its_fragment() {
    let b = book(
        "USD",
        "half_even",
        &format!(
            "{}{OFF_PEAK_UTC}",
            launches_rate("unit_price = \"1.00\"\nincrement = \"10\"")
        ),
    );
    let d = t(DEC1);
    // 100 at 00:00 (peak), 23 at 01:00 (off-peak): 123 = 12 increments + 3; the 3 are the
    // last window's tail, so they leave the off-peak line.
    let doc = rated_with(
        &launches(&[("a", d, 100), ("a", d + HOUR, 23)]),
        &b,
        None,
        &CarriedFragments::new(),
    );
    let inv = &doc.invoices[0];
    assert_eq!(
        summary(inv),
        [
            "Usage band=- tier=- q=100 billable=100 frag=0 price=1.00 amount=100.00",
            "Usage band=off-peak tier=- q=23 billable=20 frag=3 price=0.50 amount=10.00",
        ]
    );
    let key = FragmentKey {
        tenant: "a".into(),
        sku: "h100".into(),
        meter: MeterKind::KernelLaunches,
    };
    assert_eq!(doc.fragments_out().get(&key), Some(&3));

    // Carried in: 8 from the last period, priced as usage of the first window (peak):
    // 8 + 123 = 131 = 13 increments + 1.
    let carried: CarriedFragments = [(key.clone(), 8u128)].into_iter().collect();
    let doc = rated_with(
        &launches(&[("a", d, 100), ("a", d + HOUR, 23)]),
        &b,
        None,
        &carried,
    );
    let inv = &doc.invoices[0];
    assert_eq!(
        summary(inv),
        [
            "Usage band=- tier=- q=108 billable=108 frag=0 price=1.00 amount=108.00",
            "Usage band=off-peak tier=- q=23 billable=22 frag=1 price=0.50 amount=11.00",
        ]
    );
    assert_eq!(inv.extensions.fragments_in.len(), 1);
    assert_eq!(inv.extensions.fragments_in[0].quantity, Quantity(8));
    assert_eq!(doc.fragments_out().get(&key), Some(&1));
}

#[test]
fn an_increment_in_a_time_unit_is_whole_nanoseconds() {
    // gpu_busy_ns in hours with an increment of 0.001 hour = 3.6 s.
    let b = book(
        "USD",
        "half_even",
        "[[rate]]\nsku = \"h100\"\nmeter = \"gpu_busy_ns\"\nunit = \"hour\"\nunit_price = \"3.60\"\nincrement = \"0.001\"\n",
    );
    let d = t(DEC1);
    // 10 s busy: 2 increments (7.2 s) billed, 2.8 s carried.
    let inv = rated(
        &report(vec![("a", d, MeterKind::GpuBusyNs, 10_000_000_000)]),
        &b,
    );
    assert_eq!(
        summary(&inv),
        ["Usage band=- tier=- q=10000000000 billable=7200000000 frag=2800000000 price=3.60 amount=0.01"]
    );
    assert_eq!(
        inv.lines[0].quantity_in_pricing_unit.as_deref(),
        Some("0.002000000")
    );
}

#[test]
fn every_rounding_mode_on_half_minor_unit_cases_with_a_band_multiplier() {
    let d = t(DEC1);
    // One launch at 0.01 × 0.5 = 0.005 USD (half a cent), three at 0.015 (one and a half).
    let cases = [
        (
            "USD",
            "0.01",
            [
                ("half_even", "0.00", "0.02"),
                ("half_up", "0.01", "0.02"),
                ("up", "0.01", "0.02"),
                ("down", "0.00", "0.01"),
            ],
        ),
        (
            "JPY",
            "1",
            [
                ("half_even", "0", "2"),
                ("half_up", "1", "2"),
                ("up", "1", "2"),
                ("down", "0", "1"),
            ],
        ),
        (
            "KWD",
            "0.001",
            [
                ("half_even", "0.000", "0.002"),
                ("half_up", "0.001", "0.002"),
                ("up", "0.001", "0.002"),
                ("down", "0.000", "0.001"),
            ],
        ),
    ];
    let band =
        "[[band]]\nname = \"half\"\ntz = \"UTC\"\nhours = \"00:00-24:00\"\nmultiplier = \"0.5\"\n";
    for (currency, price, modes) in cases {
        for (mode, one, three) in modes {
            let b = book(
                currency,
                mode,
                &format!(
                    "{}{band}",
                    launches_rate(&format!("unit_price = \"{price}\""))
                ),
            );
            for (n, want) in [(1u128, one), (3, three)] {
                let inv = rated(&launches(&[("a", d, n)]), &b);
                assert_eq!(
                    inv.lines[0].amount.to_string(),
                    want,
                    "{currency} {mode} {n} × {price} × 0.5"
                );
            }
        }
    }
}

#[test]
fn graduated_tiers_accumulate_across_a_price_change() {
    // The tier position is the period's, not the rate's: 80 launches in November's rate,
    // then 40 in December's, whose tier 1 ends at 100 too.
    let tiers = |p1: &str, p2: &str| {
        format!("model = \"graduated\"\ntiers = [ {{ up_to = \"100\", unit_price = \"{p1}\" }}, {{ up_to = \"inf\", unit_price = \"{p2}\" }} ]")
    };
    let tables = format!(
        "{}{}",
        launches_rate(&format!("{}\nvalid_to = \"{DEC1}\"", tiers("0.10", "0.05"))),
        launches_rate(&format!(
            "{}\nvalid_from = \"{DEC1}\"",
            tiers("0.20", "0.10")
        ))
    );
    let b = book("USD", "half_even", &tables);
    let d = t(DEC1);
    let inv = rated(&launches(&[("a", d - HOUR, 80), ("a", d, 40)]), &b);
    assert_eq!(
        summary(&inv),
        [
            "Usage band=- tier=1: 0–100 q=80 billable=80 frag=0 price=0.10 amount=8.00",
            "Usage band=- tier=1: 0–100 q=20 billable=20 frag=0 price=0.20 amount=4.00",
            "Usage band=- tier=2: 100–inf q=20 billable=20 frag=0 price=0.10 amount=2.00",
        ]
    );
}

mod properties {
    use super::*;
    use num_bigint::BigInt;
    use num_rational::BigRational;
    use num_traits::Signed;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// A book with SKU h100, a graduated, volume, package or per-unit launches rate with an
    /// increment, a second per-unit rate on `gpu_busy_ns` from Dec 2, and an off-peak band.
    fn any_book(model: usize, increment: u32, rounding: usize) -> PriceBook {
        let model = match model {
            0 => GRADUATED.replace("0.10", "0.013").replace("0.05", "0.0071"),
            1 => GRADUATED
                .replace("graduated", "volume")
                .replace("0.10", "0.017"),
            2 => "model = \"package\"\npackage_size = \"7\"\nunit_price = \"0.33\"".to_string(),
            _ => "unit_price = \"0.0123\"".to_string(),
        };
        let rounding = ["half_even", "half_up", "up", "down"][rounding % 4];
        book(
            "USD",
            rounding,
            &format!(
                "{}[[rate]]\nsku = \"h100\"\nmeter = \"gpu_busy_ns\"\nunit = \"hour\"\nunit_price = \"0.37\"\nincrement = \"0.001\"\nvalid_from = \"2026-12-02T00:00:00Z\"\n\
                 [[band]]\nname = \"off-peak\"\ntz = \"Europe/Berlin\"\nhours = \"22:00-06:00\"\nmultiplier = \"0.65\"\n",
                launches_rate(&format!("{model}\nincrement = \"{increment}\""))
            ),
        )
    }

    fn rows_strategy() -> impl Strategy<Value = Vec<(usize, u64, usize, u128)>> {
        // (tenant, hour from Dec 1, meter, quantity)
        proptest::collection::vec((0usize..3, 0u64..72, 0usize..2, 0u128..5_000), 0..30)
    }

    fn to_report(rows: &[(usize, u64, usize, u128)]) -> UsageReport {
        let d = t(DEC1);
        let tenants = ["alice", "bob", "carol"];
        report(
            rows.iter()
                .map(|&(tn, h, m, q)| {
                    let meter = if m == 0 {
                        MeterKind::KernelLaunches
                    } else {
                        MeterKind::GpuBusyNs
                    };
                    let q = if m == 0 { q } else { q * 1_000_000_007 };
                    (tenants[tn], d + h * HOUR, meter, q)
                })
                .collect(),
        )
    }

    /// Metered quantity per (tenant, meter) in windows with a rate in force.
    fn metered(u: &UsageReport) -> BTreeMap<(String, MeterKind), u128> {
        let mut m = BTreeMap::new();
        let dec2 = t("2026-12-02T00:00:00Z");
        for r in &u.usage {
            let ws = t(&r.window_start);
            if r.meter == MeterKind::GpuBusyNs && ws < dec2 {
                continue; // no busy rate before Dec 2: unpriced
            }
            *m.entry((r.tenant.clone(), r.meter)).or_insert(0) += r.quantity.0;
        }
        m
    }

    fn billed(doc: &InvoiceDocument) -> BTreeMap<(String, MeterKind), u128> {
        let mut m = BTreeMap::new();
        for inv in &doc.invoices {
            for l in &inv.lines {
                if let (LineKind::Usage, Some(meter), Some(b)) =
                    (l.kind, l.meter, l.billable_quantity)
                {
                    *m.entry((inv.tenant.clone(), meter)).or_insert(0) += b.0;
                }
            }
        }
        m
    }

    fn ratio(d: Decimal) -> BigRational {
        BigRational::new(
            BigInt::from(d.mantissa()),
            num_traits::pow(BigInt::from(10), d.scale() as usize),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        #[test]
        fn lines_sum_to_subtotal_and_row_order_does_not_matter(
            rows in rows_strategy(), model in 0usize..4, inc in 1u32..13, rounding in 0usize..4,
            seed in any::<u64>(),
        ) {
            let b = any_book(model, inc, rounding);
            let u = to_report(&rows);
            let doc = rated_with(&u, &b, None, &CarriedFragments::new());
            for inv in &doc.invoices {
                let sum = inv.lines.iter().fold(Decimal::ZERO, |a, l| a + l.amount);
                prop_assert_eq!(sum, inv.subtotal);
            }
            // Shuffle the rows (a deterministic permutation from the seed).
            let mut shuffled = rows.clone();
            let n = shuffled.len();
            if n > 1 {
                let mut s = seed;
                for i in (1..n).rev() {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    shuffled.swap(i, (s >> 33) as usize % (i + 1));
                }
            }
            let mut u2 = to_report(&shuffled);
            // Same rows in another order: the invoices cite the report by its digest, so
            // compare them with the first report's digest.
            u2.sha256.clone_from(&u.sha256);
            let doc2 = rated_with(&u2, &b, None, &CarriedFragments::new());
            let a = serde_json::to_string(&doc).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let c = serde_json::to_string(&doc2).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(a, c);
        }

        #[test]
        fn billable_plus_fragment_out_is_metered_plus_fragment_in(
            rows in rows_strategy(), model in 0usize..4, inc in 1u32..13,
            carried in proptest::collection::vec((0usize..3, 0usize..2, 0u128..20), 0..4),
        ) {
            let b = any_book(model, inc, 0);
            let u = to_report(&rows);
            let tenants = ["alice", "bob", "carol"];
            let mut fin = CarriedFragments::new();
            for (tn, m, q) in carried {
                let meter = if m == 0 { MeterKind::KernelLaunches } else { MeterKind::GpuBusyNs };
                fin.insert(FragmentKey { tenant: tenants[tn].into(), sku: "h100".into(), meter }, q);
            }
            // A period covering every row, so fragments have a first window.
            let period = (t(DEC1), t(DEC1) + 72 * HOUR);
            let doc = rated_with(&u, &b, Some(period), &fin);
            let out = doc.fragments_out();
            let billed = billed(&doc);
            let mut keys: std::collections::BTreeSet<(String, MeterKind)> = metered(&u).into_keys().collect();
            keys.extend(fin.keys().map(|k| (k.tenant.clone(), k.meter)));
            for key in keys {
                let fk = FragmentKey { tenant: key.0.clone(), sku: "h100".into(), meter: key.1 };
                let lhs = billed.get(&key).copied().unwrap_or(0) + out.get(&fk).copied().unwrap_or(0);
                let rhs = metered(&u).get(&key).copied().unwrap_or(0) + fin.get(&fk).copied().unwrap_or(0);
                prop_assert_eq!(lhs, rhs, "{:?}", key);
            }
            // Lines: quantity = billable + fragment_carried.
            for inv in &doc.invoices {
                for l in inv.lines.iter().filter(|l| l.kind == LineKind::Usage) {
                    let q = l.quantity.map_or(0, |q| q.0);
                    let bq = l.billable_quantity.map_or(0, |q| q.0);
                    let f = l.fragment_carried.map_or(0, |q| q.0);
                    prop_assert_eq!(q, bq + f);
                }
            }
        }

        #[test]
        fn each_amount_is_within_half_a_minor_unit_of_the_exact_amount(
            rows in rows_strategy(), model in 0usize..4, inc in 1u32..13, rounding in 0usize..2,
        ) {
            let b = any_book(model, inc, rounding);
            let doc = rated_with(&to_report(&rows), &b, None, &CarriedFragments::new());
            let half_cent = BigRational::new(BigInt::from(1), BigInt::from(200));
            for inv in &doc.invoices {
                for l in inv.lines.iter().filter(|l| l.kind == LineKind::Usage) {
                    let (Some(price), Some(bq), Some(unit)) = (l.unit_price, l.billable_quantity, l.pricing_unit.as_deref()) else {
                        continue;
                    };
                    let exact = match l.extensions.packages {
                        Some(p) => ratio(price) * BigRational::from_integer(BigInt::from(p.0)),
                        None => {
                            let u = gpumeter_rating::PricingUnit::parse(unit).ok_or_else(|| TestCaseError::fail("unit"))?;
                            ratio(price) * BigRational::new(
                                BigInt::from(bq.0) * BigInt::from(u.factor_den()),
                                BigInt::from(u.factor_num()),
                            )
                        }
                    };
                    let diff = (ratio(l.amount) - exact.clone()).abs();
                    prop_assert!(diff <= half_cent, "{} vs {}", l.amount, exact);
                }
            }
        }

        #[test]
        fn rating_a_period_in_two_halves_with_the_fragment_carried_bills_the_same(
            rows in rows_strategy(), model in 0usize..4, inc in 1u32..13, split in 1u64..72,
        ) {
            let b = any_book(model, inc, 0);
            let u = to_report(&rows);
            let (from, to) = (t(DEC1), t(DEC1) + 72 * HOUR);
            let mid = from + split * HOUR;
            let whole = rated_with(&u, &b, Some((from, to)), &CarriedFragments::new());
            let first = rated_with(&u, &b, Some((from, mid)), &CarriedFragments::new());
            let second = rated_with(&u, &b, Some((mid, to)), &first.fragments_out());
            let mut halves = billed(&first);
            for (k, v) in billed(&second) {
                *halves.entry(k).or_insert(0) += v;
            }
            prop_assert_eq!(halves, billed(&whole));
            prop_assert_eq!(second.fragments_out(), whole.fragments_out());
        }
    }
}

#[test]
fn a_validity_edge_inside_a_window_is_refused_with_its_line_and_column() {
    let b = book(
        "USD",
        "half_even",
        &launches_rate("unit_price = \"1.00\"\nvalid_from = \"2026-12-01T00:30:00Z\""),
    );
    let u = launches(&[("a", t(DEC1), 1)]);
    let err = match rate(&u, &b, None, &CarriedFragments::new()) {
        Ok(d) => panic!("should be refused: {d:?}"),
        Err(e) => e.to_string(),
    };
    // [[rate]] is line 8; its valid_from is line 13.
    assert!(
        err.starts_with("t.toml:13:1: rate[0].valid_from = 2026-12-01T00:30:00Z"),
        "{err}"
    );
}

#[test]
fn carried_in_fragments_without_usage_need_a_period_and_are_carried_on_in_it() {
    let b = book(
        "USD",
        "half_even",
        &launches_rate("unit_price = \"1.00\"\nincrement = \"10\""),
    );
    let key = FragmentKey {
        tenant: "a".into(),
        sku: "h100".into(),
        meter: MeterKind::KernelLaunches,
    };
    let carried: CarriedFragments = [(key.clone(), 7u128)].into_iter().collect();
    let empty = launches(&[]);
    // No usage and no period: nothing to derive a period from, and 7 launches must not vanish.
    let err = match rate(&empty, &b, None, &carried) {
        Ok(d) => panic!("should be refused: {d:?}"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("give the period"), "{err}");
    // With a period: the fragment stays below one increment and is carried on whole.
    let d = t(DEC1);
    let doc = rated_with(&empty, &b, Some((d, d + HOUR)), &carried);
    assert_eq!(doc.fragments_out().get(&key), Some(&7));
    assert_eq!(doc.invoices[0].subtotal, dec("0.00"));
    // No rate of the SKU in force in the period: carried on whole, with a coded warning.
    let later = book(
        "USD",
        "half_even",
        &launches_rate(
            "unit_price = \"1.00\"\nincrement = \"10\"\nvalid_from = \"2027-01-01T00:00:00Z\"",
        ),
    );
    let doc = rated_with(&empty, &later, Some((d, d + HOUR)), &carried);
    assert_eq!(doc.fragments_out().get(&key), Some(&7));
    assert!(
        doc.invoices[0].warnings.iter().any(|w| *w.code()
            == gpumeter_core::WarningCode::FragmentNotRated
            && w.contains("carried on whole")),
        "{:?}",
        doc.invoices[0].warnings
    );
}

#[test]
fn volume_charges_one_flat_fee_for_the_period_across_a_price_change() {
    let tiers = |p1: &str, f1: &str, p2: &str, f2: &str| {
        format!("model = \"volume\"\ntiers = [ {{ up_to = \"1\", unit_price = \"{p1}\", flat_fee = \"{f1}\" }}, {{ up_to = \"inf\", unit_price = \"{p2}\", flat_fee = \"{f2}\" }} ]")
    };
    let tables = format!(
        "{}{}",
        launches_rate(&format!(
            "{}\nvalid_to = \"{DEC1}\"",
            tiers("1.00", "10.00", "0.50", "20.00")
        )),
        launches_rate(&format!(
            "{}\nvalid_from = \"{DEC1}\"",
            tiers("2.00", "30.00", "0.10", "40.00")
        ))
    );
    let b = book("USD", "half_even", &tables);
    let d = t(DEC1);
    // 5 launches: tier 2 of each rate prices its units; one fee, that of the tier chosen where
    // the period's billable usage begins (November's rate: 20.00).
    let inv = rated(&launches(&[("a", d - HOUR, 2), ("a", d, 3)]), &b);
    let fees: Vec<String> = inv
        .lines
        .iter()
        .filter(|l| l.kind == LineKind::FlatFee)
        .map(line_text)
        .collect();
    assert_eq!(
        fees,
        ["FlatFee band=- tier=2: 1–inf q=- billable=- frag=- price=20.00 amount=20.00"]
    );
    // 2 × 0.50 + 3 × 0.10 + 20.00
    assert_eq!(inv.subtotal, dec("21.30"));
}

#[test]
fn package_rates_of_one_sku_and_meter_must_cut_the_same_packages() {
    let tables = format!(
        "{}{}",
        launches_rate(&format!(
            "model = \"package\"\npackage_size = \"1\"\nunit_price = \"1.00\"\nvalid_to = \"{DEC1}\""
        )),
        launches_rate(&format!(
            "model = \"package\"\npackage_size = \"10\"\nunit_price = \"5.00\"\nvalid_from = \"{DEC1}\""
        ))
    );
    let text = format!(
        "schema = \"gpumeter.pricebook/v1\"\nversion = \"t\"\ncurrency = \"USD\"\n[[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n{tables}"
    );
    let err = match PriceBook::from_toml_str("t.toml", &text) {
        Ok(_) => panic!("two package sizes for one SKU and meter must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("rate[1].package_size"), "{err}");
    assert!(err.contains("same size"), "{err}");
}

#[test]
fn empty_band_lists_are_refused_rather_than_read_as_every_one() {
    for key in ["days", "meters", "skus"] {
        let text = format!(
            "schema = \"gpumeter.pricebook/v1\"\nversion = \"t\"\ncurrency = \"USD\"\n[[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n{}\
             [[band]]\nname = \"b\"\ntz = \"UTC\"\nhours = \"00:00-06:00\"\nmultiplier = \"0.5\"\n{key} = []\n",
            launches_rate("unit_price = \"1\"")
        );
        let err = match PriceBook::from_toml_str("t.toml", &text) {
            Ok(_) => panic!("`{key} = []` must be refused"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(&format!("band[0].{key}")), "{err}");
    }
}

#[test]
fn package_lines_show_their_packages_in_every_rendering() {
    let d = t(DEC1);
    let package = "model = \"package\"\npackage_size = \"50\"\nunit_price = \"2.00\"";
    let b = book("USD", "half_even", &launches_rate(package));
    let doc = rated_with(
        &launches(&[("a", d, 60)]),
        &b,
        None,
        &CarriedFragments::new(),
    );
    // 60 launches = 2 packages of 50 at 2.00 = 4.00: the reader sees the 2.
    assert!(
        doc.to_text_table().contains("60.000000000 1 = 2 packages"),
        "{}",
        doc.to_text_table()
    );
    let csv = match gpumeter_rating::render::invoice_csv(&doc) {
        Ok(c) => c,
        Err(e) => panic!("csv: {e}"),
    };
    let mut rows = csv::Reader::from_reader(csv.as_bytes());
    let header = match rows.headers() {
        Ok(h) => h.clone(),
        Err(e) => panic!("header: {e}"),
    };
    let col = header.iter().position(|h| h == "packages");
    let row = match rows.records().next() {
        Some(Ok(r)) => r,
        other => panic!("one row: {other:?}"),
    };
    assert_eq!(col.and_then(|c| row.get(c)), Some("2"));
    let html = gpumeter_rating::render::invoice_html(&doc, &launches(&[("a", d, 60)]));
    assert!(html.contains("= 2 packages"));
}

/// Issue 30 item 4: packages are counted per package span, across every pair of models.
mod price_changes {
    use super::*;

    const MODELS: [&str; 4] = ["per_unit", "graduated", "volume", "package"];

    /// A launches rate of `model` whose prices scale with `p` (the unit price per launch in
    /// tier 1): per_unit at `p`; graduated and volume with tiers `(0, 90]` at `p` and above at
    /// `p ÷ 2`; package of 50 launches at `50 × p ÷ 5` (a package costs 10 launches' price).
    fn rate_of(model: &str, p: &str, validity: &str) -> String {
        let half = (dec(p) / dec("2")).normalize().to_string();
        let package = (dec(p) * dec("10")).normalize().to_string();
        let body = match model {
            "per_unit" => format!("unit_price = \"{p}\""),
            "graduated" | "volume" => format!(
                "model = \"{model}\"\ntiers = [ {{ up_to = \"90\", unit_price = \"{p}\" }}, {{ up_to = \"inf\", unit_price = \"{half}\" }} ]"
            ),
            _ => format!("model = \"package\"\npackage_size = \"50\"\nunit_price = \"{package}\""),
        };
        launches_rate(&format!("{body}\n{validity}"))
    }

    /// What each model bills for 80 launches before Dec 1 (rate A, p = 0.10) and 15 from Dec 1
    /// (rate B, p = 0.20), worked by hand: (A's amount, B's amount, A's packages, B's packages).
    fn expected(a: &str, b: &str) -> (&'static str, &'static str, Option<u128>, Option<u128>) {
        let a_amount = match a {
            // 80 × 0.10; graduated: all 80 in tier 1 (≤ 90).
            "per_unit" | "graduated" => "8.00",
            // Volume: the period's 95 is in tier 2, so 80 × 0.05.
            "volume" => "4.00",
            // ⌈80 / 50⌉ = 2 packages × 1.00.
            _ => "2.00",
        };
        let b_amount = match (a, b) {
            (_, "per_unit") => "3.00", // 15 × 0.20
            // The tier position is the period's: 80 → 90 at 0.20, 90 → 95 at 0.10.
            (_, "graduated") => "2.50",
            (_, "volume") => "1.50", // 95 is in tier 2: 15 × 0.10
            // Package after package: one span, so B's 15 fill the package A began (81–100):
            // ⌈95 / 50⌉ − ⌈80 / 50⌉ = 0 packages.
            ("package", _) => "0.00",
            // Package after another model: a span of its own, ⌈15 / 50⌉ = 1 package × 2.00
            // (counted from the period's start it was ⌈95 / 50⌉ − ⌈80 / 50⌉ = 0).
            _ => "2.00",
        };
        let a_packages = (a == "package").then_some(2);
        let b_packages = (b == "package").then_some(if a == "package" { 0 } else { 1 });
        (a_amount, b_amount, a_packages, b_packages)
    }

    /// (Σ amount, Σ packages) of the usage lines up to the first `n` units (rate A's lines:
    /// lines are in validity order), and of the rest.
    fn split_at(inv: &Invoice, n: u128) -> ((Decimal, Option<u128>), (Decimal, Option<u128>)) {
        let mut seen = 0u128;
        let (mut a, mut b) = ((Decimal::ZERO, None), (Decimal::ZERO, None));
        for l in inv.lines.iter().filter(|l| l.kind == LineKind::Usage) {
            let side = if seen < n { &mut a } else { &mut b };
            seen += l.quantity.map_or(0, |q| q.0);
            side.0 += l.amount;
            if let Some(p) = l.extensions.packages {
                side.1 = Some(side.1.unwrap_or(0) + p.0);
            }
        }
        (a, b)
    }

    #[test]
    fn every_pair_of_models_across_a_price_change_bills_each_span_its_packages() {
        let d = t(DEC1);
        for a in MODELS {
            for b in MODELS {
                let tables = format!(
                    "{}{}",
                    rate_of(a, "0.10", &format!("valid_to = \"{DEC1}\"")),
                    rate_of(b, "0.20", &format!("valid_from = \"{DEC1}\""))
                );
                let book = book("USD", "half_even", &tables);
                let inv = rated(&launches(&[("t", d - HOUR, 80), ("t", d, 15)]), &book);
                let (a_amount, b_amount, a_packages, b_packages) = expected(a, b);
                let (got_a, got_b) = split_at(&inv, 80);
                assert_eq!(
                    (got_a.0.to_string(), got_b.0.to_string()),
                    (a_amount.to_string(), b_amount.to_string()),
                    "{a} → {b}: {:#?}",
                    summary(&inv)
                );
                assert_eq!((got_a.1, got_b.1), (a_packages, b_packages), "{a} → {b}");
                assert_eq!(inv.subtotal, dec(a_amount) + dec(b_amount), "{a} → {b}");
                // Quantities conserve: every launch is on a line, billed.
                let billed: u128 = inv
                    .lines
                    .iter()
                    .filter_map(|l| l.billable_quantity)
                    .map(|q| q.0)
                    .sum();
                assert_eq!(billed, 95, "{a} → {b}");
            }
        }
    }
}

/// Issue 30 item 4: package spans with an increment's tail, a carried-in fragment, and a
/// package rate that returns after another model.
mod package_spans {
    use super::*;

    /// Package (50 at 1.00) until Dec 1, per unit (0.10) on Dec 1, package (50 at 2.00)
    /// from Dec 2: two package spans, each paying its own packages.
    #[test]
    fn a_package_rate_after_another_model_starts_a_span_of_its_own() {
        let d = t(DEC1);
        let dec2 = d + 24 * HOUR;
        let tables = format!(
            "{}{}{}",
            launches_rate(&format!(
                "model = \"package\"\npackage_size = \"50\"\nunit_price = \"1.00\"\nvalid_to = \"{DEC1}\""
            )),
            launches_rate(&format!(
                "unit_price = \"0.10\"\nvalid_from = \"{DEC1}\"\nvalid_to = \"{}\"",
                rfc3339(dec2)
            )),
            launches_rate(&format!(
                "model = \"package\"\npackage_size = \"50\"\nunit_price = \"2.00\"\nvalid_from = \"{}\"",
                rfc3339(dec2)
            )),
        );
        let b = book("USD", "half_even", &tables);
        // 30 under the first package rate (1 package), 45 per unit, 10 under the second
        // package rate: a span of its own, 1 package (counted from the period's start it was
        // ⌈85 / 50⌉ − ⌈75 / 50⌉ = 0).
        let inv = rated(
            &launches(&[("a", d - HOUR, 30), ("a", d, 45), ("a", dec2, 10)]),
            &b,
        );
        assert_eq!(
            summary(&inv),
            [
                "Usage band=- tier=- q=30 billable=30 frag=0 price=1.00 amount=1.00",
                "Usage band=- tier=- q=45 billable=45 frag=0 price=0.10 amount=4.50",
                "Usage band=- tier=- q=10 billable=10 frag=0 price=2.00 amount=2.00",
            ]
        );
        let packages: Vec<Option<Quantity>> =
            inv.lines.iter().map(|l| l.extensions.packages).collect();
        assert_eq!(packages, [Some(Quantity(1)), None, Some(Quantity(1))]);
    }

    /// An increment of 10 with a package of 50: the tail of the period's last span is not
    /// billed (carried), and the carried-in fragment is the first usage of the next period's
    /// span, under the rate in force at the period's start.
    #[test]
    fn the_increments_tail_leaves_the_last_span_and_a_carried_in_fragment_opens_the_first() {
        let d = t(DEC1);
        let tables = format!(
            "{}{}",
            launches_rate(&format!(
                "unit_price = \"0.10\"\nincrement = \"10\"\nvalid_to = \"{DEC1}\""
            )),
            launches_rate(&format!(
                "model = \"package\"\npackage_size = \"50\"\nunit_price = \"2.00\"\nincrement = \"10\"\nvalid_from = \"{DEC1}\""
            )),
        );
        let b = book("USD", "half_even", &tables);
        // 23 per unit, then 55 in packages: 78 = 7 increments + 8. The 8 come off the package
        // span's end: it bills 47 units, ⌈47 / 50⌉ = 1 package.
        let doc = rated_with(
            &launches(&[("a", d - HOUR, 23), ("a", d, 55)]),
            &b,
            None,
            &CarriedFragments::new(),
        );
        let inv = &doc.invoices[0];
        assert_eq!(
            summary(inv),
            [
                "Usage band=- tier=- q=23 billable=23 frag=0 price=0.10 amount=2.30",
                "Usage band=- tier=- q=55 billable=47 frag=8 price=2.00 amount=2.00",
            ]
        );
        let key = FragmentKey {
            tenant: "a".into(),
            sku: "h100".into(),
            meter: MeterKind::KernelLaunches,
        };
        let carried = doc.fragments_out();
        assert_eq!(carried.get(&key), Some(&8));
        // The next day: the 8 carried in open the package span with 45 more: 53 = 5
        // increments + 3; the span bills 50 = 1 package.
        let next = d + 24 * HOUR;
        let doc = rated_with(
            &launches(&[("a", next, 45)]),
            &b,
            Some((next, next + HOUR)),
            &carried,
        );
        let inv = &doc.invoices[0];
        assert_eq!(
            summary(inv),
            ["Usage band=- tier=- q=53 billable=50 frag=3 price=2.00 amount=2.00"]
        );
        assert_eq!(inv.lines[0].extensions.packages, Some(Quantity(1)));
    }

    /// Two package rates of one size, a price change between: one span, so a package begun
    /// under the first rate (at its price) holds the second rate's first units, and no
    /// package is bought twice because the price changed.
    #[test]
    fn a_package_to_package_change_continues_the_span_and_its_open_package() {
        let d = t(DEC1);
        let tables = format!(
            "{}{}",
            launches_rate(&format!(
                "model = \"package\"\npackage_size = \"50\"\nunit_price = \"1.00\"\nvalid_to = \"{DEC1}\""
            )),
            launches_rate(&format!(
                "model = \"package\"\npackage_size = \"50\"\nunit_price = \"2.00\"\nvalid_from = \"{DEC1}\""
            )),
        );
        let b = book("USD", "half_even", &tables);
        // 30 + 40 = 70: 2 packages; the first (1.00) begins under the first rate and holds 50,
        // the second (2.00) begins under the second.
        let inv = rated(&launches(&[("a", d - HOUR, 30), ("a", d, 40)]), &b);
        assert_eq!(
            summary(&inv),
            [
                "Usage band=- tier=- q=30 billable=30 frag=0 price=1.00 amount=1.00",
                "Usage band=- tier=- q=40 billable=40 frag=0 price=2.00 amount=2.00",
            ]
        );
        assert_eq!(inv.subtotal, dec("3.00"));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;
        use std::collections::BTreeMap;

        const SIZE: u128 = 7;

        /// A book of launches rates that follow each other at the hours `cuts` (from Dec 1),
        /// the `i`-th of model `models[i]`, all with increment `inc`; package rate `i` costs
        /// `0.3i` per package of 7 (a price no other line has, so its lines are known).
        fn book_of(models: &[usize], cuts: &[u64], inc: u32) -> PriceBook {
            let mut tables = String::new();
            for (i, &m) in models.iter().enumerate() {
                let body = match m {
                    0 => "unit_price = \"0.0123\"".to_string(),
                    1 => GRADUATED.replace("0.10", "0.013").replace("0.05", "0.0071"),
                    2 => GRADUATED
                        .replace("graduated", "volume")
                        .replace("0.10", "0.017"),
                    _ => format!(
                        "model = \"package\"\npackage_size = \"{SIZE}\"\nunit_price = \"0.3{i}\""
                    ),
                };
                let mut validity = String::new();
                if i > 0 {
                    validity.push_str(&format!(
                        "valid_from = \"{}\"\n",
                        rfc3339(t(DEC1) + cuts[i - 1] * HOUR)
                    ));
                }
                if let Some(c) = cuts.get(i) {
                    validity.push_str(&format!("valid_to = \"{}\"\n", rfc3339(t(DEC1) + c * HOUR)));
                }
                tables.push_str(&launches_rate(&format!(
                    "{body}\nincrement = \"{inc}\"\n{validity}"
                )));
            }
            book("USD", "half_even", &tables)
        }

        fn plan() -> impl Strategy<Value = (Vec<usize>, Vec<u64>)> {
            (1usize..6).prop_flat_map(|k| {
                (
                    proptest::collection::vec(0usize..4, k),
                    proptest::collection::btree_set(1u64..72, k - 1),
                )
                    .prop_map(|(models, cuts)| (models, cuts.into_iter().collect::<Vec<u64>>()))
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            /// Each package span (a run of package-priced usage) pays exactly
            /// `⌈its billed units ÷ 7⌉` packages, never fewer, whatever models come before or
            /// between; and billed plus carried out equals metered plus carried in.
            #[test]
            fn each_package_span_pays_for_its_billed_units_and_quantities_conserve(
                (models, cuts) in plan(),
                hours in proptest::collection::btree_map(0u64..72, 0u128..40, 0..24),
                inc in 1u32..13,
                carried_in in 0u128..12,
            ) {
                let b = book_of(&models, &cuts, inc);
                let d = t(DEC1);
                let rows: Vec<(&str, u64, u128)> =
                    hours.iter().filter(|(_, &q)| q > 0).map(|(&h, &q)| ("a", d + h * HOUR, q)).collect();
                let key = FragmentKey { tenant: "a".into(), sku: "h100".into(), meter: MeterKind::KernelLaunches };
                let fin: CarriedFragments = [(key.clone(), carried_in)].into_iter().collect();
                let doc = rated_with(&launches(&rows), &b, Some((d, d + 72 * HOUR)), &fin);
                let rate_at = |h: u64| cuts.iter().filter(|&&c| c <= h).count();
                // Pieces in time order: the carried-in fragment under the rate at the period's
                // start, then each window under its rate.
                let mut pieces: Vec<(usize, u128)> = vec![(rate_at(0), carried_in)];
                pieces.extend(rows.iter().map(|&(_, ws, q)| (rate_at((ws - d) / HOUR), q)));
                let total: u128 = pieces.iter().map(|p| p.1).sum();
                let billable_total = total - total % u128::from(inc);
                // Spans: (package rates in it, units billed in it).
                let mut spans: Vec<(Vec<usize>, u128)> = Vec::new();
                let mut open = false;
                let mut cum = 0u128;
                for &(r, q) in &pieces {
                    let billed = (cum + q).min(billable_total) - cum.min(billable_total);
                    cum += q;
                    if models[r] == 3 {
                        if !open {
                            spans.push((Vec::new(), 0));
                            open = true;
                        }
                        if let Some(s) = spans.last_mut() {
                            if !s.0.contains(&r) {
                                s.0.push(r);
                            }
                            s.1 += billed;
                        }
                    } else if q > 0 {
                        open = false;
                    }
                }
                let mut packages_of_rate: BTreeMap<usize, u128> = BTreeMap::new();
                let mut billed_total = 0u128;
                for inv in &doc.invoices {
                    for l in inv.lines.iter().filter(|l| l.kind == LineKind::Usage) {
                        billed_total += l.billable_quantity.map_or(0, |q| q.0);
                        if let (Some(p), Some(price)) = (l.extensions.packages, l.unit_price) {
                            let i: usize = price.to_string().trim_start_matches("0.3").parse().unwrap_or(99);
                            *packages_of_rate.entry(i).or_insert(0) += p.0;
                            prop_assert_eq!(l.amount, price * Decimal::from(p.0 as u64), "{:?}", l);
                        }
                    }
                }
                for (rates, billed) in &spans {
                    let paid: u128 = rates.iter().map(|r| packages_of_rate.get(r).copied().unwrap_or(0)).sum();
                    prop_assert_eq!(paid, billed.div_ceil(SIZE), "span of rates {:?}: {:?}", rates, doc.invoices[0].lines);
                }
                let out = doc.fragments_out().get(&key).copied().unwrap_or(0);
                prop_assert_eq!(billed_total + out, total);
            }
        }
    }
}
