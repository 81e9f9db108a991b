//! Integration tests of gpumeter-rating: price books, exact amounts, invoices (docs/ARCHITECTURE.md, "Rating in brief" and "Documents").

use gpumeter_core::{
    DeviceEntry, LossEntry, MeterKind, Quantity, RecordCounts, UsageReport, UsageRow, WarningCode,
};
use gpumeter_rating::{
    rate, CarriedFragments, Invoice, InvoiceDocument, LineKind, PriceBook, PriceBookError,
};

const HOUR_NS: u64 = 3_600_000_000_000;
/// 2026-12-01T00:00:00Z in ns since the epoch.
const DEC1: u64 = 1_796_083_200 * 1_000_000_000;

/// A price book with the given header lines after schema/version and the given tables.
fn book_with(header: &str, body: &str) -> Result<PriceBook, PriceBookError> {
    let text =
        format!("schema = \"gpumeter.pricebook/v1\"\nversion = \"test-1\"\n{header}\n{body}");
    PriceBook::from_toml_str("test.toml", &text)
}

fn book(header: &str, body: &str) -> PriceBook {
    match book_with(header, body) {
        Ok(b) => b,
        Err(e) => panic!("price book should parse: {e}"),
    }
}

fn device(key: &str, name: Option<&str>) -> DeviceEntry {
    DeviceEntry {
        device: 0,
        device_key: key.to_string(),
        name: name.map(str::to_string),
        sm_count: Some(132),
        compute_capability: Some("9.0".to_string()),
        not_meterable: vec![],
    }
}

fn row(tenant: &str, key: &str, window_start_ns: u64, meter: MeterKind, q: u128) -> UsageRow {
    UsageRow {
        tenant: tenant.to_string(),
        device: 0,
        device_key: key.to_string(),
        window_start: gpumeter_core::time::rfc3339(window_start_ns),
        meter,
        quantity: Quantity(q),
    }
}

