//! The renderings: the text table with bands, tiers, flat fees and carried fragments; CSV
//! (RFC 4180, formula injection); HTML (escaping, self-containment, the utilization chart).

use super::*;
use gpumeter_rating::render::{
    bar_height, csv_text_cell, invoice_csv, invoice_html, utilization, Share, CSV_COLUMNS,
    MAX_CHART_BARS,
};
use gpumeter_rating::Line;
use rust_decimal::Decimal;

const PRICED: &str = "[[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n\
    [[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"0.0175\"\n\
    [[rate]]\nsku = \"h100\"\nmeter = \"gpu_busy_ns\"\nunit = \"hour\"\nunit_price = \"0.10\"\n";

fn dec(s: &str) -> Decimal {
    match s.parse() {
        Ok(d) => d,
        Err(e) => panic!("{s}: {e}"),
    }
}

/// Two devices, two tenants; GPU-0 is 50 % busy in the first window (alice and bob a quarter
/// each) with a quarter of its SM·time held, and idle in the second; GPU-1 is busy the whole
/// second window.
fn two_device_report(tenant_a: &str, tenant_b: &str) -> UsageReport {
    let half = u128::from(HOUR_NS / 2);
    let quarter = u128::from(HOUR_NS / 4);
    report(
        3600,
        vec![
            device("GPU-0", Some("NVIDIA H100 80GB HBM3")),
            device("GPU-1", Some("NVIDIA H100 80GB HBM3")),
        ],
        vec![
            row(tenant_a, "GPU-0", DEC1, MeterKind::GpuBusyNs, quarter),
            row(
                tenant_b,
                "GPU-0",
                DEC1,
                MeterKind::GpuBusyNs,
                half - quarter,
            ),
            row(tenant_a, "GPU-0", DEC1, MeterKind::SmNs, 132 * quarter),
            row(
                tenant_b,
                "GPU-1",
                DEC1 + HOUR_NS,
                MeterKind::GpuBusyNs,
                u128::from(HOUR_NS),
            ),
            row(
                tenant_b,
                "GPU-1",
                DEC1 + HOUR_NS,
                MeterKind::SmNs,
                132 * u128::from(HOUR_NS),
            ),
        ],
    )
}

fn two_device_doc(tenant_a: &str, tenant_b: &str) -> (InvoiceDocument, UsageReport) {
    let u = two_device_report(tenant_a, tenant_b);
    let doc = rated(
        &u,
        &book("currency = \"USD\"\ninvoice_minimum = \"5.00\"", PRICED),
        None,
    );
    (doc, u)
}

/// A line of `kind` on h100 with band, tier and quantities given (amount as text).
fn line(
    kind: LineKind,
    meter: MeterKind,
    band: Option<&str>,
    tier: Option<&str>,
    amount: &str,
) -> Line {
    let usage = kind == LineKind::Usage;
    Line {
        kind,
        sku: Some("h100".into()),
        meter: Some(meter),
        band: band.map(str::to_string),
        tier: tier.map(str::to_string),
        quantity: usage.then_some(Quantity(1000)),
        unit: usage.then(|| meter.canonical_unit().to_string()),
        pricing_unit: usage.then(|| "SM·hour".to_string()),
        quantity_in_pricing_unit: usage.then(|| "0.000000000".to_string()),
        billable_quantity: usage.then_some(Quantity(1000)),
        fragment_carried: usage.then_some(Quantity(0)),
        unit_price: Some(dec("0.0175")),
        amount: dec(amount),
        extensions: Default::default(),
    }
}

