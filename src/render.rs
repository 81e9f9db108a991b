//! Text for people: the usage report and invoices as the `gpumeter` command line prints them,
//! and the CSV and HTML renderings of invoices ([`invoice_csv`], [`invoice_html`]).
//!
//! Every text that can come from an input (file, device, kernel and tenant names, loss
//! reasons, warnings, price-book text) is escaped with [`esc`] before it is placed, and column
//! widths are those of the escaped text, so a device name such as `"\u{1b}[2J"` or a newline
//! in a tenant name never reaches a terminal raw nor breaks a table's alignment.
//!
//! ```
//! use gpumeter::render::{usage_text, UsageTextOptions};
//! # let report: gpumeter::UsageReport = serde_json::from_str(r#"{"schema":"gpumeter.usage/v1",
//! # "metering_policy":"v1","window_seconds":3600,"sources":[],"devices":[],
//! # "records":{"kernel":0,"memcpy":0,"memset":0,"skipped":{}},"loss":[],"usage":[],
//! # "totals":[],"open_allocations":[],"warnings":[],"sha256":"0"}"#)?;
//! let text = usage_text(&report, &UsageTextOptions::default());
//! assert!(text.starts_with("gpumeter usage report  (schema gpumeter.usage/v1"));
//! assert!(text.contains("Totals  none: no usage was metered"));
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::fmt::Write as _;

use gpumeter_core::text::printable;
use gpumeter_core::{MeterKind, UsageReport};
pub use gpumeter_rating::render::{invoice_csv, invoice_html, RenderError};
use gpumeter_rating::InvoiceDocument;

/// Input text escaped for a terminal ([`gpumeter_core::text::printable`]: control characters,
/// bidirectional overrides and line separators as `\u{…}`-style escapes) and owned.
///
/// ```
/// assert_eq!(gpumeter::render::esc("GPU\u{1b}[2J\n"), "GPU\\u{1b}[2J\\n");
/// assert_eq!(gpumeter::render::esc("Zoë"), "Zoë");
/// ```
pub fn esc(s: &str) -> String {
    printable(s).into_owned()
}