fn report(window_seconds: u64, devices: Vec<DeviceEntry>, usage: Vec<UsageRow>) -> UsageReport {
    let mut r = UsageReport {
        schema: "gpumeter.usage/v1".to_string(),
        metering_policy: "v1".to_string(),
        window_seconds,
        complete: Some(true),
        sources: vec![],
        devices,
        records: RecordCounts::default(),
        loss: vec![],
        usage,
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

fn rated(usage: &UsageReport, book: &PriceBook, period: Option<(u64, u64)>) -> InvoiceDocument {
    match rate(usage, book, period, &CarriedFragments::new()) {
        Ok(d) => d,
        Err(e) => panic!("rating should succeed: {e}"),
    }
}

/// Σ line amounts == subtotal, and total == subtotal (v0), exactly.
fn assert_sums(inv: &Invoice) {
    let sum = inv
        .lines
        .iter()
        .fold(rust_decimal::Decimal::ZERO, |a, l| a + l.amount);
    assert_eq!(sum, inv.subtotal, "lines sum to subtotal");
    assert_eq!(inv.total, inv.subtotal);
}

const H100_SKU: &str = r#"
[[sku]]
id = "h100"
match = ["NVIDIA H100*"]
"#;

/// One device "GPU-0" named H100, one tenant, one meter, one window.
fn one_row_report(meter: MeterKind, q: u128) -> UsageReport {
    report(
        3600,
        vec![device("GPU-0", Some("NVIDIA H100 80GB HBM3"))],
        vec![row("alice", "GPU-0", DEC1, meter, q)],
    )
}

/// Rates one row of `q` canonical units of `meter` at `price` per `unit` and returns the
/// single line's amount as a string.
fn one_line_amount(header: &str, meter: &str, unit: &str, price: &str, q: u128) -> String {
    let b = book(
        header,
        &format!(
            "{H100_SKU}\n[[rate]]\nsku = \"h100\"\nmeter = \"{meter}\"\nunit = \"{unit}\"\nunit_price = \"{price}\"\n"
        ),
    );
    let m = MeterKind::parse(meter).unwrap_or(MeterKind::KernelLaunches);
    let doc = rated(&one_row_report(m, q), &b, None);
    let inv = &doc.invoices[0];
    assert_sums(inv);
    assert_eq!(inv.lines.len(), 1, "{:?}", inv.lines);
    inv.lines[0].amount.to_string()
}

mod render;

mod rounding {
    use super::*;

    /// (rounding, price per launch, launches, expected amount); USD.
    /// Exact values: 1 × 0.005 = 0.005 (tie), 3 × 0.005 = 0.015 (tie), 5 × 0.005 = 0.025
    /// (tie), 7 × 0.001 = 0.007, 1 × 0.004 = 0.004, 2 × 0.003 = 0.006, 10 × 0.001 = 0.01.
    #[test]
    fn each_mode_by_hand() {
        let table: &[(&str, &str, u128, &str)] = &[
            ("half_even", "0.005", 1, "0.00"),
            ("half_even", "0.005", 3, "0.02"),
            ("half_even", "0.005", 5, "0.02"),
            ("half_even", "0.001", 7, "0.01"),
            ("half_even", "0.004", 1, "0.00"),
            ("half_up", "0.005", 1, "0.01"),
            ("half_up", "0.005", 5, "0.03"),
            ("half_up", "0.004", 1, "0.00"),
            ("half_up", "0.003", 2, "0.01"),
            ("up", "0.001", 1, "0.01"),
            ("up", "0.004", 1, "0.01"),
            ("up", "0.001", 10, "0.01"),
            ("down", "0.009", 1, "0.00"),
            ("down", "0.005", 3, "0.01"),
            ("down", "0.001", 10, "0.01"),
        ];
        for &(mode, price, q, want) in table {
            let header = format!("currency = \"USD\"\nrounding = \"{mode}\"");
            let got = one_line_amount(&header, "kernel_launches", "1", price, q);
            assert_eq!(got, want, "{mode}: {q} × {price}");
        }
    }

    #[test]
    fn default_is_half_even() {
        let got = one_line_amount("currency = \"USD\"", "kernel_launches", "1", "0.005", 1);
        assert_eq!(got, "0.00");
        let got = one_line_amount("currency = \"USD\"", "kernel_launches", "1", "0.005", 3);
        assert_eq!(got, "0.02");
    }
}

mod currencies {
    use super::*;

    #[test]
    fn scales_0_2_3_4() {
        // JPY, scale 0: 3 × 0.5 = 1.5 → 2; 5 × 0.5 = 2.5 → 2 (half-even); 41 × 0.3 = 12.3 → 12
        assert_eq!(
            one_line_amount("currency = \"JPY\"", "kernel_launches", "1", "0.5", 3),
            "2"
        );
        assert_eq!(
            one_line_amount("currency = \"JPY\"", "kernel_launches", "1", "0.5", 5),
            "2"
        );
        assert_eq!(
            one_line_amount("currency = \"KRW\"", "kernel_launches", "1", "0.3", 41),
            "12"
        );
        // USD, scale 2: amounts keep their trailing zero: 41 × 0.3 = 12.30
        assert_eq!(
            one_line_amount("currency = \"USD\"", "kernel_launches", "1", "0.3", 41),
            "12.30"
        );
        assert_eq!(
            one_line_amount("currency = \"EUR\"", "kernel_launches", "1", "2", 3),
            "6.00"
        );
        // BHD, scale 3: 3 × 0.0005 = 0.0015 → 0.002 (tie to even); 5 × 0.0005 → 0.002
        assert_eq!(
            one_line_amount("currency = \"BHD\"", "kernel_launches", "1", "0.0005", 3),
            "0.002"
        );
        assert_eq!(
            one_line_amount("currency = \"KWD\"", "kernel_launches", "1", "0.0005", 5),
            "0.002"
        );
        assert_eq!(
            one_line_amount("currency = \"TND\"", "kernel_launches", "1", "1.25", 2),
            "2.500"
        );
        // CLF, scale 4
        assert_eq!(
            one_line_amount("currency = \"CLF\"", "kernel_launches", "1", "0.00001", 15),
            "0.0002"
        );
    }

    #[test]
    fn table_has_the_required_codes() {
        let want = [
            ("USD", 2),
            ("EUR", 2),
            ("GBP", 2),
            ("JPY", 0),
            ("CHF", 2),
            ("CNY", 2),
            ("KRW", 0),
            ("INR", 2),
            ("CAD", 2),
            ("AUD", 2),
            ("SEK", 2),
            ("NOK", 2),
            ("DKK", 2),
            ("SGD", 2),
            ("HKD", 2),
            ("BHD", 3),
            ("KWD", 3),
            ("JOD", 3),
            ("TND", 3),
            ("CLF", 4),
        ];
        for (code, scale) in want {
            let c = gpumeter_rating::Currency::from_code(code);
            assert_eq!(c.map(|c| c.scale()), Some(scale), "{code}");
        }
        assert!(gpumeter_rating::Currency::from_code("usd").is_none());
        assert!(gpumeter_rating::Currency::from_code("XAU").is_none());
    }
}

mod units {
    use super::*;
    use gpumeter_rating::PricingUnit;

    #[test]
    fn factors_by_hand() {
        let usd = "currency = \"USD\"";
        // 132 SMs for one hour = 132 SM·hour × 0.0175 = 2.31
        let q = 132u128 * 3_600_000_000_000;
        assert_eq!(
            one_line_amount(usd, "sm_ns", "SM·hour", "0.0175", q),
            "2.31"
        );
        assert_eq!(
            one_line_amount(usd, "sm_ns", "SM*hour", "0.0175", q),
            "2.31"
        );
        // 3 GiB × 0.10 = 0.30; 1 GB = 0.931322574615478515625 GiB × 0.10 = 0.0931… → 0.09
        let gib = 1u128 << 30;
        assert_eq!(
            one_line_amount(usd, "memcpy_htod_bytes", "GiB", "0.10", 3 * gib),
            "0.30"
        );
        assert_eq!(
            one_line_amount(usd, "memcpy_htod_bytes", "GiB", "0.10", 1_000_000_000),
            "0.09"
        );
        assert_eq!(
            one_line_amount(usd, "memcpy_dtoh_bytes", "GB", "0.10", 1_000_000_000),
            "0.10"
        );
        // 1 kWh = 3.6e9 mJ × 0.25 = 0.25; half a kWh = 0.125 → 0.12 (half-even)
        assert_eq!(
            one_line_amount(usd, "energy_mj", "kWh", "0.25", 3_600_000_000),
            "0.25"
        );
        assert_eq!(
            one_line_amount(usd, "energy_mj", "kWh", "0.25", 1_800_000_000),
            "0.12"
        );
        // 2.5 M launches × 0.40 per 1M = 1.00
        assert_eq!(
            one_line_amount(usd, "kernel_launches", "1M", "0.40", 2_500_000),
            "1.00"
        );
        // 90 minutes of busy time at 1.20 per hour = 1.80
        assert_eq!(
            one_line_amount(usd, "gpu_busy_ns", "hour", "1.20", 90 * 60_000_000_000),
            "1.80"
        );
        // 2 GiB held for one hour at 0.01 per GiB·hour = 0.02
        assert_eq!(
            one_line_amount(
                usd,
                "memory_byte_ns",
                "GiB*hour",
                "0.01",
                2 * gib * 3_600_000_000_000
            ),
            "0.02"
        );
    }

    /// PM sampling's meters (issue 16) rate like any other: `sm_active_ns` per SM·hour,
    /// `dram_bytes` per PB and PiB (an H200 moves about 17 PB an hour), each on its own line.
    #[test]
    fn pm_sampled_meters_are_priced() {
        let usd = "currency = \"USD\"";
        let b = book(
            usd,
            &format!(
                "{H100_SKU}\n[[rate]]\nsku = \"h100\"\nmeter = \"sm_active_ns\"\nunit = \"SM·hour\"\nunit_price = \"0.02\"\n\
                 [[rate]]\nsku = \"h100\"\nmeter = \"dram_bytes\"\nunit = \"PB\"\nunit_price = \"0.05\"\n"
            ),
        );
        // 132 SMs active for an hour: 132 SM·hour × 0.02 = 2.64; 17 PB × 0.05 = 0.85.
        let usage = report(
            3600,
            vec![device("GPU-0", Some("NVIDIA H100 80GB HBM3"))],
            vec![
                row(
                    "alice",
                    "GPU-0",
                    DEC1,
                    MeterKind::SmActiveNs,
                    132 * 3_600_000_000_000,
                ),
                row(
                    "alice",
                    "GPU-0",
                    DEC1,
                    MeterKind::DramBytes,
                    17_000_000_000_000_000,
                ),
            ],
        );
        let doc = rated(&usage, &b, None);
        let inv = &doc.invoices[0];
        assert_sums(inv);
        let amounts: Vec<(Option<&str>, String)> = inv
            .lines
            .iter()
            .map(|l| (l.pricing_unit.as_deref(), l.amount.to_string()))
            .collect();
        assert_eq!(
            amounts,
            vec![
                (Some("SM·hour"), "2.64".to_string()),
                (Some("PB"), "0.85".to_string())
            ]
        );
        assert_eq!(inv.subtotal.to_string(), "3.49");
        // 3 PiB at 0.10 per PiB = 0.30; 1 PB = 0.888… PiB × 0.10 → 0.09.
        let pib = 1u128 << 50;
        assert_eq!(
            one_line_amount(usd, "dram_bytes", "PiB", "0.10", 3 * pib),
            "0.30"
        );
        assert_eq!(
            one_line_amount(usd, "dram_bytes", "PiB", "0.10", 1_000_000_000_000_000),
            "0.09"
        );
        // A time unit is refused for a bytes meter.
        let refused = book_with(
            usd,
            &format!(
                "{H100_SKU}\n[[rate]]\nsku = \"h100\"\nmeter = \"dram_bytes\"\nunit = \"SM·hour\"\nunit_price = \"1\"\n"
            ),
        );
        assert!(refused.is_err());
    }

    #[test]
    fn quantity_in_pricing_unit_has_nine_decimals() {
        let b = book(
            "currency = \"USD\"",
            &format!("{H100_SKU}\n[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"1\"\n"),
        );
        // 1 SM·ns = 1/3.6e12 SM·hour = 0.000000000277… → 0.000000000
        // 1.5 SM·hour exactly
        let doc = rated(
            &one_row_report(MeterKind::SmNs, 5_400_000_000_000),
            &b,
            None,
        );
        let l = &doc.invoices[0].lines[0];
        assert_eq!(l.quantity_in_pricing_unit.as_deref(), Some("1.500000000"));
        assert_eq!(l.pricing_unit.as_deref(), Some("SM·hour"));
        assert_eq!(l.unit.as_deref(), Some("SM·ns"));
        assert_eq!(l.quantity, Some(Quantity(5_400_000_000_000)));
        assert_eq!(l.billable_quantity, Some(Quantity(5_400_000_000_000)));
        assert_eq!(l.fragment_carried, Some(Quantity(0)));
        assert_eq!(l.amount.to_string(), "1.50");
    }

    #[test]
    fn every_unit_has_an_integer_factor_and_parses_with_ascii_star() {
        for u in PricingUnit::all() {
            assert_eq!(u.factor_den(), 1, "{u}");
            assert!(u.factor_num() >= 1);
            assert_eq!(PricingUnit::parse(&u.name().replace('·', "*")), Some(u));
        }
        assert_eq!(
            PricingUnit::parse("GiB·hour").map(|u| u.factor_num()),
            Some((1u128 << 30) * 3_600_000_000_000)
        );
        assert_eq!(
            PricingUnit::parse("Wh").map(|u| u.factor_num()),
            Some(3_600_000)
        );
        assert_eq!(
            PricingUnit::parse("TiB").map(|u| u.factor_num()),
            Some(1u128 << 40)
        );
        assert_eq!(
            PricingUnit::parse("PiB").map(|u| u.factor_num()),
            Some(1u128 << 50)
        );
        assert_eq!(
            PricingUnit::parse("PB").map(|u| u.factor_num()),
            Some(1_000_000_000_000_000)
        );
        assert_eq!(
            PricingUnit::parse("day").map(|u| u.factor_num()),
            Some(86_400_000_000_000)
        );
        assert!(PricingUnit::parse("Gb").is_none());
        assert!(PricingUnit::parse("ns").is_none());
    }
}

mod exactness {
    use super::*;

    #[test]
    fn u128_max_quantity_is_exact() {
        // u128::MAX SM·ns at 0.000000001 per SM·hour:
        // 340282366920938463463374607431768211455 × 10^-9 / 3.6e12 USD
        // = 94522879700260684.295381835397… → 94522879700260684.30
        let got = one_line_amount(
            "currency = \"USD\"",
            "sm_ns",
            "SM·hour",
            "0.000000001",
            u128::MAX,
        );
        assert_eq!(got, "94522879700260684.30");
        let b = book(
            "currency = \"USD\"",
            &format!("{H100_SKU}\n[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"0.000000001\"\n"),
        );
        let doc = rated(&one_row_report(MeterKind::SmNs, u128::MAX), &b, None);
        assert_eq!(
            doc.invoices[0].lines[0].quantity_in_pricing_unit.as_deref(),
            Some("94522879700260684295381835.397713392")
        );
    }

    #[test]
    fn u128_max_quantity_too_large_for_money_is_an_error() {
        let b = book(
            "currency = \"USD\"",
            &format!("{H100_SKU}\n[[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1\"\nunit_price = \"1000\"\n"),
        );
        let err = rate(
            &one_row_report(MeterKind::KernelLaunches, u128::MAX),
            &b,
            None,
            &CarriedFragments::new(),
        );
        assert!(
            matches!(
                err,
                Err(gpumeter_rating::RatingError::AmountOverflow { .. })
            ),
            "{err:?}"
        );
    }

    #[test]
    fn summed_quantity_beyond_u128_is_an_error() {
        let b = book(
            "currency = \"USD\"",
            &format!("{H100_SKU}\n[[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1G\"\nunit_price = \"0\"\n"),
        );
        let u = report(
            3600,
            vec![device("GPU-0", Some("NVIDIA H100"))],
            vec![
                row("alice", "GPU-0", DEC1, MeterKind::KernelLaunches, u128::MAX),
                row(
                    "alice",
                    "GPU-0",
                    DEC1 + HOUR_NS,
                    MeterKind::KernelLaunches,
                    1,
                ),
            ],
        );
        let err = rate(&u, &b, None, &CarriedFragments::new());
        assert!(
            matches!(
                err,
                Err(gpumeter_rating::RatingError::QuantityOverflow { .. })
            ),
            "{err:?}"
        );
    }

    #[test]
    fn one_rounding_per_line_not_per_row() {
        // 10 windows of 1 launch at 0.004: per row each would round to 0.00; per line 0.04.
        let b = book(
            "currency = \"USD\"",
            &format!("{H100_SKU}\n[[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1\"\nunit_price = \"0.004\"\n"),
        );
        let rows = (0..10)
            .map(|i| {
                row(
                    "alice",
                    "GPU-0",
                    DEC1 + i * HOUR_NS,
                    MeterKind::KernelLaunches,
                    1,
                )
            })
            .collect();
        let u = report(3600, vec![device("GPU-0", Some("NVIDIA H100"))], rows);
        let doc = rated(&u, &b, None);
        assert_eq!(doc.invoices[0].lines[0].amount.to_string(), "0.04");
        assert_eq!(doc.invoices[0].lines[0].quantity, Some(Quantity(10)));
    }
}

mod sku_matching {
    use super::*;

    const SKUS: &str = r#"
[[sku]]
id = "any"
match = "*"
[[sku]]
id = "h100-short"
match = ["NVIDIA H*"]
[[sku]]
id = "h100-long"
match = ["NVIDIA H100 80GB*"]
[[sku]]
id = "h100-exact"
match = ["NVIDIA H100 80GB HBM3"]
[[sku]]
id = "a100"
match = ["NVIDIA A100*", "A100 spare"]
"#;

    #[test]
    fn exact_beats_longest_prefix_beats_fallback() {
        let b = book("currency = \"USD\"", SKUS);
        let got = b.check_devices(&[
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H100 80GB HBM3e",
            "NVIDIA H200",
            "NVIDIA A100-PG509-200",
            "A100 spare",
            "Tesla V100-SXM2-16GB",
            "",
        ]);
        let ids: Vec<Option<&str>> = got.iter().map(|(_, s)| s.as_deref()).collect();
        assert_eq!(
            ids,
            vec![
                Some("h100-exact"),
                Some("h100-long"),
                Some("h100-short"),
                Some("a100"),
                Some("a100"),
                Some("any"),
                Some("any"),
            ]
        );
        assert_eq!(got[0].0, "NVIDIA H100 80GB HBM3");
    }

    #[test]
    fn no_fallback_means_no_sku() {
        let b = book("currency = \"USD\"", H100_SKU);
        assert_eq!(
            b.check_devices(&["NVIDIA B200"]),
            vec![("NVIDIA B200".to_string(), None)]
        );
        assert!(matches!(b.sku_for("NVIDIA B200"), Ok(None)));
    }

    #[test]
    fn equal_candidates_are_a_validation_error() {
        let err = book_with(
            "currency = \"USD\"",
            "[[sku]]\nid = \"a\"\nmatch = [\"NVIDIA H100*\"]\n[[sku]]\nid = \"b\"\nmatch = [\"X\", \"NVIDIA H100*\"]\n",
        );
        match err {
            Err(PriceBookError::Invalid {
                table,
                field,
                value,
                reason,
                ..
            }) => {
                assert_eq!(table, "sku[1]");
                assert_eq!(field, "match");
                assert_eq!(value, "\"NVIDIA H100*\"");
                assert!(reason.contains("sku[0]"), "{reason}");
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
        let err = book_with(
            "currency = \"USD\"",
            "[[sku]]\nid = \"a\"\nmatch = [\"*\"]\n[[sku]]\nid = \"b\"\nmatch = [\"*\"]\n",
        );
        assert!(
            matches!(err, Err(PriceBookError::Invalid { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn rating_uses_the_best_match() {
        let b = book(
            "currency = \"USD\"",
            &format!(
                "{SKUS}\n[[rate]]\nsku = \"h100-exact\"\nmeter = \"kernel_launches\"\nunit = \"1\"\nunit_price = \"1\"\n\
                 [[rate]]\nsku = \"any\"\nmeter = \"kernel_launches\"\nunit = \"1\"\nunit_price = \"2\"\n"
            ),
        );
        let u = report(
            3600,
            vec![
                device("GPU-0", Some("NVIDIA H100 80GB HBM3")),
                device("GPU-1", Some("Tesla T4")),
            ],
            vec![
                row("alice", "GPU-0", DEC1, MeterKind::KernelLaunches, 3),
                row("alice", "GPU-1", DEC1, MeterKind::KernelLaunches, 5),
            ],
        );
        let doc = rated(&u, &b, None);
        let lines: Vec<(Option<&str>, String)> = doc.invoices[0]
            .lines
            .iter()
            .map(|l| (l.sku.as_deref(), l.amount.to_string()))
            .collect();
        assert_eq!(
            lines,
            vec![
                (Some("any"), "10.00".into()),
                (Some("h100-exact"), "3.00".into())
            ]
        );
    }
}

mod validation {
    use super::*;

    const OK_RATE: &str =
        "[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"0.0175\"\n";

    /// (header, body, table, field, a fragment of the message)
    #[test]
    fn errors_name_table_field_and_value() {
        let usd = "currency = \"USD\"";
        let cases: Vec<(&str, String, &str, &str, &str)> = vec![
            ("currency = \"XYZ\"", String::new(), "", "currency", "\"XYZ\""),
            ("currency = \"USD\"\ninvoice_minimum = \"0.505\"", String::new(), "", "invoice_minimum", "minor unit"),
            ("currency = \"JPY\"\ninvoice_minimum = \"0.5\"", String::new(), "", "invoice_minimum", "JPY"),
            ("currency = \"USD\"\nrounding = \"nearest\"", String::new(), "", "rounding", "\"nearest\""),
            (usd, format!("{H100_SKU}{OK_RATE}[[rate]]\nsku = \"h100\"\nmeter = \"kernel_ns\"\nunit = \"hour\"\nunit_price = \"-1\"\n"), "rate[1]", "unit_price", "negative"),
            (usd, format!("{H100_SKU}{OK_RATE}[[rate]]\nsku = \"h100\"\nmeter = \"kernel_ns\"\nunit = \"hour\"\nunit_price = 0.5\n"), "rate[1]", "unit_price", "float"),
            (usd, format!("{H100_SKU}{OK_RATE}[[rate]]\nsku = \"h100\"\nmeter = \"kernel_ns\"\nunit = \"hour\"\nunit_price = \"1e3\"\n"), "rate[1]", "unit_price", "\"1e3\""),
            (usd, format!("{H100_SKU}{OK_RATE}[[rate]]\nsku = \"b200\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"1\"\n"), "rate[1]", "sku", "\"b200\""),
            (usd, format!("{H100_SKU}{OK_RATE}[[rate]]\nsku = \"h100\"\nmeter = \"sm_hours\"\nunit = \"SM·hour\"\nunit_price = \"1\"\n"), "rate[1]", "meter", "\"sm_hours\""),
            (usd, format!("{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"GiB\"\nunit_price = \"1\"\n"), "rate[0]", "unit", "SM·hour"),
            (usd, format!("{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·minute\"\nunit_price = \"1\"\n"), "rate[0]", "unit", "not a pricing unit"),
            (usd, format!("{H100_SKU}{OK_RATE}{OK_RATE}"), "rate[1]", "meter", "rate[0]"),
            (usd, format!("{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"1\"\nvalid_from = \"2026-12-01T00:00:00Z\"\nvalid_to = \"2026-11-01T00:00:00Z\"\n"), "rate[0]", "valid_to", "after valid_from"),
            (usd, format!("{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"1\"\nvalid_from = \"yesterday\"\n"), "rate[0]", "valid_from", "RFC 3339"),
            (usd, format!("{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\n"), "rate[0]", "unit_price", "missing"),
            (usd, format!("{H100_SKU}[[sku]]\nid = \"h100\"\nmatch = [\"X\"]\n"), "sku[1]", "id", "sku[0]"),
            (usd, "[[sku]]\nid = \"x\"\nmatch = []\n".to_string(), "sku[0]", "match", "at least one"),
            (usd, "[[sku]]\nid = \"x\"\nmatch = [\"NVIDIA*H100\"]\n".to_string(), "sku[0]", "match", "\"NVIDIA*H100\""),
            (usd, "[[sku]]\nid = \"x\"\n".to_string(), "sku[0]", "match", "missing"),
            ("currency = \"USD\"\nschema2 = 1", String::new(), "", "", "unknown key `schema2`"),
            (usd, format!("{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_prize = \"1\"\n"), "rate[0]", "", "unknown key `unit_prize`"),
        ];
        for (header, body, table, field, fragment) in cases {
            let err = match book_with(header, &body) {
                Ok(_) => panic!("should fail: {header} {body}"),
                Err(e) => e,
            };
            let msg = err.to_string();
            assert!(msg.starts_with("test.toml:"), "{msg}");
            assert!(msg.contains(fragment), "`{fragment}` not in: {msg}");
            let (t, f) = match &err {
                PriceBookError::Invalid { table, field, .. }
                | PriceBookError::Missing { table, field, .. } => (table.clone(), *field),
                PriceBookError::UnknownKey { table, .. } => (table.clone(), ""),
                other => panic!("unexpected error kind: {other:?}"),
            };
            assert_eq!((t.as_str(), f), (table, field), "{msg}");
            if !table.is_empty() && !field.is_empty() {
                assert!(msg.contains(&format!("{table}.{field}")), "{msg}");
            }
        }
    }

    #[test]
    fn schema_and_syntax() {
        let err = PriceBook::from_toml_str(
            "p.toml",
            "schema = \"gpumeter.pricebook/v2\"\nversion = \"1\"\ncurrency = \"USD\"\n",
        );
        assert!(
            matches!(&err, Err(PriceBookError::Invalid { field, .. }) if *field == "schema"),
            "{err:?}"
        );
        let err = PriceBook::from_toml_str("p.toml", "schema = ");
        assert!(
            matches!(&err, Err(PriceBookError::Syntax { file, .. }) if file == "p.toml"),
            "{err:?}"
        );
        let err = PriceBook::from_toml_str(
            "p.toml",
            "schema = \"gpumeter.pricebook/v1\"\ncurrency = \"USD\"\n",
        );
        assert!(
            matches!(&err, Err(PriceBookError::Missing { field, .. }) if *field == "version"),
            "{err:?}"
        );
        let err = PriceBook::from_path(std::path::Path::new("/nonexistent/book.toml"));
        assert!(
            matches!(&err, Err(PriceBookError::Io { file, .. }) if file == "/nonexistent/book.toml"),
            "{err:?}"
        );
    }

    #[test]
    fn accepted_forms() {
        let b = book(
            "currency = \"USD\"\nrounding = \"up\"\ninvoice_minimum = \"0.5\"\n[extensions]\nowner = \"ops\"",
            &format!(
                "{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1K\"\nunit_price = 2\n\
                 valid_from = 2026-12-01T00:00:00Z\nvalid_to = \"2027-01-01T00:00:00+00:00\"\n"
            ),
        );
        assert_eq!(
            b.invoice_minimum().map(|m| m.to_string()),
            Some("0.50".to_string())
        );
        assert_eq!(b.invoice_minimum_minor_units(), Some(50));
        assert_eq!(b.rates()[0].unit_price.to_string(), "2");
        assert_eq!(b.rates()[0].valid_from, Some(DEC1));
        assert_eq!(b.rounding(), gpumeter_rating::Rounding::Up);
        assert_eq!(b.version(), "test-1");
        assert_eq!(b.sha256().len(), 64);
        let summary = b.summary().join("\n");
        assert!(
            summary.contains("sku h100 matches \"NVIDIA H100*\""),
            "{summary}"
        );
        assert!(
            summary.contains("rate[0] kernel_launches: 2 USD per 1K"),
            "{summary}"
        );
    }

    #[test]
    fn sha256_is_over_the_bytes_as_given() {
        let text = "schema = \"gpumeter.pricebook/v1\"\nversion = \"1\"\ncurrency = \"USD\"\n";
        let b = PriceBook::from_toml_str("x.toml", text).map_err(|e| e.to_string());
        // sha256 of the text above, by `sha256sum`
        use sha2::Digest;
        let want = hex::encode(sha2::Sha256::digest(text.as_bytes()));
        assert_eq!(b.map(|b| b.sha256().to_string()), Ok(want));
    }

    #[test]
    fn example_price_book_parses() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pricebook.toml");
        let b = match PriceBook::from_path(&path) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(b.currency().code(), "USD");
        assert_eq!(
            b.invoice_minimum().map(|m| m.to_string()),
            Some("0.50".to_string())
        );
        let got = b.check_devices(&[
            "Tesla V100-SXM2-16GB",
            "NVIDIA A100-PG509-200",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA H200",
            "NVIDIA B200",
            "NVIDIA L4",
            "NVIDIA GeForce RTX 4090",
        ]);
        assert!(got[..6].iter().all(|(_, s)| s.is_some()), "{got:?}");
        assert_eq!(got[6].1, None);
        for sku in b.skus() {
            assert!(
                b.rates()
                    .iter()
                    .any(|r| r.sku == sku.id && r.meter == MeterKind::SmNs),
                "{} has an sm_ns rate",
                sku.id
            );
        }
    }
}

mod effective_dating {
    use super::*;

    const DATED: &str = r#"
[[rate]]
sku = "h100"
meter = "kernel_launches"
unit = "1"
unit_price = "1"
valid_to = "2026-12-01T10:00:00Z"
[[rate]]
sku = "h100"
meter = "kernel_launches"
unit = "1"
unit_price = "2"
valid_from = "2026-12-01T10:00:00Z"
valid_to = "2026-12-01T12:00:00Z"
"#;

    #[test]
    fn each_window_is_rated_by_the_rate_in_force_at_its_start() {
        let b = book("currency = \"USD\"", &format!("{H100_SKU}{DATED}"));
        let u = report(
            3600,
            vec![device("GPU-0", Some("NVIDIA H100"))],
            vec![
                row(
                    "alice",
                    "GPU-0",
                    DEC1 + 8 * HOUR_NS,
                    MeterKind::KernelLaunches,
                    3,
                ),
                row(
                    "alice",
                    "GPU-0",
                    DEC1 + 9 * HOUR_NS,
                    MeterKind::KernelLaunches,
                    4,
                ),
                row(
                    "alice",
                    "GPU-0",
                    DEC1 + 10 * HOUR_NS,
                    MeterKind::KernelLaunches,
                    5,
                ),
                row(
                    "alice",
                    "GPU-0",
                    DEC1 + 11 * HOUR_NS,
                    MeterKind::KernelLaunches,
                    6,
                ),
                // after every rate: unpriced, with a warning
                row(
                    "alice",
                    "GPU-0",
                    DEC1 + 12 * HOUR_NS,
                    MeterKind::KernelLaunches,
                    7,
                ),
            ],
        );
        let doc = rated(&u, &b, None);
        let inv = &doc.invoices[0];
        let lines: Vec<(String, Option<Quantity>, String)> = inv
            .lines
            .iter()
            .map(|l| {
                (
                    l.unit_price.map(|p| p.to_string()).unwrap_or_default(),
                    l.quantity,
                    l.amount.to_string(),
                )
            })
            .collect();
        assert_eq!(
            lines,
            vec![
                ("1".to_string(), Some(Quantity(7)), "7.00".to_string()),
                ("2".to_string(), Some(Quantity(11)), "22.00".to_string()),
            ]
        );
        assert_eq!(inv.subtotal.to_string(), "29.00");
        assert_eq!(inv.unpriced.len(), 1);
        assert_eq!(inv.unpriced[0].quantity, Quantity(7));
        assert!(
            inv.warnings
                .iter()
                .any(|w| *w.code() == WarningCode::UsageNotPriced && w.contains("not priced")),
            "{:?}",
            inv.warnings
        );
        assert_sums(inv);
    }

    #[test]
    fn validity_edges_must_fall_on_window_edges() {
        let body = format!(
            "{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1\"\nunit_price = \"1\"\nvalid_from = \"2026-12-01T10:30:00Z\"\n"
        );
        let b = book("currency = \"USD\"", &body);
        // One launch in the window of `window_seconds` starting at `hour` o'clock.
        let one_launch = |window_seconds: u64, hour: u64| {
            report(
                window_seconds,
                vec![device("GPU-0", Some("NVIDIA H100"))],
                vec![row(
                    "alice",
                    "GPU-0",
                    DEC1 + hour * HOUR_NS,
                    MeterKind::KernelLaunches,
                    1,
                )],
            )
        };
        // Usage in the 10:00 window, which the 10:30 edge cuts.
        match rate(&one_launch(3600, 10), &b, None, &CarriedFragments::new()) {
            Err(e @ gpumeter_rating::RatingError::EdgeNotOnWindow { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("rate[0].valid_from = 2026-12-01T10:30:00Z"),
                    "{msg}"
                );
                assert!(msg.contains("3600 s"), "{msg}");
            }
            other => panic!("expected EdgeNotOnWindow, got {other:?}"),
        }
        // Usage only in windows the edge does not cut (11:00) rates: the edge concerns no
        // window with usage.
        let later = rated(&one_launch(3600, 11), &b, None);
        assert_eq!(later.invoices[0].total.to_string(), "1.00");
        // With 15-minute windows the same book rates.
        let quarter = rated(&one_launch(900, 11), &b, None);
        assert_eq!(quarter.invoices[0].total.to_string(), "1.00");
    }
}

mod invoices {
    use super::*;

    fn priced_book(minimum: &str) -> PriceBook {
        book(
            &format!("currency = \"USD\"\ninvoice_minimum = \"{minimum}\""),
            &format!(
                "{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"0.0175\"\n\
                 [[rate]]\nsku = \"h100\"\nmeter = \"memcpy_htod_bytes\"\nunit = \"GB\"\nunit_price = \"0.01\"\n"
            ),
        )
    }

    #[test]
    fn minimum_tops_up_a_small_invoice() {
        // 12.5 SM·hour × 0.0175 = 0.21875 → 0.22; minimum 0.50 → top-up 0.28
        let u = one_row_report(MeterKind::SmNs, 125 * 360_000_000_000);
        let doc = rated(&u, &priced_book("0.50"), None);
        let inv = &doc.invoices[0];
        assert_eq!(inv.lines.len(), 2);
        assert_eq!(inv.lines[0].amount.to_string(), "0.22");
        let m = &inv.lines[1];
        assert_eq!(m.kind, LineKind::Minimum);
        assert_eq!((m.meter, m.sku.as_deref(), m.quantity), (None, None, None));
        assert_eq!(m.amount.to_string(), "0.28");
        assert_eq!(inv.subtotal.to_string(), "0.50");
        assert_eq!(inv.total.to_string(), "0.50");
        assert_sums(inv);
        // Above the minimum: no minimum line.
        let doc = rated(&u, &priced_book("0.10"), None);
        assert_eq!(doc.invoices[0].lines.len(), 1);
        assert_eq!(doc.invoices[0].subtotal.to_string(), "0.22");
    }

    #[test]
    fn unpriced_devices_are_listed_never_dropped() {
        let u = report(
            3600,
            vec![
                device("GPU-0", Some("NVIDIA H100 80GB HBM3")),
                device("GPU-1", None),
                device("GPU-2", Some("NVIDIA B200")),
            ],
            vec![
                row(
                    "alice",
                    "GPU-0",
                    DEC1,
                    MeterKind::SmNs,
                    3_600_000_000_000 * 100,
                ),
                row("alice", "GPU-1", DEC1, MeterKind::SmNs, 11),
                row("alice", "GPU-1", DEC1 + HOUR_NS, MeterKind::SmNs, 12),
                row("alice", "GPU-2", DEC1, MeterKind::KernelNs, 13),
                row("alice", "GPU-9", DEC1, MeterKind::KernelNs, 14),
                // priced device, meter without a rate: not billed, not unpriced
                row("alice", "GPU-0", DEC1, MeterKind::KernelLaunches, 99),
            ],
        );
        let doc = rated(&u, &priced_book("0"), None);
        let inv = &doc.invoices[0];
        assert_eq!(inv.lines.len(), 1);
        assert_eq!(inv.lines[0].amount.to_string(), "1.75");
        let unpriced: Vec<(&str, Option<&str>, MeterKind, Quantity)> = inv
            .unpriced
            .iter()
            .map(|p| {
                (
                    p.device_key.as_str(),
                    p.name.as_deref(),
                    p.meter,
                    p.quantity,
                )
            })
            .collect();
        assert_eq!(
            unpriced,
            vec![
                ("GPU-1", None, MeterKind::SmNs, Quantity(23)),
                (
                    "GPU-2",
                    Some("NVIDIA B200"),
                    MeterKind::KernelNs,
                    Quantity(13)
                ),
                ("GPU-9", None, MeterKind::KernelNs, Quantity(14)),
            ]
        );
        assert!(inv.unpriced[1].reason.contains("NVIDIA B200"));
        assert_eq!(inv.warnings.len(), 3, "{:?}", inv.warnings);
        assert!(inv.warnings.iter().all(|w| w.contains("not priced")));
        assert_sums(inv);
    }

    #[test]
    fn one_invoice_per_tenant_sorted_with_period() {
        let u = report(
            3600,
            vec![device("GPU-0", Some("NVIDIA H100"))],
            vec![
                row(
                    "zoe",
                    "GPU-0",
                    DEC1 + HOUR_NS,
                    MeterKind::SmNs,
                    3_600_000_000_000,
                ),
                row("Bob", "GPU-0", DEC1, MeterKind::SmNs, 3_600_000_000_000),
                row(
                    "alice",
                    "GPU-0",
                    DEC1 + 2 * HOUR_NS,
                    MeterKind::SmNs,
                    3_600_000_000_000,
                ),
            ],
        );
        let doc = rated(&u, &priced_book("0"), None);
        let tenants: Vec<&str> = doc.invoices.iter().map(|i| i.tenant.as_str()).collect();
        assert_eq!(tenants, vec!["Bob", "alice", "zoe"]);
        for inv in &doc.invoices {
            assert_eq!(inv.period.from, "2026-12-01T00:00:00Z");
            assert_eq!(inv.period.to, "2026-12-01T03:00:00Z");
            assert_eq!(inv.currency, "USD");
            assert_eq!(inv.price_book.version, "test-1");
            assert_eq!(inv.usage_sha256, u.sha256);
            assert_eq!(inv.ledger_head, None);
            assert!(inv.credits_applied.is_empty());
        }
        // An explicit period keeps only rows whose window starts in it.
        let doc = rated(
            &u,
            &priced_book("0"),
            Some((DEC1 + HOUR_NS, DEC1 + 2 * HOUR_NS)),
        );
        let tenants: Vec<&str> = doc.invoices.iter().map(|i| i.tenant.as_str()).collect();
        assert_eq!(tenants, vec!["zoe"]);
        assert_eq!(doc.invoices[0].period.from, "2026-12-01T01:00:00Z");
        // Periods must be non-empty and on window edges.
        for p in [
            (DEC1, DEC1),
            (DEC1 + HOUR_NS, DEC1),
            (DEC1 + 1, DEC1 + HOUR_NS),
        ] {
            let r = rate(&u, &priced_book("0"), Some(p), &CarriedFragments::new());
            assert!(
                matches!(r, Err(gpumeter_rating::RatingError::Period { .. })),
                "{p:?}: {r:?}"
            );
        }
        // No usage: no invoices.
        let empty = report(3600, vec![], vec![]);
        assert!(rated(&empty, &priced_book("0"), None).invoices.is_empty());
    }

    /// PM-sampling overflows are counted apart from lost records (a count of overflows, the
    /// samples overwritten unknown: "at least"); the other loss of a PM-sampled report may be
    /// records or PM samples.
    #[test]
    fn pm_sample_overflow_loss_is_worded_as_samples() {
        let mut u = one_row_report(MeterKind::SmActiveNs, 1);
        for (reason, records, lower_bound) in [("pm_sample_overflow", 3, true), ("late", 2, false)]
        {
            u.loss.push(LossEntry {
                device: Some(0),
                device_key: "GPU-0".into(),
                reason: reason.into(),
                records,
                lower_bound,
            });
        }
        let doc = rated(&u, &priced_book("0"), None);
        let w = &doc.invoices[0].warnings;
        assert_eq!(w[0].code(), &WarningCode::UsageLoss);
        assert_eq!(
            w[0],
            "usage has loss: 2 records or PM samples lost (2 late on GPU-0); lost records or PM \
             samples count in no meter; PM sampling's hardware buffer overflowed 3 times: the \
             samples it overwrote are not metered; at least 3 lost, so this invoice may bill \
             less than was used",
            "{w:?}"
        );
    }

    #[test]
    fn loss_and_report_warnings_are_carried() {
        let mut u = one_row_report(MeterKind::SmNs, 1);
        u.loss.push(LossEntry {
            device: Some(0),
            device_key: "GPU-0".into(),
            reason: "zero_timestamp".into(),
            records: 2,
            lower_bound: false,
        });
        u.warnings.push(gpumeter_core::Warning::new(
            gpumeter_core::WarningCode::InstrumentedRun,
            "time meters come from an instrumented run",
        ));
        let doc = rated(&u, &priced_book("0"), None);
        let w = &doc.invoices[0].warnings;
        assert!(
            w[0].starts_with("usage has loss: 2 records lost (2 zero_timestamp on GPU-0)"),
            "{w:?}"
        );
        assert_eq!(w[0].code(), &WarningCode::UsageLoss);
        // The usage report's warning is copied with its own code, its message prefixed.
        assert!(
            w.iter().any(|w| *w.code() == WarningCode::InstrumentedRun
                && w == "usage report: time meters come from an instrumented run"),
            "{w:?}"
        );
        let json = serde_json::to_value(&doc).expect("json");
        assert_eq!(json["invoices"][0]["warnings"][0]["code"], "usage_loss");

        // The same invoice as written before codes (warnings as plain strings, its digest over
        // them, computed here from the JSON alone): read, verified, written back as it was.
        let mut old = json.clone();
        for inv in old["invoices"].as_array_mut().expect("invoices") {
            for w in inv["warnings"].as_array_mut().expect("warnings") {
                *w = w["message"].clone();
            }
            let sha = gpumeter_core::document_sha256(inv, "sha256").expect("digest");
            inv["sha256"] = serde_json::Value::String(sha);
        }
        let text = serde_json::to_string_pretty(&old).expect("text");
        let read: InvoiceDocument = serde_json::from_str(&text).expect("an old invoice reads");
        assert!(read.verify_digests());
        let w = &read.invoices[0].warnings;
        assert!(w.iter().all(|w| *w.code() == WarningCode::Uncoded), "{w:?}");
        assert!(w[0].starts_with("usage has loss: "), "{w:?}");
        assert_eq!(serde_json::to_value(&read).expect("again"), old);
    }

    #[test]
    fn unsealed_report_is_cited_by_its_digest() {
        let sealed = one_row_report(MeterKind::SmNs, 1);
        let mut unsealed = sealed.clone();
        unsealed.sha256 = String::new();
        let b = book("currency = \"USD\"", H100_SKU);
        let doc = rated(&unsealed, &b, None);
        assert_eq!(doc.invoices[0].usage_sha256, sealed.sha256);
    }

    #[test]
    fn bad_reports_are_errors() {
        let mut u = one_row_report(MeterKind::SmNs, 1);
        u.usage[0].window_start = "2026-12-01T00:30:00Z".into();
        let r = rate(&u, &priced_book("0"), None, &CarriedFragments::new());
        assert!(
            matches!(&r, Err(gpumeter_rating::RatingError::Usage { field, .. }) if field == "usage[0].window_start"),
            "{r:?}"
        );
        u.usage[0].window_start = "noon".into();
        assert!(rate(&u, &priced_book("0"), None, &CarriedFragments::new()).is_err());
        let mut u = one_row_report(MeterKind::SmNs, 1);
        u.window_seconds = 7;
        assert!(matches!(
            rate(&u, &priced_book("0"), None, &CarriedFragments::new()),
            Err(gpumeter_rating::RatingError::Usage { .. })
        ));
        let mut u = one_row_report(MeterKind::SmNs, 1);
        u.schema = "something/v9".into();
        assert!(rate(&u, &priced_book("0"), None, &CarriedFragments::new()).is_err());
    }

    #[test]
    fn json_is_deterministic_and_digests_verify() {
        let u = report(
            3600,
            vec![device("GPU-0", Some("NVIDIA H100")), device("GPU-1", None)],
            vec![
                row("bob", "GPU-0", DEC1, MeterKind::SmNs, 7_200_000_000_000),
                row(
                    "bob",
                    "GPU-0",
                    DEC1,
                    MeterKind::MemcpyHtodBytes,
                    5_000_000_000,
                ),
                row("alice", "GPU-1", DEC1, MeterKind::SmNs, 5),
                row("alice", "GPU-0", DEC1 + HOUR_NS, MeterKind::SmNs, 1),
            ],
        );
        let b = priced_book("0.50");
        let a = serde_json::to_string(&rated(&u, &b, None)).unwrap_or_default();
        let c = serde_json::to_string(&rated(&u, &b, None)).unwrap_or_default();
        assert!(!a.is_empty());
        assert_eq!(a, c);

        let doc = rated(&u, &b, None);
        assert!(doc.verify_digests());
        for inv in &doc.invoices {
            assert_eq!(inv.sha256.len(), 64);
            assert_sums(inv);
        }
        let mut tampered = doc.clone();
        tampered.invoices[0].total = rust_decimal::Decimal::ZERO;
        assert!(!tampered.verify_digests());

        // The digest is SHA-256 over the canonical JSON without `sha256`.
        let v = serde_json::to_value(&doc.invoices[0]).unwrap_or_default();
        assert_eq!(
            gpumeter_core::document_sha256(&v, "sha256").ok().as_deref(),
            Some(doc.invoices[0].sha256.as_str())
        );

        // Round trip through JSON keeps everything, digests included.
        let back: InvoiceDocument = serde_json::from_str(&a).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, doc);
        assert!(back.verify_digests());
    }

    #[test]
    fn json_shape_follows_design_7() {
        let u = one_row_report(MeterKind::SmNs, 125 * 360_000_000_000);
        let doc = rated(&u, &priced_book("0.50"), None);
        let v = serde_json::to_value(&doc).unwrap_or_default();
        assert_eq!(v["schema"], "gpumeter.invoice/v1");
        let inv = &v["invoices"][0];
        let keys: Vec<&str> = inv
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let mut want = vec![
            "tenant",
            "currency",
            "period",
            "price_book",
            "lines",
            "unpriced",
            "subtotal",
            "credits_applied",
            "total",
            "warnings",
            "usage_sha256",
            "ledger_head",
            "sha256",
        ];
        let mut got = keys.clone();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want);
        let line = &inv["lines"][0];
        let mut lk: Vec<&str> = line
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        lk.sort_unstable();
        let mut want_lk = vec![
            "kind",
            "sku",
            "meter",
            "band",
            "tier",
            "quantity",
            "unit",
            "pricing_unit",
            "quantity_in_pricing_unit",
            "billable_quantity",
            "fragment_carried",
            "unit_price",
            "amount",
        ];
        want_lk.sort_unstable();
        assert_eq!(lk, want_lk);
        assert_eq!(line["kind"], "usage");
        assert_eq!(line["meter"], "sm_ns");
        assert_eq!(line["band"], serde_json::Value::Null);
        assert_eq!(line["quantity"], "45000000000000");
        assert_eq!(line["quantity_in_pricing_unit"], "12.500000000");
        assert_eq!(line["unit_price"], "0.0175");
        assert_eq!(line["amount"], "0.22");
        assert_eq!(inv["lines"][1]["kind"], "minimum");
        assert_eq!(inv["lines"][1]["meter"], serde_json::Value::Null);
        assert_eq!(inv["subtotal"], "0.50");
        assert_eq!(inv["total"], "0.50");
        assert_eq!(inv["period"]["from"], "2026-12-01T00:00:00Z");
        assert_eq!(inv["ledger_head"], serde_json::Value::Null);
    }

    /// The warning an invoice carries when the book's minimum does not apply to it.
    fn minimum_waived_warning(inv: &Invoice) -> Option<&str> {
        inv.warnings
            .iter()
            .find(|w| *w.code() == WarningCode::MinimumNotApplied)
            .map(|w| w.message())
    }

    /// An invoice with no usage line: nothing billed, no minimum line, and a warning that
    /// names the minimum and says why it does not apply.
    fn assert_minimum_waived(inv: &Invoice, minimum: &str) -> String {
        assert!(inv.lines.is_empty(), "{:?}", inv.lines);
        assert!(inv.lines.iter().all(|l| l.kind != LineKind::Minimum));
        assert_eq!(inv.subtotal, rust_decimal::Decimal::ZERO);
        assert_eq!(inv.total, rust_decimal::Decimal::ZERO);
        assert_sums(inv);
        let w = minimum_waived_warning(inv).unwrap_or_default().to_string();
        assert!(
            w.starts_with(&format!(
                "the invoice minimum of {minimum} USD does not apply: this invoice has no \
                 priced usage"
            )),
            "{:?}",
            inv.warnings
        );
        w
    }

    #[test]
    fn all_usage_unpriced_gets_no_minimum_and_says_why() {
        // Each way usage can be unpriced: a device no SKU matches, a device without a name,
        // a device the report does not list, and a window in which no rate is in force.
        let dated = book(
            "currency = \"USD\"\ninvoice_minimum = \"0.50\"",
            &format!(
                "{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\n\
                 unit_price = \"0.0175\"\nvalid_from = \"2026-12-02T00:00:00Z\"\n"
            ),
        );
        let cases: [(&str, UsageReport, &PriceBook); 4] = [
            (
                "no SKU matches",
                report(
                    3600,
                    vec![device("GPU-0", Some("NVIDIA B200"))],
                    vec![row(
                        "alice",
                        "GPU-0",
                        DEC1,
                        MeterKind::SmNs,
                        7 * HOUR_NS as u128,
                    )],
                ),
                &priced_book("0.50"),
            ),
            (
                "no name",
                report(
                    3600,
                    vec![device("GPU-0", None)],
                    vec![row("alice", "GPU-0", DEC1, MeterKind::SmNs, 7)],
                ),
                &priced_book("0.50"),
            ),
            (
                "not listed",
                report(
                    3600,
                    vec![],
                    vec![row("alice", "GPU-9", DEC1, MeterKind::SmNs, 7)],
                ),
                &priced_book("0.50"),
            ),
            (
                "no rate in force",
                one_row_report(MeterKind::SmNs, 125 * 360_000_000_000),
                &dated,
            ),
        ];
        for (what, u, b) in cases {
            let doc = rated(&u, b, None);
            assert_eq!(doc.invoices.len(), 1, "{what}");
            let inv = &doc.invoices[0];
            assert_eq!(inv.unpriced.len(), 1, "{what}: {:?}", inv.unpriced);
            let w = assert_minimum_waived(inv, "0.50");
            assert!(w.ends_with("; see unpriced"), "{what}: {w}");
            assert!(doc.verify_digests());
        }
    }

    #[test]
    fn usage_only_of_meters_the_book_does_not_rate_gets_no_minimum() {
        // kernel_launches and kernel_ns on a priced H100: the book rates neither.
        let u = report(
            3600,
            vec![device("GPU-0", Some("NVIDIA H100 80GB HBM3"))],
            vec![
                row("alice", "GPU-0", DEC1, MeterKind::KernelLaunches, 60),
                row("alice", "GPU-0", DEC1, MeterKind::KernelNs, 307_197),
            ],
        );
        let doc = rated(&u, &priced_book("0.50"), None);
        assert_eq!(doc.invoices.len(), 1);
        let inv = &doc.invoices[0];
        assert!(inv.unpriced.is_empty(), "{:?}", inv.unpriced);
        let w = assert_minimum_waived(inv, "0.50");
        assert!(!w.contains("see unpriced"), "{w}");
        assert!(
            w.contains("no rate for kernel_ns, kernel_launches")
                || w.contains("no rate for kernel_launches, kernel_ns"),
            "{w}"
        );
        // A book without a minimum has nothing to waive and says nothing about it.
        let no_minimum = book(
            "currency = \"USD\"",
            &format!("{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"1\"\n"),
        );
        let doc = rated(&u, &no_minimum, None);
        assert_eq!(minimum_waived_warning(&doc.invoices[0]), None);
        let doc = rated(&u, &priced_book("0"), None);
        assert_eq!(minimum_waived_warning(&doc.invoices[0]), None);
    }

    #[test]
    fn the_minimum_tops_up_the_priced_lines_only() {
        let rows = |sm_ns: u128| {
            report(
                3600,
                vec![
                    device("GPU-0", Some("NVIDIA H100 80GB HBM3")),
                    device("GPU-1", Some("NVIDIA B200")),
                ],
                vec![
                    row("alice", "GPU-0", DEC1, MeterKind::SmNs, sm_ns),
                    // Unpriced and large: it must not count toward the minimum.
                    row(
                        "alice",
                        "GPU-1",
                        DEC1,
                        MeterKind::SmNs,
                        1_000 * HOUR_NS as u128,
                    ),
                    // Not rated by the book: neither.
                    row("alice", "GPU-0", DEC1, MeterKind::KernelLaunches, 1_000_000),
                ],
            )
        };
        // 12.5 SM·hour × 0.0175 = 0.21875 → 0.22; the minimum tops the priced line up.
        let doc = rated(&rows(125 * 360_000_000_000), &priced_book("0.50"), None);
        let inv = &doc.invoices[0];
        assert_eq!(inv.unpriced.len(), 1);
        let usage_sum = inv
            .lines
            .iter()
            .filter(|l| l.kind == LineKind::Usage)
            .fold(rust_decimal::Decimal::ZERO, |a, l| a + l.amount);
        assert_eq!(usage_sum.to_string(), "0.22");
        let minimum: Vec<_> = inv
            .lines
            .iter()
            .filter(|l| l.kind == LineKind::Minimum)
            .collect();
        assert_eq!(minimum.len(), 1, "{:?}", inv.lines);
        assert_eq!(minimum[0].amount.to_string(), "0.28");
        assert_eq!(inv.subtotal.to_string(), "0.50");
        assert_eq!(minimum_waived_warning(inv), None, "{:?}", inv.warnings);
        assert_sums(inv);
        // A priced line of amount 0.00 (1 SM·ns) is priced usage: the top-up is the whole
        // minimum.
        let doc = rated(&rows(1), &priced_book("0.50"), None);
        let inv = &doc.invoices[0];
        assert_eq!(inv.lines.len(), 2, "{:?}", inv.lines);
        assert_eq!(inv.lines[0].amount.to_string(), "0.00");
        assert_eq!(inv.lines[1].kind, LineKind::Minimum);
        assert_eq!(inv.lines[1].amount.to_string(), "0.50");
        assert_eq!(inv.total.to_string(), "0.50");
        assert_eq!(minimum_waived_warning(inv), None, "{:?}", inv.warnings);
        assert_sums(inv);
    }

    #[test]
    fn a_last_window_past_2554_without_a_period_names_its_row() {
        // The last whole window a u64 of ns can start: it ends after u64::MAX.
        let last = u64::MAX / HOUR_NS * HOUR_NS;
        assert!(last.checked_add(HOUR_NS).is_none());
        let u = report(
            3600,
            vec![device("GPU-0", Some("NVIDIA H100"))],
            vec![
                row("alice", "GPU-0", DEC1, MeterKind::SmNs, 1),
                row("alice", "GPU-0", last, MeterKind::SmNs, 1),
            ],
        );
        let r = rate(&u, &priced_book("0"), None, &CarriedFragments::new());
        match &r {
            Err(gpumeter_rating::RatingError::Usage { field, value, .. }) => {
                assert_eq!(field, "usage[1].window_start");
                assert_eq!(*value, format!("\"{}\"", u.usage[1].window_start));
                assert!(value.contains("2554-"), "{value}");
            }
            other => panic!("expected a usage error naming the row: {other:?}"),
        }
        // An explicit period before that window rates the rest.
        let doc = rated(&u, &priced_book("0"), Some((DEC1, DEC1 + HOUR_NS)));
        assert_eq!(doc.invoices.len(), 1);
        assert_eq!(doc.invoices[0].lines[0].quantity, Some(Quantity(1)));
    }

    #[test]
    fn the_text_table_escapes_control_characters_of_its_inputs() {
        let name = "NVIDIA B200\u{1b}[2J\nfake row";
        let mut u = report(
            3600,
            vec![
                device("GPU-0", Some("NVIDIA H100\u{1b}[31m")),
                device("GPU-1", Some(name)),
            ],
            vec![
                row(
                    "al\u{202e}ice",
                    "GPU-0",
                    DEC1,
                    MeterKind::SmNs,
                    125 * 360_000_000_000,
                ),
                row("al\u{202e}ice", "GPU-1", DEC1, MeterKind::SmNs, 5),
            ],
        );
        u.warnings.push(gpumeter_core::Warning::new(
            gpumeter_core::WarningCode::RecordsLost,
            "a\rwarning\u{9b}2J",
        ));
        let b = book(
            "currency = \"USD\"\ninvoice_minimum = \"0.50\"",
            "[[sku]]\nid = \"h\\u001b]0;x\\u0007\"\nmatch = [\"NVIDIA H100*\"]\n\
             [[rate]]\nsku = \"h\\u001b]0;x\\u0007\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"0.0175\"\n",
        );
        let doc = rated(&u, &b, None);
        let text = doc.to_text_table();
        let raw: Vec<char> = text
            .chars()
            .filter(|&c| c != '\n' && gpumeter_core::text::is_escaped(c))
            .collect();
        assert!(raw.is_empty(), "raw {raw:?} in {text}");
        for shown in [
            "Invoice for tenant al\\u{202e}ice\n",
            "h\\u{1b}]0;x\\u{7}",
            "NVIDIA B200\\u{1b}[2J\\nfake row",
            "a\\rwarning\\u{9b}2J",
        ] {
            assert!(text.contains(shown), "{shown:?} not in {text}");
        }
        // No input newline starts a line of its own.
        assert!(!text.lines().any(|l| l.starts_with("fake row")), "{text}");
        // Widths are those of the escaped text: the amounts still end in one column.
        let amount_lines: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.starts_with("  h\\u{1b}")
                    || l.contains("minimum")
                    || l.contains("Subtotal")
                    || l.contains("Total")
            })
            .collect();
        assert_eq!(amount_lines.len(), 4, "{text}");
        let ends: Vec<usize> = amount_lines.iter().map(|l| l.chars().count()).collect();
        assert!(ends.windows(2).all(|w| w[0] == w[1]), "{text}");
    }

    #[test]
    fn text_table_reads_well() {
        let u = report(
            3600,
            vec![device("GPU-0", Some("NVIDIA H100")), device("GPU-1", None)],
            vec![
                row(
                    "alice",
                    "GPU-0",
                    DEC1,
                    MeterKind::SmNs,
                    125 * 360_000_000_000,
                ),
                row(
                    "alice",
                    "GPU-0",
                    DEC1,
                    MeterKind::MemcpyHtodBytes,
                    2_000_000_000,
                ),
                row("alice", "GPU-1", DEC1, MeterKind::SmNs, 5),
            ],
        );
        let doc = rated(&u, &priced_book("0.50"), None);
        let text = doc.to_text_table();
        assert!(text.starts_with("Invoice for tenant alice\n"), "{text}");
        assert!(
            text.contains("2026-12-01T00:00:00Z to 2026-12-01T01:00:00Z"),
            "{text}"
        );
        assert!(text.contains("12.500000000 SM·hour"), "{text}");
        assert!(text.contains("Subtotal"), "{text}");
        assert!(text.contains("Unpriced usage"), "{text}");
        assert!(text.contains("Warnings:"), "{text}");
        // Amounts are right-aligned: every amount ends in the same column.
        let amount_lines: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.contains("h100")
                    || l.contains("minimum")
                    || l.contains("Subtotal")
                    || l.contains("Total")
            })
            .collect();
        assert_eq!(amount_lines.len(), 5, "{text}");
        let ends: Vec<usize> = amount_lines.iter().map(|l| l.chars().count()).collect();
        assert!(ends.windows(2).all(|w| w[0] == w[1]), "{text}");
        println!("{text}");
    }

    /// `idle` (what the GPU measured while no tenant's kernel ran) is a report tenant, never
    /// invoiced (docs/BANK.md, issue 30 item 7): no invoice, no minimum, its usage summed per
    /// device and meter under the document's `extensions.idle` with an `idle_not_invoiced`
    /// warning. `unattributed` (a single-tenant preview without `--tenant`) and real tenants
    /// keep their invoices and the minimum, unchanged by the idle rows beside them. (Before
    /// issue 30, `idle` got an invoice without a minimum, which the bank then finalized.)
    #[test]
    fn idle_is_listed_apart_never_invoiced_and_leaves_the_other_invoices_as_they_were() {
        let b = book(
            "currency = \"USD\"\ninvoice_minimum = \"0.50\"",
            &format!(
                "{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"energy_mj\"\nunit = \"kWh\"\nunit_price = \"0.25\"\n"
            ),
        );
        let billed_rows = || {
            vec![
                // 1 J each: 0.25 USD/kWh × 1/3.6e6 kWh rounds to 0.00.
                row(
                    gpumeter_core::UNATTRIBUTED,
                    "GPU-0",
                    DEC1,
                    MeterKind::EnergyMj,
                    1_000,
                ),
                row("alice", "GPU-0", DEC1, MeterKind::EnergyMj, 1_000),
            ]
        };
        let mut rows = billed_rows();
        rows.push(row(
            gpumeter_core::IDLE,
            "GPU-0",
            DEC1,
            MeterKind::EnergyMj,
            1_000,
        ));
        rows.push(row(
            gpumeter_core::IDLE,
            "GPU-0",
            DEC1 + HOUR_NS,
            MeterKind::EnergyMj,
            2_500,
        ));
        rows.push(row(
            gpumeter_core::IDLE,
            "GPU-0",
            DEC1,
            MeterKind::SmActiveNs,
            7,
        ));
        let devices = || vec![device("GPU-0", Some("NVIDIA H100 80GB HBM3"))];
        let u = report(3600, devices(), rows);
        let doc = rated(&u, &b, Some((DEC1, DEC1 + 2 * HOUR_NS)));
        let tenants: Vec<&str> = doc.invoices.iter().map(|i| i.tenant.as_str()).collect();
        assert_eq!(tenants, ["alice", "unattributed"]);
        let idle = doc
            .extensions
            .idle
            .as_ref()
            .unwrap_or_else(|| panic!("{doc:?}"));
        assert_eq!(
            (idle.period.from.as_str(), idle.period.to.as_str()),
            ("2026-12-01T00:00:00Z", "2026-12-01T02:00:00Z")
        );
        let listed: Vec<(String, MeterKind, u128)> = idle
            .usage
            .iter()
            .map(|r| (r.device_key.clone(), r.meter, r.quantity.0))
            .collect();
        assert_eq!(
            listed,
            [
                ("GPU-0".to_string(), MeterKind::EnergyMj, 3_500),
                ("GPU-0".to_string(), MeterKind::SmActiveNs, 7),
            ]
        );
        assert_eq!(idle.usage[0].name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        let codes: Vec<&WarningCode> = idle.warnings.iter().map(|w| w.code()).collect();
        assert_eq!(codes, [&WarningCode::IdleNotInvoiced]);
        let w = idle.warnings[0].message();
        assert!(
            w.contains("`idle`")
                && w.contains("not invoiced")
                && w.contains("while no tenant's kernel ran")
                && w.contains("PM-sampled SM activity and DRAM bytes"),
            "{w}"
        );
        for t in ["unattributed", "alice"] {
            let inv = doc
                .invoices
                .iter()
                .find(|i| i.tenant == t)
                .unwrap_or_else(|| panic!("{t}"));
            let kinds: Vec<LineKind> = inv.lines.iter().map(|l| l.kind).collect();
            assert_eq!(kinds, [LineKind::Usage, LineKind::Minimum], "{t}");
            assert_eq!(inv.lines[1].amount.to_string(), "0.50", "{t}");
            assert_eq!(inv.total.to_string(), "0.50", "{t}");
            assert_eq!(minimum_waived_warning(inv), None, "{t}: {:?}", inv.warnings);
            assert_sums(inv);
        }
        assert!(doc.verify_digests());
        // The same report without its idle rows: the same invoices, and a document without
        // `extensions` (so documents without idle usage are byte-identical to before).
        let mut plain_report = report(3600, devices(), billed_rows());
        plain_report.sha256.clone_from(&u.sha256);
        let plain = rated(&plain_report, &b, Some((DEC1, DEC1 + 2 * HOUR_NS)));
        assert_eq!(plain.invoices, doc.invoices);
        let json = serde_json::to_value(&plain).unwrap_or_default();
        assert!(json.get("extensions").is_none(), "{json}");
        // A report of idle usage only: no invoice, the listing still there, and the text
        // rendering says both.
        let only = report(
            3600,
            devices(),
            vec![row(
                gpumeter_core::IDLE,
                "GPU-0",
                DEC1,
                MeterKind::EnergyMj,
                1_000,
            )],
        );
        let doc = rated(&only, &b, None);
        assert!(doc.invoices.is_empty(), "{doc:?}");
        assert_eq!(doc.extensions.idle.as_ref().map(|i| i.usage.len()), Some(1));
        let text = doc.to_text_table();
        assert!(
            text.contains("no invoices") && text.contains("Idle usage (not invoiced)"),
            "{text}"
        );
        assert!(text.contains("energy_mj 1000 mJ"), "{text}");
        // A carried-in fragment of `idle` (an older bank's) makes no invoice either.
        let carried: gpumeter_rating::CarriedFragments = [(
            gpumeter_rating::FragmentKey {
                tenant: gpumeter_core::IDLE.into(),
                sku: "h100".into(),
                meter: MeterKind::EnergyMj,
            },
            5u128,
        )]
        .into_iter()
        .collect();
        let doc =
            gpumeter_rating::rate(&only, &b, None, &carried).unwrap_or_else(|e| panic!("{e}"));
        assert!(doc.invoices.is_empty(), "{doc:?}");
    }

    /// The warning of an invoice about usage rows left outside its period.
    fn outside_warning(inv: &Invoice) -> Option<&str> {
        inv.warnings
            .iter()
            .find(|w| *w.code() == WarningCode::UsageOutsidePeriod)
            .map(|w| w.message())
    }

    /// An explicit period that leaves usage rows out says so on every invoice: how many rows,
    /// how many of them the invoice's tenant's, and the earliest and latest window start left
    /// out. Kernels at 08:59:59 and 09:00:01 rated for [08:00, 09:00) bill the first only.
    #[test]
    fn usage_outside_an_explicit_period_is_warned_on_every_invoice() {
        let t = |h: u64| DEC1 + h * HOUR_NS;
        let u = report(
            3600,
            vec![device("GPU-0", Some("NVIDIA H100"))],
            vec![
                // The kernel at 08:59:59 and the one at 09:00:01.
                row("alice", "GPU-0", t(8), MeterKind::SmNs, HOUR_NS as u128),
                row("alice", "GPU-0", t(9), MeterKind::SmNs, HOUR_NS as u128),
                row("alice", "GPU-0", t(9), MeterKind::KernelLaunches, 1),
                // bob's usage lies wholly outside: he gets no invoice of this period.
                row("bob", "GPU-0", t(7), MeterKind::SmNs, HOUR_NS as u128),
                row("carol", "GPU-0", t(8), MeterKind::SmNs, HOUR_NS as u128),
            ],
        );
        let doc = rated(&u, &priced_book("0"), Some((t(8), t(9))));
        let tenants: Vec<&str> = doc.invoices.iter().map(|i| i.tenant.as_str()).collect();
        assert_eq!(tenants, ["alice", "carol"]);
        for (inv, own) in doc.invoices.iter().zip([2, 0]) {
            assert_eq!(
                inv.lines[0].quantity,
                Some(Quantity(HOUR_NS as u128)),
                "half billed"
            );
            let w = outside_warning(inv).unwrap_or_default();
            assert_eq!(
                w,
                format!(
                    "usage outside the period: 3 usage rows of the usage report ({own} of them \
                     this tenant's), in windows starting 2026-12-01T07:00:00Z to \
                     2026-12-01T09:00:00Z, lie outside [2026-12-01T08:00:00Z, \
                     2026-12-01T09:00:00Z) and are on no invoice of this period"
                ),
                "{}: {:?}",
                inv.tenant,
                inv.warnings
            );
        }
        assert!(doc.verify_digests());
        // One window left out is named once.
        let doc = rated(&u, &priced_book("0"), Some((t(8), t(10))));
        let w = outside_warning(&doc.invoices[0])
            .unwrap_or_default()
            .to_string();
        assert!(
            w.starts_with("usage outside the period: 1 usage row of the usage report (0 of them this tenant's), in the window starting 2026-12-01T07:00:00Z, lies outside"),
            "{w}"
        );
        // The default period, or an explicit one that holds every row, leaves nothing out.
        for period in [None, Some((t(7), t(10))), Some((t(0), t(24)))] {
            let doc = rated(&u, &priced_book("0"), period);
            assert_eq!(doc.invoices.len(), 3, "{period:?}");
            for inv in &doc.invoices {
                assert_eq!(outside_warning(inv), None, "{period:?}: {:?}", inv.warnings);
            }
        }
    }
}

mod properties {
    use super::*;
    use gpumeter_rating::money::line_amount_minor_units;
    use gpumeter_rating::{Currency, PricingUnit, Rounding};
    use num_bigint::BigUint;
    use proptest::prelude::*;
    use rust_decimal::Decimal;

    fn unit_strategy() -> impl Strategy<Value = PricingUnit> {
        let all: Vec<PricingUnit> = PricingUnit::all().collect();
        (0..all.len()).prop_map(move |i| all[i])
    }

    fn currency_strategy() -> impl Strategy<Value = Currency> {
        prop_oneof![Just("JPY"), Just("USD"), Just("BHD"), Just("CLF")]
            .prop_map(|c| Currency::from_code(c).unwrap_or_else(|| panic!("{c}")))
    }

    fn price_strategy() -> impl Strategy<Value = Decimal> {
        (0u64..=u64::MAX, 0u32..=18)
            .prop_map(|(m, s)| Decimal::from_i128_with_scale(i128::from(m), s))
    }

    proptest! {
        /// |amount − exact| ≤ ½ minor unit for the half modes; up ≥ exact ≥ down; all within
        /// one minor unit; never a panic.
        #[test]
        fn amounts_are_within_half_a_minor_unit(
            q in prop_oneof![0u128..1_000_000_000_000_000u128, any::<u128>()],
            price in price_strategy(),
            unit in unit_strategy(),
            currency in currency_strategy(),
        ) {
            // exact × (10^s × num) = q × m × 10^c × den; compare scaled by the denominator.
            let m = BigUint::from(u128::try_from(price.mantissa()).unwrap_or(0));
            let num_exact = BigUint::from(q) * m * BigUint::from(10u32).pow(currency.scale())
                * BigUint::from(unit.factor_den());
            let den = BigUint::from(10u32).pow(price.scale()) * BigUint::from(unit.factor_num());
            let mut got = Vec::new();
            for mode in [Rounding::HalfEven, Rounding::HalfUp, Rounding::Up, Rounding::Down] {
                let a = line_amount_minor_units(q, price, &unit, &currency, mode);
                prop_assert!(a.is_some());
                let a = a.unwrap_or_default();
                let scaled = &a * &den;
                let diff = if scaled >= num_exact { &scaled - &num_exact } else { &num_exact - &scaled };
                match mode {
                    Rounding::HalfEven | Rounding::HalfUp => prop_assert!(&diff * 2u32 <= den),
                    Rounding::Up => prop_assert!(scaled >= num_exact && diff < den),
                    Rounding::Down => prop_assert!(scaled <= num_exact && diff < den),
                }
                // The Decimal form agrees whenever it exists.
                if let Some(d) = gpumeter_rating::line_amount(q, price, &unit, &currency, mode) {
                    prop_assert_eq!(d.scale(), currency.scale());
                    prop_assert_eq!(BigUint::from(u128::try_from(d.mantissa()).unwrap_or(0)), a.clone());
                }
                got.push(a);
            }
            prop_assert!(got[2] >= got[3]);
            prop_assert!(got[0] >= got[3] && got[0] <= got[2]);
            prop_assert!(got[1] >= got[3] && got[1] <= got[2]);
        }

        /// Whatever the usage, Σ lines == subtotal == total, exactly, and digests verify.
        #[test]
        fn lines_sum_to_subtotal(
            rows in proptest::collection::vec((0usize..3, 0usize..3, 0u64..4, 0usize..4, 0u128..10_000_000_000_000_000), 0..40),
            mode in prop_oneof![Just("half_even"), Just("half_up"), Just("up"), Just("down")],
            currency in prop_oneof![Just("JPY"), Just("USD"), Just("KWD")],
            minimum in prop_oneof![Just(""), Just("invoice_minimum = \"1\"")],
        ) {
            let tenants = ["alice", "bob", "carol"];
            let keys = ["GPU-0", "GPU-1", "GPU-2"];
            let meters = [MeterKind::SmNs, MeterKind::KernelLaunches, MeterKind::MemcpyHtodBytes, MeterKind::EnergyMj];
            let usage_rows = rows
                .iter()
                .map(|&(t, d, w, m, q)| row(tenants[t], keys[d], DEC1 + w * HOUR_NS, meters[m], q))
                .collect();
            let u = report(
                3600,
                vec![device("GPU-0", Some("NVIDIA H100")), device("GPU-1", Some("NVIDIA A100")), device("GPU-2", None)],
                usage_rows,
            );
            let b = book(
                &format!("currency = \"{currency}\"\nrounding = \"{mode}\"\n{minimum}"),
                r#"
[[sku]]
id = "h100"
match = ["NVIDIA H100*"]
[[sku]]
id = "a100"
match = ["NVIDIA A100*"]
[[rate]]
sku = "h100"
meter = "sm_ns"
unit = "SM·hour"
unit_price = "0.022651"
[[rate]]
sku = "a100"
meter = "sm_ns"
unit = "SM·s"
unit_price = "0.0000033179"
[[rate]]
sku = "h100"
meter = "kernel_launches"
unit = "1M"
unit_price = "0.333"
[[rate]]
sku = "a100"
meter = "memcpy_htod_bytes"
unit = "GiB"
unit_price = "0.0123"
[[rate]]
sku = "h100"
meter = "energy_mj"
unit = "kWh"
unit_price = "0.17"
"#,
            );
            let doc = rate(&u, &b, None, &CarriedFragments::new());
            prop_assert!(doc.is_ok(), "{:?}", doc);
            let doc = doc.unwrap_or_else(|_| InvoiceDocument::new(vec![]));
            prop_assert!(doc.verify_digests());
            for inv in &doc.invoices {
                let sum = inv.lines.iter().fold(Decimal::ZERO, |a, l| a + l.amount);
                prop_assert_eq!(sum, inv.subtotal);
                prop_assert_eq!(inv.total, inv.subtotal);
                for l in &inv.lines {
                    prop_assert_eq!(l.amount.scale(), Currency::from_code(currency).map_or(0, |c| c.scale()));
                }
            }
        }
    }
}

mod throughput {
    use super::*;

    /// Target (docs/PERFORMANCE.md, "Targets"): rating ≥ 1 M usage rows/s. A smoke measurement, not a benchmark:
    /// `cargo test --release -p gpumeter-rating -- --ignored --nocapture throughput`.
    #[test]
    #[ignore = "timing; run in release"]
    fn one_million_rows() {
        let devices: Vec<DeviceEntry> = (0..8)
            .map(|d| device(&format!("GPU-{d}"), Some("NVIDIA H100 80GB HBM3")))
            .collect();
        let meters = [
            MeterKind::SmNs,
            MeterKind::GpuBusyNs,
            MeterKind::KernelLaunches,
            MeterKind::MemcpyHtodBytes,
        ];
        let mut rows = Vec::with_capacity(1_000_000);
        'outer: for w in 0..1_000u64 {
            for d in 0..8 {
                for t in 0..32 {
                    for m in meters {
                        if rows.len() == 1_000_000 {
                            break 'outer;
                        }
                        rows.push(row(
                            &format!("tenant-{t:02}"),
                            &format!("GPU-{d}"),
                            DEC1 + w * HOUR_NS,
                            m,
                            1_000_000 + u128::from(w),
                        ));
                    }
                }
            }
        }
        let mut u = report(3600, devices, vec![]);
        u.usage = rows;
        let b = book(
            "currency = \"USD\"",
            &format!("{H100_SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"0.0175\"\n\
                      [[rate]]\nsku = \"h100\"\nmeter = \"memcpy_htod_bytes\"\nunit = \"GB\"\nunit_price = \"0.01\"\n"),
        );
        let start = std::time::Instant::now();
        let doc = rated(&u, &b, None);
        let secs = start.elapsed().as_secs_f64();
        println!(
            "rated {} rows into {} invoices in {secs:.3} s: {:.2} M rows/s",
            u.usage.len(),
            doc.invoices.len(),
            u.usage.len() as f64 / secs / 1e6
        );
        assert_eq!(doc.invoices.len(), 32);
    }
}

mod robustness {
    use super::*;
    use proptest::prelude::*;

    const VALID: &str = include_str!("../../../examples/pricebook.toml");

    proptest! {
        /// Arbitrary text never panics the parser.
        #[test]
        fn any_text_is_an_error_or_a_book(text in ".{0,400}") {
            let _ = PriceBook::from_toml_str("fuzz.toml", &text);
        }

        /// Dropping or duplicating lines of a valid book never panics, and whatever parses
        /// rates without panicking.
        #[test]
        fn mutated_books_never_panic(drop in proptest::collection::vec(any::<bool>(), 200), dup in 0usize..200) {
            let lines: Vec<&str> = VALID.lines().collect();
            let mut kept: Vec<&str> = lines.iter().zip(drop.iter().cycle()).filter(|(_, d)| !**d).map(|(l, _)| *l).collect();
            if let Some(l) = lines.get(dup) {
                kept.push(l);
            }
            let text = kept.join("\n");
            if let Ok(b) = PriceBook::from_toml_str("m.toml", &text) {
                let u = one_row_report(MeterKind::SmNs, 1_000_000);
                let _ = rate(&u, &b, None, &CarriedFragments::new());
            }
        }
    }
}

/// `prices check` validation (issue 10 item 2): every refusal names the table, the field and
/// the line and column of the offending key; a book with every feature passes.
mod book_check {
    use super::*;

    const HEAD: &str = "schema = \"gpumeter.pricebook/v1\"\nversion = \"t\"\n";
    const USD: &str = "currency = \"USD\"\n";
    const SKU: &str = "[[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n";
    const RATE: &str = "[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\n";
    const BAND: &str = "[[band]]\nname = \"b0\"\ntz = \"UTC\"\nhours = \"00:00-01:00\"\n";

    /// (book body after HEAD, table, field, a fragment of the reason). The line the error
    /// must point at ends with `# <-`.
    fn cases() -> Vec<(String, &'static str, &'static str, &'static str)> {
        let tiered = |model: &str, tiers: &str| {
            format!("{USD}{SKU}{RATE}model = \"{model}\"\ntiers = [{tiers}] # <-\n")
        };
        vec![
            // 1. unknown meters, units, currencies, time zones
            (format!("{USD}{SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_hours\" # <-\nunit = \"hour\"\nunit_price = \"1\"\n"), "rate[0]", "meter", "not a meter"),
            (format!("{USD}{SKU}[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·minute\" # <-\nunit_price = \"1\"\n"), "rate[0]", "unit", "not a pricing unit"),
            (format!("currency = \"XYZ\" # <-\n{SKU}"), "", "currency", "ISO 4217"),
            (format!("{USD}{SKU}[[band]]\nname = \"n\"\ntz = \"Mars/Olympus\" # <-\nhours = \"00:00-01:00\"\nmultiplier = \"1\"\n"), "band[0]", "tz", "IANA"),
            (format!("{USD}{SKU}{BAND}multiplier = \"1\"\nmeters = [\"sm_hours\"] # <-\n"), "band[0]", "meters", "not a meter"),
            (format!("{USD}{SKU}{BAND}multiplier = \"1\"\nskus = [\"b200\"] # <-\n"), "band[0]", "skus", "no [[sku]]"),
            // 2. negative prices
            (format!("{USD}{SKU}{RATE}unit_price = \"-1\" # <-\n"), "rate[0]", "unit_price", "negative"),
            (format!("{USD}{SKU}{RATE}model = \"graduated\"\n[[rate.tiers]]\nup_to = \"10\"\nunit_price = -2 # <-\n[[rate.tiers]]\nup_to = \"inf\"\nunit_price = \"1\"\n"), "rate[0].tiers[0]", "unit_price", "negative"),
            (format!("{USD}{SKU}{RATE}model = \"volume\"\n[[rate.tiers]]\nup_to = \"inf\"\nunit_price = \"1\"\nflat_fee = \"-1.00\" # <-\n"), "rate[0].tiers[0]", "flat_fee", "negative"),
            (format!("{USD}{SKU}{BAND}multiplier = \"-0.5\" # <-\n"), "band[0]", "multiplier", "negative"),
            // 3. tiers
            (tiered("graduated", "{ up_to = \"10\", unit_price = \"1\" }, { up_to = \"5\", unit_price = \"1\" }, { up_to = \"inf\", unit_price = \"1\" }"), "rate[0].tiers[1]", "up_to", "increasing"),
            (tiered("graduated", "{ up_to = \"10\", unit_price = \"1\" }, { up_to = \"10.0\", unit_price = \"1\" }, { up_to = \"inf\", unit_price = \"1\" }"), "rate[0].tiers[1]", "up_to", "overlaps tiers[0]"),
            (tiered("volume", "{ up_to = \"0\", unit_price = \"1\" }, { up_to = \"inf\", unit_price = \"1\" }"), "rate[0].tiers[0]", "up_to", "gap"),
            (tiered("graduated", "{ up_to = \"10\", unit_price = \"1\" }, { up_to = \"20\", unit_price = \"1\" }"), "rate[0].tiers[1]", "up_to", "must be unbounded"),
            (tiered("graduated", "{ up_to = \"inf\", unit_price = \"1\" }, { up_to = \"20\", unit_price = \"1\" }"), "rate[0].tiers[0]", "up_to", "only the last"),
            (tiered("graduated", "{ up_to = \"0.0000000000000001\", unit_price = \"1\" }, { up_to = \"inf\", unit_price = \"1\" }"), "rate[0].tiers[0]", "up_to", "whole number of SM·ns"),
            (tiered("graduated", "{ up_to = \"9999999999999999999999999999\", unit_price = \"1\" }, { up_to = \"inf\", unit_price = \"1\" }"), "rate[0].tiers[0]", "up_to", "2^128"),
            (format!("{USD}{SKU}{RATE}model = \"graduated\"\ntiers = [] # <-\n"), "rate[0]", "tiers", "at least one tier"),
            // 4. unit_price contradicting the first tier
            (format!("{USD}{SKU}{RATE}unit_price = \"0.02\" # <-\nmodel = \"graduated\"\ntiers = [{{ up_to = \"inf\", unit_price = \"0.0175\" }}]\n"), "rate[0]", "unit_price", "contradicts tiers[0]"),
            // 5. model and fields
            (format!("{USD}{SKU}{RATE}unit_price = \"1\"\nmodel = \"graduated\" # <-\n"), "rate[0]", "model", "needs tiers"),
            (format!("{USD}{SKU}{RATE}tiers = [{{ up_to = \"inf\", unit_price = \"1\", flat_fee = \"1.00\" }}] # <-\n"), "rate[0]", "tiers", "only for model"),
            (format!("{USD}{SKU}{RATE}unit_price = \"1\"\nmodel = \"package\" # <-\n"), "rate[0]", "model", "package_size"),
            (format!("{USD}{SKU}{RATE}model = \"package\"\npackage_size = \"10\"\ntiers = [{{ up_to = \"inf\", unit_price = \"1\" }}] # <-\n"), "rate[0]", "tiers", "per package"),
            (format!("{USD}{SKU}{RATE}unit_price = \"1\"\npackage_size = \"10\" # <-\n"), "rate[0]", "package_size", "only for model = \"package\""),
            (format!("{USD}{SKU}{RATE}unit_price = \"1\"\nmodel = \"package\"\npackage_size = \"0\" # <-\n"), "rate[0]", "package_size", "above 0"),
            (format!("{USD}{SKU}[[rate]]\nsku = \"h100\"\nmeter = \"memset_bytes\"\nunit = \"KiB\"\nunit_price = \"1\"\nmodel = \"package\"\npackage_size = \"0.0001\" # <-\n"), "rate[0]", "package_size", "whole number of B"),
            (format!("{USD}{SKU}{RATE}model = \"volume\"\ntiers = [{{ up_to = \"inf\", unit_price = \"1\", flat_fee = \"0.001\" }}] # <-\n"), "rate[0].tiers[0]", "flat_fee", "minor unit"),
            // 6. increments
            (format!("{USD}{SKU}[[rate]]\nsku = \"h100\"\nmeter = \"memset_bytes\"\nunit = \"KB\"\nunit_price = \"1\"\nincrement = \"0.0005\" # <-\n"), "rate[0]", "increment", "whole number of B"),
            (format!("{USD}{SKU}{RATE}unit_price = \"1\"\nincrement = \"0\" # <-\n"), "rate[0]", "increment", "above 0"),
            (format!("{USD}{SKU}{RATE}unit_price = \"1\"\nincrement = \"1\"\nvalid_to = \"2027-01-01T00:00:00Z\"\n[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·s\"\nunit_price = \"1\"\nincrement = \"60\" # <-\nvalid_from = \"2027-01-01T00:00:00Z\"\n"), "rate[1]", "increment", "same one"),
            // 7. bands
            (format!("{USD}{SKU}{BAND}multiplier = 0.5 # <-\n"), "band[0]", "multiplier", "float"),
            (format!("{USD}{SKU}{RATE}unit_price = \"1\"\n[[band]]\nname = \"night\"\ntz = \"Europe/Berlin\"\ndays = [\"mon\", \"tue\", \"wed\", \"thu\", \"fri\"]\nhours = \"22:00-06:00\"\nmultiplier = \"0.5\"\n[[band]]\nname = \"friday\"\ntz = \"Europe/Berlin\"\ndays = [\"fri\"]\nhours = \"05:00-07:00\" # <-\nmultiplier = \"0.8\"\n"), "band[1]", "hours", "Fri at 05:00"),
            (format!("{USD}{SKU}{RATE}unit_price = \"1\"\n{BAND}multiplier = \"0.5\"\n[[band]]\nname = \"tokyo\"\ntz = \"Asia/Tokyo\"\nhours = \"09:30-10:00\" # <-\nmultiplier = \"0.8\"\n"), "band[1]", "hours", "overlaps band[0]"),
            (format!("{USD}{SKU}{RATE}unit_price = \"1\"\n[[band]]\nname = \"ny\"\ntz = \"America/New_York\"\nhours = \"01:00-02:00\"\nmultiplier = \"0.5\"\n[[band]]\nname = \"chicago\"\ntz = \"America/Chicago\"\nhours = \"01:00-02:00\" # <-\nmultiplier = \"0.8\"\n"), "band[1]", "hours", "1970-10-25T06:00:00"),
            // 8. duplicate rates
            (format!("{USD}{SKU}{RATE}unit_price = \"1\"\nvalid_from = \"2026-12-01T00:00:00Z\"\n{RATE}unit_price = \"2\"\nvalid_from = \"2026-12-15T00:00:00Z\" # <-\n"), "rate[1]", "valid_from", "overlapping validity"),
            // 9. invoice minimum
            ("currency = \"USD\"\ninvoice_minimum = \"0.505\" # <-\n".to_string(), "", "invoice_minimum", "minor unit"),
            // 10. ambiguous SKUs
            (format!("{USD}{SKU}[[sku]]\nid = \"h100b\"\nmatch = [\"NVIDIA H100*\"] # <-\n"), "sku[1]", "match", "ambiguous"),
            // 11. exactness
            (format!("{USD}{SKU}{RATE}unit_price = \"0.0000000000000000000001\"\n{BAND}multiplier = \"0.0000001\" # <-\n"), "band[0]", "multiplier", "exactly"),
            (format!("{USD}{SKU}{RATE}model = \"graduated\"\ntiers = [{{ up_to = \"1\", unit_price = \"1\" }}, {{ up_to = \"inf\", unit_price = \"79228162514264337593543950\" }}]\n{BAND}multiplier = \"7922\" # <-\n"), "band[0]", "multiplier", "tiers[1].unit_price"),
            (format!("{USD}{SKU}{RATE}unit_price = \"0.00000000000000000000000000001\" # <-\n"), "rate[0]", "unit_price", "28"),
            // the rest: unknown keys, missing fields
            (format!("{USD}{SKU}{RATE}unit_prize = \"1\" # <-\n"), "rate[0]", "unit_prize", "unknown key"),
            (format!("{USD}{SKU}[[rate]] # <-\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit_price = \"1\"\n"), "rate[0]", "unit", "missing"),
        ]
    }

    fn refuse(text: &str) -> PriceBookError {
        match PriceBook::from_toml_str("t.toml", text) {
            Ok(_) => panic!("should be refused:\n{text}"),
            Err(e) => e,
        }
    }

    /// The text at `(line, column)` (1-based, column in characters).
    fn text_at(text: &str, line: usize, column: usize) -> String {
        let l = text.lines().nth(line - 1).unwrap_or("");
        l.chars().skip(column - 1).collect()
    }

    #[test]
    fn every_refusal_names_table_field_line_and_column_of_the_key() {
        for (body, table, field, fragment) in cases() {
            let text = format!("{HEAD}{body}");
            let err = refuse(&text);
            let msg = err.to_string();
            let want_line = text
                .lines()
                .position(|l| l.ends_with("# <-"))
                .map(|i| i + 1)
                .unwrap_or(0);
            let Some((line, column)) = err.location() else {
                panic!("no location: {msg}");
            };
            let (line, column) = (line as usize, column as usize);
            assert_eq!(line, want_line, "{msg}\n{text}");
            assert!(
                msg.starts_with(&format!("t.toml:{line}:{column}: ")),
                "{msg}"
            );
            assert!(msg.contains(fragment), "`{fragment}` not in: {msg}");
            let (t, f, key_written) = match &err {
                PriceBookError::Invalid {
                    table,
                    field,
                    value,
                    ..
                } => (table.clone(), field.to_string(), value != "(absent)"),
                PriceBookError::Missing { table, field, .. } => {
                    (table.clone(), field.to_string(), false)
                }
                PriceBookError::UnknownKey { table, key, .. } => (table.clone(), key.clone(), true),
                other => panic!("unexpected error kind: {other:?}"),
            };
            assert_eq!((t.as_str(), f.as_str()), (table, field), "{msg}");
            let here = text_at(&text, line, column);
            if key_written {
                // The column points at the key itself.
                assert!(
                    here.starts_with(field),
                    "`{here}` is not key `{field}`: {msg}"
                );
            } else {
                // A missing field: the table's header.
                assert!(here.starts_with("[["), "`{here}` is not a header: {msg}");
            }
            let named = match &err {
                PriceBookError::UnknownKey { .. } => format!("{table}: unknown key `{field}`"),
                _ if table.is_empty() => format!("{line}:{column}: {field} = "),
                _ => format!("{table}.{field}"),
            };
            assert!(msg.contains(&named), "`{named}` not in: {msg}");
        }
    }

    #[test]
    fn a_syntax_error_has_its_line_and_column() {
        let text = format!("{HEAD}{USD}{SKU}[[rate]]\nsku = h100\n");
        let err = refuse(&text);
        assert!(matches!(err, PriceBookError::Syntax { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.starts_with("t.toml:8:7: "), "{msg}");
    }

    /// Every feature of docs/ARCHITECTURE.md, "Rating in brief" at once (also used by the CLI tests of `prices check`).
    const FULL: &str = include_str!("data/pricebook_full.toml");

    #[test]
    fn a_book_with_every_feature_passes_with_canonical_values() {
        let b = match PriceBook::from_toml_str("full.toml", FULL) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        };
        let r = &b.rates()[0];
        assert_eq!(r.model, gpumeter_rating::RateModel::Graduated);
        assert_eq!(r.unit_price.to_string(), "0.01750");
        assert_eq!(r.increment_canonical, Some(3_600_000_000));
        let edges: Vec<Option<u128>> = r.tiers.iter().map(|t| t.up_to_canonical).collect();
        assert_eq!(
            edges,
            vec![
                Some(5000 * 3_600_000_000_000),
                Some(20000 * 3_600_000_000_000),
                None
            ]
        );
        assert_eq!(
            r.tiers
                .iter()
                .map(|t| t.flat_fee.map(|f| f.to_string()))
                .collect::<Vec<_>>(),
            vec![None, Some("1.00".into()), Some("2.50".into())]
        );
        // The price change: the same increment in another unit, and its tiers' edges.
        let r1 = &b.rates()[1];
        assert_eq!(r1.increment_canonical, Some(3_600_000_000));
        assert_eq!(r1.tiers[0].up_to_canonical, Some(5000 * 3_600_000_000_000));
        assert_eq!(r1.unit_price.to_string(), "0.000004");
        assert_eq!(r.valid_to, r1.valid_from);
        let pkg = &b.rates()[3];
        assert_eq!(pkg.package_size_canonical, Some(100_000_000_000));
        assert_eq!(pkg.increment_canonical, None);
        assert!(b.rates()[2].package_size_canonical.is_none());
        let off = &b.bands()[0];
        assert_eq!((off.start_minute, off.end_minute), (22 * 60, 6 * 60));
        assert!(off.holds_at(chrono::Weekday::Fri, 5 * 60 + 59));
        assert!(!off.holds_at(chrono::Weekday::Sat, 60));
        assert!(off.applies_to(r) && !off.applies_to(pkg));
        let summary = b.summary().join("\n");
        for want in [
            "rate[0] sm_ns: 0.01750 USD per SM·hour, graduated, increment 0.001 SM·hour (3600000000 SM·ns), valid [-∞, 2027-01-01T00:00:00Z)",
            "    tier[1] up to 20000 SM·hour (72000000000000000 SM·ns): 0.0150 USD per SM·hour, flat fee 1.00 USD",
            "    tier[2] up to inf: 0.0140 USD per SM·hour, flat fee 2.50 USD",
            "rate[3] memcpy_htod_bytes: 0.50 USD per package of 100 GB (100000000000 B), whole packages rounded up, package",
            "band[0] off-peak: America/New_York, mon tue wed thu fri, 22:00-06:00 (wraps midnight), multiplier 0.60, meters sm_ns, every sku",
            "band[2] tokyo-night: Asia/Tokyo, every day, 00:00-06:00, multiplier 0.9, meters gpu_busy_ns, skus h100",
        ] {
            assert!(summary.contains(want), "`{want}` not in:\n{summary}");
        }
    }

    #[test]
    fn bands_that_never_meet_pass() {
        // Same zone, adjacent; different zones, adjacent in UTC all year (no DST).
        let ok = [
            format!("{USD}{SKU}{RATE}unit_price = \"1\"\n{BAND}multiplier = \"0.5\"\n[[band]]\nname = \"b1\"\ntz = \"UTC\"\nhours = \"01:00-02:00\"\nmultiplier = \"0.8\"\n"),
            format!("{USD}{SKU}{RATE}unit_price = \"1\"\n{BAND}multiplier = \"0.5\"\n[[band]]\nname = \"b1\"\ntz = \"Asia/Tokyo\"\nhours = \"10:00-11:00\"\nmultiplier = \"0.8\"\n"),
            // Filters that share no rate.
            format!("{USD}{SKU}{RATE}unit_price = \"1\"\n{BAND}multiplier = \"0.5\"\nmeters = [\"sm_ns\"]\n[[band]]\nname = \"b1\"\ntz = \"UTC\"\nhours = \"00:00-01:00\"\nmultiplier = \"0.8\"\nmeters = [\"kernel_ns\"]\n"),
        ];
        for body in ok {
            let text = format!("{HEAD}{body}");
            if let Err(e) = PriceBook::from_toml_str("t.toml", &text) {
                panic!("{e}\n{text}");
            }
        }
    }

    #[test]
    fn the_catalog_check_warns_of_skus_no_device_matches() {
        let b = match PriceBook::from_toml_str("full.toml", FULL) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        };
        let warnings = b.check_catalog(&["NVIDIA H100 80GB HBM3", "NVIDIA L4"]);
        assert_eq!(
            warnings.map_err(|e| e.to_string()),
            Ok(vec![gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::SkuDeviceUnknown,
                "sku[1] `a100` (line 13): no device of the catalog matches it"
            )])
        );
        assert_eq!(
            b.check_catalog(&["NVIDIA A100-SXM4-80GB", "NVIDIA H100"])
                .map(|w| w.len())
                .ok(),
            Some(0)
        );
    }
}

/// The FLOP meters (issue 17): priced in `FLOP`, `GFLOP`, `TFLOP`, `PFLOP` (10³ steps from
/// 10⁹), only in those, and rated exactly: one division, one rounding per line.
mod flops {
    use super::*;
    use gpumeter_rating::PricingUnit;
    use num_bigint::BigUint;
    use proptest::prelude::*;

    const OP_METERS: [&str; 4] = ["flops_fp64", "flops_fp32", "flops_fp16", "tensor_ops"];
    const OP_UNITS: [(&str, u128); 4] = [
        ("FLOP", 1),
        ("GFLOP", 1_000_000_000),
        ("TFLOP", 1_000_000_000_000),
        ("PFLOP", 1_000_000_000_000_000),
    ];

    fn rate_body(meter: &str, unit: &str, price: &str) -> String {
        format!(
            "{H100_SKU}\n[[rate]]\nsku = \"h100\"\nmeter = \"{meter}\"\nunit = \"{unit}\"\nunit_price = \"{price}\"\n"
        )
    }

    #[test]
    fn flop_units_price_the_operation_meters_and_nothing_else() {
        for (unit, factor) in OP_UNITS {
            assert_eq!(
                PricingUnit::parse(unit).map(|u| (u.factor_num(), u.factor_den())),
                Some((factor, 1)),
                "{unit}"
            );
            for meter in OP_METERS {
                assert!(
                    book_with("currency = \"USD\"", &rate_body(meter, unit, "0.5")).is_ok(),
                    "{meter} in {unit}"
                );
            }
            // A count is not an operation, nor an operation a byte.
            let e = book_with(
                "currency = \"USD\"",
                &rate_body("kernel_launches", unit, "1"),
            );
            assert!(e.is_err(), "kernel_launches in {unit}");
        }
        for unit in ["1", "1M", "GB", "hour"] {
            let e = book_with("currency = \"USD\"", &rate_body("flops_fp32", unit, "1"));
            assert!(e.is_err(), "flops_fp32 in {unit}");
        }
        assert!(PricingUnit::parse("MFLOP").is_none());
        assert!(PricingUnit::parse("tflop").is_none());
        // 3.5 PFLOP of fp32 at 2.00 USD per PFLOP = 7.00; 1 TFLOP at that price = 0.002 → 0.00.
        let usd = "currency = \"USD\"";
        assert_eq!(
            one_line_amount(usd, "flops_fp32", "PFLOP", "2.00", 3_500_000_000_000_000),
            "7.00"
        );
        assert_eq!(
            one_line_amount(usd, "tensor_ops", "PFLOP", "2.00", 1_000_000_000_000),
            "0.00"
        );
        assert_eq!(
            one_line_amount(usd, "flops_fp64", "GFLOP", "0.000001", 7_000_000_000_000),
            "0.01"
        );
    }

    proptest! {
        /// Rating a FLOP meter's usage gives round_half_even(quantity × price ÷ factor) to the
        /// cent, computed here in exact integers.
        #[test]
        fn rating_a_flop_meter_is_exact(
            // Up to 10²⁰ operations at up to 10⁶ per unit: amounts a decimal holds.
            q in prop_oneof![0u128..1_000_000_000_000, 0u128..100_000_000_000_000_000_000],
            m in 0usize..4,
            u in 0usize..4,
            mantissa in 0u64..1_000_000,
            scale in 0u32..=9,
        ) {
            let price = rust_decimal::Decimal::from_i128_with_scale(i128::from(mantissa), scale);
            let (unit, factor) = OP_UNITS[u];
            let b = book("currency = \"USD\"", &rate_body(OP_METERS[m], unit, &price.to_string()));
            let meter = MeterKind::parse(OP_METERS[m]).expect("meter");
            let doc = rated(&one_row_report(meter, q), &b, None);
            let inv = &doc.invoices[0];
            assert_sums(inv);
            // cents = q × mantissa × 100 / (10^scale × factor), rounded half to even.
            let num = BigUint::from(q) * BigUint::from(mantissa) * BigUint::from(100u32);
            let den = BigUint::from(10u32).pow(scale) * BigUint::from(factor);
            let (quot, rem) = (&num / &den, &num % &den);
            let twice = &rem * 2u32;
            let up = twice > den || (twice == den && &quot % 2u32 == BigUint::from(1u32));
            let cents = if up { quot + 1u32 } else { quot };
            let amount: rust_decimal::Decimal = inv.lines.iter().map(|l| l.amount).sum();
            prop_assert_eq!(amount.scale(), 2);
            let got = BigUint::from(u128::try_from(amount.mantissa()).expect("non-negative"));
            prop_assert_eq!(got, cents);
        }
    }
}