/// An invoice with tiered, banded lines, a flat fee, a carried fragment and a minimum (built by
/// hand: the rendering does not depend on which rating produced them).
fn tiered_doc() -> InvoiceDocument {
    let (doc, _) = two_device_doc("alice", "bob");
    let mut inv = doc.invoices[0].clone();
    let mut carried = line(
        LineKind::Usage,
        MeterKind::SmNs,
        Some("peak"),
        Some("2: 5000–inf"),
        "3.10",
    );
    carried.billable_quantity = Some(Quantity(993));
    carried.fragment_carried = Some(Quantity(7));
    inv.lines = vec![
        line(
            LineKind::Usage,
            MeterKind::SmNs,
            Some("peak"),
            Some("1: 0–5000"),
            "87.50",
        ),
        line(LineKind::Usage, MeterKind::GpuBusyNs, None, None, "0.20"),
        carried,
        line(
            LineKind::FlatFee,
            MeterKind::SmNs,
            None,
            Some("2: 5000–inf"),
            "1.00",
        ),
        Line::minimum(dec("0.00")),
    ];
    inv.subtotal = inv.lines.iter().map(|l| l.amount).sum();
    inv.total = inv.subtotal;
    if let Err(e) = inv.seal() {
        panic!("seal: {e}");
    }
    InvoiceDocument::new(vec![inv])
}

mod text_table {
    use super::*;

    #[test]
    fn groups_by_sku_and_meter_and_shows_band_tier_flat_fee_and_fragment() {
        let text = tiered_doc().to_text_table();
        let header = text
            .lines()
            .find(|l| l.trim_start().starts_with("SKU"))
            .unwrap_or_default();
        for col in [
            "Meter",
            "Band",
            "Tier",
            "Quantity",
            "Unit price",
            "Amount USD",
        ] {
            assert!(header.contains(col), "{col} not in {header:?}\n{text}");
        }
        // The three sm_ns lines sit together under one `sm_ns` label, before gpu_busy_ns.
        assert_eq!(text.matches("sm_ns").count(), 1, "{text}");
        let pos = |s: &str| text.find(s).unwrap_or(usize::MAX);
        assert!(
            pos("87.50") < pos("3.10") && pos("3.10") < pos("1.00"),
            "{text}"
        );
        assert!(pos("1.00") < pos("gpu_busy_ns"), "{text}");
        // Band and tier read on each row.
        let row_of = |amount: &str| {
            text.lines()
                .find(|l| l.trim_end().ends_with(amount))
                .unwrap_or_default()
                .to_string()
        };
        assert!(row_of("87.50").contains("peak") && row_of("87.50").contains("1: 0–5000"));
        assert!(row_of("3.10").contains("peak") && row_of("3.10").contains("2: 5000–inf"));
        let fee = row_of(" 1.00");
        assert!(
            fee.contains("flat fee") && fee.contains("2: 5000–inf"),
            "{fee:?}"
        );
        assert!(!fee.contains("peak"), "{fee:?}");
        assert!(
            text.contains("↳ carried to the next period: 7 SM·ns; billed 993 SM·ns of 1000 SM·ns"),
            "{text}"
        );
        // Only the line with a fragment gets a note.
        assert_eq!(
            text.matches("carried to the next period").count(),
            1,
            "{text}"
        );
        assert!(
            text.contains("minimum  (top-up to the invoice minimum)"),
            "{text}"
        );
        // Amounts end in one column.
        let ends: Vec<usize> = ["87.50", "0.20", "3.10", " 1.00", "Subtotal", "Total"]
            .iter()
            .map(|a| {
                row_of(if a.starts_with('S') || a.starts_with('T') {
                    ""
                } else {
                    a
                })
            })
            .zip(["87.50", "0.20", "3.10", " 1.00", "", ""])
            .filter(|(_, a)| !a.is_empty())
            .map(|(l, _)| l.chars().count())
            .collect();
        assert!(ends.windows(2).all(|w| w[0] == w[1]), "{ends:?}\n{text}");
    }

    #[test]
    fn without_bands_or_tiers_there_are_no_such_columns() {
        let (doc, _) = two_device_doc("alice", "bob");
        let text = doc.to_text_table();
        assert!(!text.contains("Band") && !text.contains("Tier"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("  h100 ") && l.contains(" sm_ns ")),
            "{text}"
        );
    }
}

mod csv_rows {
    use super::*;

    fn read(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
        let mut r = csv::ReaderBuilder::new().from_reader(text.as_bytes());
        let header = match r.headers() {
            Ok(h) => h.iter().map(str::to_string).collect(),
            Err(e) => panic!("header: {e}"),
        };
        let rows = r
            .records()
            .map(|rec| match rec {
                Ok(rec) => rec.iter().map(str::to_string).collect(),
                Err(e) => panic!("record: {e}"),
            })
            .collect();
        (header, rows)
    }