/// An aligned text table: a header row and rows of cells, each column left- or
/// right-aligned, two spaces between columns, trailing spaces trimmed. Cells are escaped
/// ([`esc`]) when added, so widths are those of what is printed.
///
/// ```
/// use gpumeter::render::Table;
/// let mut t = Table::new(&[("NAME", false), ("N", true)]);
/// t.row(vec!["long name".into(), "1".into()]);
/// t.row(vec!["x".into(), "1,000".into()]);
/// assert_eq!(t.render("  "), "  NAME           N\n  long name      1\n  x          1,000\n");
/// ```
#[derive(Debug, Clone)]
pub struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with the given columns: (header, right-aligned).
    pub fn new(cols: &[(&str, bool)]) -> Self {
        Table {
            header: cols.iter().map(|c| c.0.to_string()).collect(),
            right: cols.iter().map(|c| c.1).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; each cell is escaped ([`esc`]) here. Cells beyond the header's count are
    /// not shown.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.into_iter().map(|c| esc(&c)).collect());
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The header and rows, one line each (each ending with a newline), every line starting
    /// with `indent`; widths in characters.
    pub fn render(&self, indent: &str) -> String {
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

/// Decimal digits grouped by thousands with commas: `"1234567"` → `"1,234,567"`; a leading
/// `-` or `+` stays in front (`"-123456"` → `"-123,456"`). Text that is not an integer of
/// ASCII digits (a decimal point, other characters, nothing) is returned unchanged.
///
/// ```
/// assert_eq!(gpumeter::render::group_digits("1234567"), "1,234,567");
/// assert_eq!(gpumeter::render::group_digits("123"), "123");
/// assert_eq!(gpumeter::render::group_digits("-123"), "-123");
/// assert_eq!(gpumeter::render::group_digits("12.5"), "12.5");
/// ```
pub fn group_digits(digits: &str) -> String {
    let (sign, body) = match digits.strip_prefix(['-', '+']) {
        Some(rest) => digits.split_at(digits.len() - rest.len()),
        None => ("", digits),
    };
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
        return digits.to_string();
    }
    let n = body.len();
    let mut out = String::with_capacity(digits.len() + n / 3);
    out.push_str(sign);
    for (i, ch) in body.chars().enumerate() {
        if i > 0 && (n - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// What [`usage_text`] shows besides its fixed sections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UsageTextOptions {
    /// Also show the usage per window (`gpumeter usage --by-window`): before the totals, one
    /// table per UTC window, headed by the window's start and end (RFC 3339, end exclusive),
    /// with the window's rows (tenant, device, meter, quantity, unit).
    pub by_window: bool,
}

impl UsageTextOptions {
    /// The options with the per-window tables on or off ([`UsageTextOptions::by_window`]).
    pub fn by_window(mut self, on: bool) -> Self {
        self.by_window = on;
        self
    }
}

/// The usage report as text for people, as `gpumeter usage` prints it: a title line (schema,
/// metering policy, window size), then the sections `Sources` (file, format, SHA-256 prefix),
/// `Devices` (id, key, name, SM count, compute capability and the meters not meterable
/// there), `Records` (kernel, memcpy and memset records metered; events skipped by category),
/// with [`UsageTextOptions::by_window`] one table per window, `Totals` (per tenant, device and
/// meter, quantities in the meter's canonical unit with thousands separators; the per-window
/// and totals tables add a `KEY` column, the device key, when a device id names several
/// devices of the report, as ids from different sources do), `Loss` (when
/// records were lost) and `Warnings` (when there are some), and last the report's `sha256`
/// line. A report with no device or no usage says so on the section's line instead of an
/// empty table. No final newline.
///
/// Every text from the inputs is escaped ([`esc`]).
pub fn usage_text(r: &UsageReport, options: &UsageTextOptions) -> String {
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
    devices_section(&mut out, r);
    let skipped: Vec<String> = r
        .records
        .skipped
        .iter()
        .map(|(k, v)| format!("{} {}", esc(k), group_digits(&v.to_string())))
        .collect();
    // Counts with thousands separators, as in every table.
    let _ = writeln!(
        out,
        "\nRecords  {} kernel, {} memcpy, {} memset metered; skipped (not work): {}",
        group_digits(&r.records.kernel.to_string()),
        group_digits(&r.records.memcpy.to_string()),
        group_digits(&r.records.memset.to_string()),
        if skipped.is_empty() {
            "none".into()
        } else {
            skipped.join(", ")
        }
    );
    if options.by_window {
        windows_section(&mut out, r);
    }
    totals_section(&mut out, r);
    loss_section(&mut out, r);
    if !r.warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings");
        for w in &r.warnings {
            let _ = writeln!(out, "  - {}", esc(w));
        }
    }
    let _ = write!(out, "\nsha256 {}", esc(&r.sha256));
    out
}

fn devices_section(out: &mut String, r: &UsageReport) {
    if r.devices.is_empty() {
        let _ = writeln!(out, "\nDevices  none: the inputs name no device");
        return;
    }
    let _ = writeln!(out, "\nDevices");
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
    out.push_str(&t.render("  "));
}

/// The columns of the totals and per-window tables.
const QUANTITY_COLUMNS: [(&str, bool); 5] = [
    ("TENANT", false),
    ("DEVICE", true),
    ("METER", false),
    ("QUANTITY", true),
    ("UNIT", false),
];

/// [`QUANTITY_COLUMNS`] with the device key after the device id, for reports in which one id
/// names several devices (ids repeat across sources: every trace has a device 0).
const QUANTITY_COLUMNS_KEYED: [(&str, bool); 6] = [
    ("TENANT", false),
    ("DEVICE", true),
    ("KEY", false),
    ("METER", false),
    ("QUANTITY", true),
    ("UNIT", false),
];

/// Whether a device id names more than one device of the report (then the quantity tables
/// show the device key too, or their rows could not be told apart).
fn ids_repeat(r: &UsageReport) -> bool {
    let mut ids: Vec<u32> = r.devices.iter().map(|d| d.device).collect();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    ids.len() != n
}

/// A quantity table: a row per usage or total row, with the device key when ids repeat.
/// A row of a quantity table: a usage row (one window) or a total row (the whole report).
trait QuantityRow {
    /// Tenant, device id, device key, meter and quantity.
    fn cells(&self) -> (&str, u32, &str, gpumeter_core::MeterKind, u128);
}

impl QuantityRow for gpumeter_core::UsageRow {
    fn cells(&self) -> (&str, u32, &str, gpumeter_core::MeterKind, u128) {
        (
            &self.tenant,
            self.device,
            &self.device_key,
            self.meter,
            self.quantity.0,
        )
    }
}

impl QuantityRow for gpumeter_core::TotalRow {
    fn cells(&self) -> (&str, u32, &str, gpumeter_core::MeterKind, u128) {
        (
            &self.tenant,
            self.device,
            &self.device_key,
            self.meter,
            self.quantity.0,
        )
    }
}

fn quantity_table<'a, R: QuantityRow + 'a>(
    keyed: bool,
    rows: impl IntoIterator<Item = &'a R>,
) -> Table {
    let mut t = if keyed {
        Table::new(&QUANTITY_COLUMNS_KEYED)
    } else {
        Table::new(&QUANTITY_COLUMNS)
    };
    for row in rows {
        let (tenant, device, key, meter, quantity) = row.cells();
        let mut cells = vec![tenant.to_string(), device.to_string()];
        if keyed {
            cells.push(key.to_string());
        }
        cells.extend([
            meter.to_string(),
            group_digits(&quantity.to_string()),
            meter.canonical_unit().to_string(),
        ]);
        t.row(cells);
    }
    t
}

fn totals_section(out: &mut String, r: &UsageReport) {
    if r.totals.is_empty() {
        let _ = writeln!(
            out,
            "\nTotals  none: no usage was metered (no work record of the inputs fed a meter)"
        );
        return;
    }
    let _ = writeln!(out, "\nTotals");
    let t = quantity_table(ids_repeat(r), &r.totals);
    out.push_str(&t.render("  "));
}

/// One table per window, in time order: `Window START to END (end exclusive)`, then the
/// window's rows in the report's order (device key, meter, tenant).
fn windows_section(out: &mut String, r: &UsageReport) {
    use std::collections::BTreeMap;
    // Windows by their start in ns; a start that does not parse (a report edited by hand) is
    // kept by its text, after the others.
    let mut windows: BTreeMap<(u64, &str), Vec<&gpumeter_core::UsageRow>> = BTreeMap::new();
    for row in &r.usage {
        let ns = gpumeter_core::time::parse_rfc3339(&row.window_start).unwrap_or(u64::MAX);
        windows
            .entry((ns, row.window_start.as_str()))
            .or_default()
            .push(row);
    }
    if windows.is_empty() {
        let _ = writeln!(out, "\nWindows  none: no usage was metered");
        return;
    }
    let window_ns = r
        .window_seconds
        .saturating_mul(gpumeter_core::time::NS_PER_SECOND);
    let keyed = ids_repeat(r);
    for ((start, text), rows) in windows {
        let end = if start == u64::MAX {
            "?".to_string()
        } else {
            gpumeter_core::time::rfc3339(start.saturating_add(window_ns))
        };
        let _ = writeln!(
            out,
            "\nWindow {} to {} (end exclusive)",
            esc(text),
            esc(&end)
        );
        let t = quantity_table(keyed, rows.iter().copied());
        out.push_str(&t.render("  "));
    }
}

fn loss_section(out: &mut String, r: &UsageReport) {
    if r.loss.is_empty() {
        return;
    }
    // Loss reasons are shared by records and PM samples: a PM-sampled report's may be either.
    let sampled = r.loss.iter().any(|l| l.reason == "pm_sample_overflow")
        || r.usage
            .iter()
            .any(|u| matches!(u.meter, MeterKind::SmActiveNs | MeterKind::DramBytes));
    let what = if sampled {
        "records or PM samples"
    } else {
        "records"
    };
    let _ = writeln!(out, "\nLoss ({what} that fed no meter)");
    let mut t = Table::new(&[
        ("DEVICE", true),
        ("KEY", false),
        ("REASON", false),
        ("RECORDS", true),
    ]);
    for l in &r.loss {
        let n = group_digits(&l.records.to_string());
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
    if r.loss.iter().any(|l| l.reason == "pm_sample_overflow") {
        let _ = writeln!(
            out,
            "  pm_sample_overflow counts PM sampling's hardware buffer overflows: the samples \
             they overwrote are not metered (at least one each)"
        );
    }
}

/// The invoices as text for people, as `gpumeter preview` and `gpumeter invoice finalize`
/// print them: per invoice a header (tenant, period, currency, price book, usage digest), the
/// lines table (SKU, meter, band, tier, quantity in the pricing unit, unit price, amount),
/// subtotal, credits and total, unpriced usage and warnings; an empty document is one line
/// saying there are no invoices. Ends with a newline. Text from the inputs is escaped
/// ([`esc`]). The same as [`InvoiceDocument::to_text_table`], which documents the layout.
pub fn invoice_text(doc: &InvoiceDocument) -> String {
    doc.to_text_table()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping() {
        assert_eq!(group_digits("1"), "1");
        assert_eq!(group_digits("1234"), "1,234");
        assert_eq!(group_digits("123456"), "123,456");
        assert_eq!(group_digits("1234567"), "1,234,567");
        assert_eq!(group_digits("-123"), "-123");
        assert_eq!(group_digits("+123456"), "+123,456");
        assert_eq!(group_digits("-1234"), "-1,234");
        assert_eq!(group_digits(u128::MAX.to_string().as_str()).len(), 39 + 12);
        // Not an integer of ASCII digits: unchanged, never a comma after a sign or inside a
        // multi-byte character's neighbours.
        for text in ["", "-", "12.5", "1e9", "١٢٣٤", "12 345", "--1"] {
            assert_eq!(group_digits(text), text);
        }
    }

    /// A PM-sampled report's loss table says its counts may be PM samples, and what an
    /// overflow's count means (a lower bound: "at least").
    #[test]
    fn pm_sample_loss_is_said_as_samples() {
        use gpumeter_core::{DeviceInfo, Meter, MeterConfig, PmSample};
        let mut m = Meter::new(MeterConfig::default());
        let dev = m.register_device(DeviceInfo::bare("GPU-x", 0));
        m.push_pm_sample(
            dev,
            &PmSample {
                start_ns: 1000,
                end_ns: 2000,
                dram_read_bytes: Some(1),
                dram_write_bytes: Some(1),
                overflow: true,
                ..PmSample::default()
            },
        );
        let r = m.finish().expect("report");
        let mut out = String::new();
        loss_section(&mut out, &r);
        assert!(
            out.contains("Loss (records or PM samples that fed no meter)"),
            "{out}"
        );
        assert!(out.contains("pm_sample_overflow  at least 1"), "{out}");
        assert!(
            out.contains("pm_sample_overflow counts PM sampling's hardware buffer overflows"),
            "{out}"
        );
    }

    #[test]
    fn cells_are_escaped_before_widths() {
        let mut t = Table::new(&[("A", false), ("B", false)]);
        t.row(vec!["x\u{1b}y".into(), "z".into()]);
        let s = t.render("");
        assert_eq!(s, "A         B\nx\\u{1b}y  z\n");
    }
}
