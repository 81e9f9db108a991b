//! Readable, aligned text renderings of usage reports and price-book checks.
//!
//! Every text that can come from an input (file, device, kernel and tenant names, loss
//! reasons, warnings, price-book text) is escaped with [`printable`] before it is placed, and
//! column widths are those of the escaped text.

use std::fmt::Write as _;

use gpumeter::core::text::printable;
use gpumeter::{DeviceCatalog, PriceBook, PriceBookError, UsageReport};

/// Input text, escaped ([`printable`]) and owned.
pub(crate) fn esc(s: &str) -> String {
    printable(s).into_owned()
}

/// Right- or left-aligned columns with a header row.
pub(crate) struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(cols: &[(&str, bool)]) -> Self {
        Table {
            header: cols.iter().map(|c| c.0.to_string()).collect(),
            right: cols.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; each cell is escaped ([`printable`]) here, so widths are computed on
    /// what is printed.
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.into_iter().map(|c| esc(&c)).collect());
    }

    pub(crate) fn render(&self, indent: &str) -> String {
        let n = self.header.len();
        let mut width = vec![0usize; n];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(n) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::from(indent);
            for (i, c) in r.iter().enumerate().take(n) {
                let pad = width[i] - c.chars().count();
                if i > 0 {
                    line.push_str("  ");
                }
                if self.right[i] {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    if i + 1 < n {
                        line.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `1234567` → `1,234,567`.
pub(crate) fn group(digits: &str) -> String {
    let b = digits.as_bytes();
    let mut out = String::with_capacity(b.len() + b.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (b.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// The usage report as text: sources, devices, totals per tenant/device/meter, loss, warnings.
pub(crate) fn usage_table(r: &UsageReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gpumeter usage report  (schema {}, metering policy {}, {} s windows)",
        esc(&r.schema),
        esc(&r.metering_policy),
        r.window_seconds
    );
    let _ = writeln!(out, "\nSources");
    let mut t = Table::new(&[("FILE", false), ("FORMAT", false), ("SHA-256", false)]);
    for s in &r.sources {
        t.row(vec![
            s.name.clone(),
            s.format.clone(),
            format!("{}…", short(&s.sha256)),
        ]);
    }
    out.push_str(&t.render("  "));
    if r.devices.is_empty() {
        let _ = writeln!(out, "\nDevices  none: the inputs name no device");
    } else {
        let _ = writeln!(out, "\nDevices");
    }
    let mut t = Table::new(&[
        ("DEVICE", true),
        ("KEY", false),
        ("NAME", false),
        ("SMs", true),
        ("CC", false),
        ("NOT METERABLE", false),
    ]);
    for d in &r.devices {
        t.row(vec![
            d.device.to_string(),
            d.device_key.clone(),
            d.name.clone().unwrap_or_else(|| "(unknown)".into()),
            d.sm_count.map_or_else(|| "?".into(), |n| n.to_string()),
            d.compute_capability.clone().unwrap_or_else(|| "?".into()),
            d.not_meterable
                .iter()
                .map(|m| m.meter.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    if !r.devices.is_empty() {
        out.push_str(&t.render("  "));
    }
    let skipped: Vec<String> = r
        .records
        .skipped
        .iter()
        .map(|(k, v)| format!("{} {v}", esc(k)))
        .collect();
    let _ = writeln!(
        out,
        "\nRecords  {} kernel, {} memcpy, {} memset metered; skipped (not work): {}",
        r.records.kernel,
        r.records.memcpy,
        r.records.memset,
        if skipped.is_empty() {
            "none".into()
        } else {
            skipped.join(", ")
        }
    );
    if r.totals.is_empty() {
        let _ = writeln!(
            out,
            "\nTotals  none: no usage was metered (no work record of the inputs fed a meter)"
        );
    } else {
        let _ = writeln!(out, "\nTotals");
    }
    let mut t = Table::new(&[
        ("TENANT", false),
        ("DEVICE", true),
        ("METER", false),
        ("QUANTITY", true),
        ("UNIT", false),
    ]);
    for row in &r.totals {
        t.row(vec![
            row.tenant.clone(),
            row.device.to_string(),
            row.meter.to_string(),
            group(&row.quantity.to_string()),
            row.meter.canonical_unit().to_string(),
        ]);
    }
    if !r.totals.is_empty() {
        out.push_str(&t.render("  "));
    }
    if !r.loss.is_empty() {
        let _ = writeln!(out, "\nLoss (records that fed no meter)");
        let mut t = Table::new(&[
            ("DEVICE", true),
            ("KEY", false),
            ("REASON", false),
            ("RECORDS", true),
        ]);
        for l in &r.loss {
            let n = group(&l.records.to_string());
            t.row(vec![
                l.device.map_or_else(|| "?".into(), |d| d.to_string()),
                l.device_key.clone(),
                l.reason.clone(),
                if l.lower_bound {
                    format!("at least {n}")
                } else {
                    n
                },
            ]);
        }
        out.push_str(&t.render("  "));
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings");
        for w in &r.warnings {
            let _ = writeln!(out, "  - {}", esc(w));
        }
    }
    let _ = write!(out, "\nsha256 {}", esc(&r.sha256));
    out
}

/// `prices check`: the price book's SKUs, rates (model, tiers, increment, package size,
/// validity) and bands, the SKU each catalog device maps to, and warnings about SKUs no
/// catalog device matches.
///
/// # Errors
/// [`PriceBookError`] when two SKUs match a catalog device equally well (see
/// [`PriceBook::check_catalog`]).
pub(crate) fn prices_check(
    book: &PriceBook,
    catalog: Option<&DeviceCatalog>,
) -> Result<String, PriceBookError> {
    let warnings = match catalog {
        Some(c) => {
            let names: Vec<&str> = c.devices.iter().filter_map(|d| d.name.as_deref()).collect();
            book.check_catalog(&names)?
        }
        None => Vec::new(),
    };
    let mut out = String::from("ok: the price book is valid\n\n");
    for line in book.summary() {
        out.push_str(&esc(&line));
        out.push('\n');
    }
    if let Some(c) = catalog {
        let _ = writeln!(out, "\nDevices of the catalog and the SKU that prices them");
        let mut t = Table::new(&[("ID", true), ("NAME", false), ("SKU", false)]);
        for d in &c.devices {
            let sku = match &d.name {
                None => "(unpriced: the catalog gives no name)".to_string(),
                Some(name) => match book.sku_for(name) {
                    Ok(Some(sku)) => sku.id.clone(),
                    Ok(None) => "(unpriced: no SKU matches)".to_string(),
                    Err(e) => format!("(error: {e})"),
                },
            };
            t.row(vec![
                d.id.to_string(),
                d.name.clone().unwrap_or_else(|| "(unknown)".into()),
                sku,
            ]);
        }
        out.push_str(&t.render("  "));
    }
    if !warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings");
        for w in &warnings {
            let _ = writeln!(out, "  - {}", esc(w));
        }
    }
    Ok(out.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping() {
        assert_eq!(group("1"), "1");
        assert_eq!(group("1234"), "1,234");
        assert_eq!(group("123456"), "123,456");
        assert_eq!(group("1234567"), "1,234,567");
    }

    #[test]
    fn alignment() {
        let mut t = Table::new(&[("A", false), ("N", true)]);
        t.row(vec!["long name".into(), "1".into()]);
        t.row(vec!["x".into(), "1,000".into()]);
        let s = t.render("");
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[1], "long name      1");
        assert_eq!(lines[2], "x          1,000");
    }
}