    fn csv_of(doc: &InvoiceDocument) -> String {
        match invoice_csv(doc) {
            Ok(s) => s,
            Err(e) => panic!("csv: {e}"),
        }
    }

    #[test]
    fn round_trips_one_row_per_line_with_rfc4180_quoting() {
        let tricky = "acme, \"labs\"\nsecond line";
        let (doc, _) = two_device_doc(tricky, "bob");
        let text = csv_of(&doc);
        // RFC 4180: CRLF record ends, the field quoted and its quotes doubled.
        assert!(text.ends_with("\r\n"), "{text:?}");
        assert!(
            text.contains("\"acme, \"\"labs\"\"\nsecond line\""),
            "{text:?}"
        );
        let (header, rows) = read(&text);
        assert_eq!(header, CSV_COLUMNS.to_vec());
        let lines: Vec<(&Invoice, &Line)> = doc
            .invoices
            .iter()
            .flat_map(|i| i.lines.iter().map(move |l| (i, l)))
            .collect();
        assert!(lines.len() >= 4, "{lines:?}");
        assert_eq!(rows.len(), lines.len());
        let col = |name: &str| CSV_COLUMNS.iter().position(|c| *c == name).unwrap_or(99);
        for (row, (inv, l)) in rows.iter().zip(&lines) {
            assert_eq!(row.len(), CSV_COLUMNS.len());
            assert_eq!(row[col("tenant")], inv.tenant);
            assert_eq!(dec(&row[col("amount")]), l.amount);
            assert_eq!(row[col("invoice_sha256")], inv.sha256);
            assert_eq!(row[col("period_from")], inv.period.from);
            let q = l.quantity.map(|q| q.to_string()).unwrap_or_default();
            assert_eq!(row[col("quantity")], q);
        }
        // Σ amount per invoice = subtotal.
        for inv in &doc.invoices {
            let sum: Decimal = rows
                .iter()
                .filter(|r| r[col("invoice_sha256")] == inv.sha256)
                .map(|r| dec(&r[col("amount")]))
                .sum();
            assert_eq!(sum, inv.subtotal, "{}", inv.tenant);
        }
        // The minimum line: kind set, the rest empty.
        let min = rows.iter().find(|r| r[col("kind")] == "minimum");
        let Some(min) = min else {
            panic!("no minimum row: {rows:?}")
        };
        assert_eq!(min[col("sku")], "");
        assert_eq!(min[col("unit_price")], "");
    }

    #[test]
    fn cells_from_input_text_cannot_be_formulas() {
        for (tenant, shown) in [
            ("=HYPERLINK(\"x\")", "'=HYPERLINK(\"x\")"),
            ("+1", "'+1"),
            ("-2+3", "'-2+3"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("plain", "plain"),
            ("a=b", "a=b"),
        ] {
            assert_eq!(csv_text_cell(tenant), shown);
            let (doc, _) = two_device_doc(tenant, "bob");
            let (_, rows) = read(&csv_of(&doc));
            let tenants: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
            assert!(tenants.contains(&shown), "{tenant:?}: {tenants:?}");
            assert!(!tenants.contains(&tenant) || tenant == shown, "{tenants:?}");
        }
        // Band and tier labels and SKU ids are guarded too; numbers are not touched.
        let mut doc = tiered_doc();
        doc.invoices[0].lines[0].band = Some("=cmd|' /C calc'!A0".into());
        doc.invoices[0].lines[0].tier = Some("-1".into());
        let (_, rows) = read(&csv_of(&doc));
        assert_eq!(rows[0][7], "'=cmd|' /C calc'!A0");
        assert_eq!(rows[0][8], "'-1");
        let amount = CSV_COLUMNS.iter().position(|c| *c == "amount");
        assert_eq!(amount.map(|i| rows[0][i].as_str()), Some("87.50"));
    }

    #[test]
    fn flat_fee_and_fragment_columns() {
        let (_, rows) = read(&csv_of(&tiered_doc()));
        let kinds: Vec<&str> = rows.iter().map(|r| r[4].as_str()).collect();
        assert_eq!(kinds, ["usage", "usage", "usage", "flat_fee", "minimum"]);
        assert_eq!(rows[2][13], "993");
        assert_eq!(rows[2][14], "7");
        assert_eq!(rows[3][9], "", "a flat fee has no quantity");
    }

    #[test]
    fn empty_document_is_the_header() {
        let text = csv_of(&InvoiceDocument::new(vec![]));
        assert_eq!(text, format!("{}\r\n", CSV_COLUMNS.join(",")));
    }
}

mod html {
    use super::*;

    #[test]
    fn escapes_input_text_and_is_self_contained() {
        let evil = "<script>alert('x')</script> & \"co\"";
        let (doc, u) = two_device_doc(evil, "<img src=x onerror=alert(1)>");
        let page = invoice_html(&doc, &u);
        let lower = page.to_lowercase();
        for banned in ["<script", "http://", "https://", "<img", "url(", "@import"] {
            assert!(!lower.contains(banned), "{banned} in the page:\n{page}");
        }
        // No tag has a `src=` or `href=` attribute (the escaped tenant shows `src=` as text).
        for tag in lower.split('<').skip(1).filter_map(|t| t.split('>').next()) {
            assert!(!tag.contains("src=") && !tag.contains("href="), "<{tag}>");
        }
        assert!(
            page.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{page}"
        );
        assert!(
            page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;co&quot;"),
            "{page}"
        );
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.ends_with("</html>\n"));
    }

    #[test]
    fn shows_every_line_amount_totals_and_one_chart_per_device() {
        let (doc, u) = two_device_doc("alice", "bob");
        let page = invoice_html(&doc, &u);
        for inv in &doc.invoices {
            assert!(page.contains(&format!("<h2>Tenant {}</h2>", inv.tenant)));
            for l in &inv.lines {
                assert!(
                    page.contains(&format!("<td class=\"n\">{}</td></tr>", l.amount)),
                    "{} not in the page",
                    l.amount
                );
            }
            assert!(page.contains(&format!("<td class=\"n\">{}</td></tr>", inv.total)));
            assert!(page.contains(&inv.sha256));
        }
        // No line has a band or tier: no such columns.
        assert!(!page.contains("<th>Band</th>") && !page.contains("<th>Tier</th>"));
        assert_eq!(page.matches("<svg").count(), u.devices.len());
        assert_eq!(
            page.matches("data-series=\"busy\"").count(),
            u.devices.len()
        );
        assert_eq!(page.matches("data-series=\"sm\"").count(), u.devices.len());
        for d in &u.devices {
            assert!(page.contains(&format!("<figcaption>{} (", d.device_key)));
        }
        assert!(page.contains("window start (UTC)") && page.contains(">100 %<"));
        assert!(
            page.contains(">12-01 00:00<") && page.contains(">12-01 01:00<"),
            "{page}"
        );
        assert!(page.contains("Per device and 1 h window (UTC)"), "{page}");
        // GPU-0's first window at 50.0 % busy, 25.0 % SM; GPU-1's second at 100.0 %.
        assert!(page.contains("GPU busy 50.0 %"), "{page}");
        assert!(page.contains("SMs held 25.0 %"), "{page}");
        assert!(page.contains("GPU busy 100.0 %"), "{page}");
    }

    #[test]
    fn tiered_lines_show_band_tier_flat_fee_and_fragment() {
        let doc = tiered_doc();
        let page = invoice_html(&doc, &two_device_report("alice", "bob"));
        assert!(page.contains("<th>Band</th><th>Tier</th>"), "{page}");
        assert!(page.contains("<td>peak</td><td>1: 0–5000</td>"), "{page}");
        // The flat fee has a tier and no band: an empty band cell keeps the columns aligned.
        assert!(page.contains("<td></td><td>2: 5000–inf</td><td class=\"n\">flat fee</td>"));
        assert!(page.contains("<td class=\"n\">flat fee</td>"), "{page}");
        assert!(page.contains("carried to the next period: 7 SM·ns; billed 993 SM·ns"));
    }

    #[test]
    fn a_half_busy_window_is_drawn_at_half_height() {
        let u = two_device_report("alice", "bob");
        let devices = utilization(&u, Some((DEC1, DEC1 + 2 * HOUR_NS)));
        assert_eq!(devices.len(), 2);
        let gpu0 = &devices[0];
        assert_eq!(gpu0.device_key, "GPU-0");
        assert_eq!(gpu0.windows.len(), 2);
        let w = &gpu0.windows[0];
        assert_eq!(w.start_ns, DEC1);
        // alice's and bob's quarters add up to half of the window.
        assert_eq!(w.busy.per_mille(), 500);
        assert_eq!(w.busy.percent_text(), "50.0 %");
        assert_eq!(bar_height(w.busy, 200.0), 100.0);
        let Some(sm) = w.sm else {
            panic!("H100 has an SM count")
        };
        assert_eq!(sm.per_mille(), 250);
        assert_eq!(bar_height(sm, 200.0), 50.0);
        assert_eq!(gpu0.windows[1].busy.per_mille(), 0);
        assert_eq!(devices[1].windows[0].busy.per_mille(), 0);
        assert_eq!(devices[1].windows[1].busy.per_mille(), 1000);
        assert_eq!(bar_height(devices[1].windows[1].busy, 200.0), 200.0);
    }

    #[test]
    fn an_unknown_sm_count_draws_no_sm_series() {
        let mut u = two_device_report("alice", "bob");
        u.devices[0].sm_count = None;
        let devices = utilization(&u, None);
        assert!(devices[0].windows.iter().all(|w| w.sm.is_none()));
        assert!(devices[1].windows.iter().all(|w| w.sm.is_some()));
        let (doc, _) = two_device_doc("alice", "bob");
        let page = invoice_html(&doc, &u);
        assert_eq!(page.matches("data-series=\"sm\"").count(), 1);
        assert!(page.contains("SM count unknown"));
    }

    #[test]
    fn long_periods_are_drawn_in_buckets_of_whole_windows() {
        // 1000 one-minute windows; the device busy 30 s in each.
        let rows: Vec<UsageRow> = (0..1000u64)
            .map(|i| {
                row(
                    "alice",
                    "GPU-0",
                    DEC1 + i * 60_000_000_000,
                    MeterKind::GpuBusyNs,
                    30_000_000_000,
                )
            })
            .collect();
        let u = report(60, vec![device("GPU-0", None)], rows);
        let d = &utilization(&u, None)[0];
        assert!(d.windows.len() <= MAX_CHART_BARS, "{}", d.windows.len());
        assert_eq!(
            d.windows.len(),
            1000usize.div_ceil(1000usize.div_ceil(MAX_CHART_BARS))
        );
        assert!(
            d.windows.iter().all(|w| w.busy.per_mille() == 500),
            "{:?}",
            d.windows
        );
        let covered: u128 = d.windows.iter().map(|w| w.length_ns).sum();
        assert_eq!(covered, 1000 * 60_000_000_000);
    }

    #[test]
    fn byte_stable() {
        let (doc, u) = two_device_doc("alice", "bob");
        let a = invoice_html(&doc, &u);
        let b = invoice_html(&doc.clone(), &u.clone());
        assert_eq!(a, b);
        let (doc2, u2) = two_device_doc("alice", "bob");
        assert_eq!(a, invoice_html(&doc2, &u2));
        let c1 = invoice_csv(&doc).map_err(|e| e.to_string());
        let c2 = invoice_csv(&doc2).map_err(|e| e.to_string());
        assert_eq!(c1, c2);
    }

    #[test]
    fn share_rounding_is_exact() {
        let s = |part, whole| Share { part, whole };
        assert_eq!(s(1, 2).per_mille(), 500);
        assert_eq!(s(1, 3).percent_text(), "33.3 %");
        assert_eq!(s(2, 3).percent_text(), "66.7 %");
        assert_eq!(s(1, 2000).per_mille(), 1); // 0.05 % rounds half up
        assert_eq!(s(u128::MAX, 1).fraction(), 1.0);
        assert_eq!(s(0, 7).fraction(), 0.0);
    }
}
