//! Renderings of the invoice document beyond JSON and the text table: CSV for
//! spreadsheets and accounting imports, and one self-contained HTML page for people, with a
//! per-device utilization chart.
//!
//! ```
//! use gpumeter_rating::render::{invoice_csv, invoice_html, CSV_COLUMNS};
//! use gpumeter_rating::InvoiceDocument;
//!
//! let doc = InvoiceDocument::new(vec![]);
//! // No invoices: the header row only.
//! assert_eq!(invoice_csv(&doc)?, format!("{}\r\n", CSV_COLUMNS.join(",")));
//! # Ok::<(), gpumeter_rating::render::RenderError>(())
//! ```
//!
//! Both renderings are byte-stable: the same document (and usage report) gives the same
//! bytes, with no clock, locale or hash-map order in them.
//!
//! Money and quantities are written from their exact decimal or integer values, never through
//! a float. The HTML chart computes each window's share as an exact fraction ([`Share`]) and
//! uses `f64` only for SVG drawing coordinates.

use std::borrow::Cow;
use std::fmt::Write as _;

use gpumeter_core::text::printable;
use gpumeter_core::time::parse_rfc3339;
use gpumeter_core::UsageReport;

use crate::invoice::{Invoice, InvoiceDocument, Line, LineKind};

mod chart;

use chart::chart;
pub use chart::{
    bar_height, utilization, DeviceUtilization, Share, WindowUtilization, MAX_CHART_BARS,
};

/// The CSV header, one column per field of an invoice line plus the invoice's identity.
///
/// `tenant`, `period_from`, `period_to`, `currency` and `invoice_sha256` repeat the invoice's
/// fields on each of its lines, so every row stands alone and an auditor can tie it to the
/// sealed invoice (`invoice_sha256` is the invoice's `sha256`). The other columns are the
/// line's fields as in the JSON document (`packages` is the line's `extensions.packages`, the
/// whole packages a `package` line bills); a `null` is an empty cell. On a supplement or credit
/// note, whose lines bill changes, `quantity`, `billable_quantity`, `fragment_carried` and
/// `packages` are the line's signed changes (`extensions.change`). `invoice_kind` is
/// `invoice`, `supplement` or `credit_note`, and `supplement_of` the `sha256` of the period's
/// first invoice that a supplement or credit note supplements (empty on an invoice).
pub const CSV_COLUMNS: [&str; 21] = [
    "tenant",
    "period_from",
    "period_to",
    "currency",
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
    "packages",
    "unit_price",
    "amount",
    "invoice_sha256",
    "invoice_kind",
    "supplement_of",
];

/// Why a rendering could not be produced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// The CSV writer failed (in memory, so only on an internal fault).
    #[error("cannot write the invoice CSV: {0}")]
    Csv(String),
}

/// A cell of text from the inputs (tenant, SKU id, band name, tier label) made safe for
/// spreadsheets: text starting with `=`, `+`, `-`, `@`, a tab or a carriage return, which a
/// spreadsheet would run as a formula, gets a leading `'` (the OWASP "CSV injection" advice).
/// Other text is unchanged. The JSON document is the exact form.
pub fn csv_text_cell(text: &str) -> Cow<'_, str> {
    match text.chars().next() {
        Some('=' | '+' | '-' | '@' | '\t' | '\r') => Cow::Owned(format!("'{text}")),
        _ => Cow::Borrowed(text),
    }
}

/// The invoice document as CSV (RFC 4180: comma-separated, CRLF line ends, fields quoted when
/// they hold a comma, quote, CR or LF, quotes doubled): the [`CSV_COLUMNS`] header, then one
/// row per invoice line, invoices in document order and lines in invoice order. Subtotals and
/// totals are not rows (they are Σ `amount` per `invoice_sha256`); unpriced usage and warnings
/// are in the JSON, text and HTML renderings.
///
/// Text from the inputs goes through [`csv_text_cell`] (formula injection); it is otherwise
/// written exactly, not escaped for terminals (a quoted field may hold a newline).
///
/// # Errors
/// [`RenderError::Csv`] if the CSV writer fails (it writes to memory, so only on an internal
/// fault).
pub fn invoice_csv(doc: &InvoiceDocument) -> Result<String, RenderError> {
    let mut w = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .quote_style(csv::QuoteStyle::Necessary)
        .from_writer(Vec::new());
    let fail = |e: csv::Error| RenderError::Csv(e.to_string());
    w.write_record(CSV_COLUMNS).map_err(fail)?;
    for inv in &doc.invoices {
        for line in &inv.lines {
            w.write_record(csv_row(inv, line)).map_err(fail)?;
        }
    }
    let bytes = w
        .into_inner()
        .map_err(|e| RenderError::Csv(e.error().to_string()))?;
    String::from_utf8(bytes).map_err(|e| RenderError::Csv(e.to_string()))
}

fn csv_row(inv: &Invoice, l: &Line) -> [String; 21] {
    let text = |s: &Option<String>| s.as_deref().map(csv_text_cell).unwrap_or_default().into();
    let num = |v: Option<String>| v.unwrap_or_default();
    let change = l.extensions.change;
    let or_change = |q: Option<gpumeter_core::Quantity>, c: Option<crate::SignedQuantity>| {
        q.map(|q| q.to_string())
            .or_else(|| c.map(|c| c.to_string()))
            .unwrap_or_default()
    };
    [
        csv_text_cell(&inv.tenant).into_owned(),
        inv.period.from.clone(),
        inv.period.to.clone(),
        inv.currency.clone(),
        kind_name(l.kind).to_string(),
        text(&l.sku),
        l.meter.map(|m| m.to_string()).unwrap_or_default(),
        text(&l.band),
        text(&l.tier),
        or_change(l.quantity, change.map(|c| c.quantity)),
        num(l.unit.clone()),
        num(l.pricing_unit.clone()),
        num(l.quantity_in_pricing_unit.clone()),
        or_change(l.billable_quantity, change.map(|c| c.billable_quantity)),
        or_change(l.fragment_carried, change.map(|c| c.fragment_carried)),
        or_change(l.extensions.packages, change.and_then(|c| c.packages)),
        num(l.unit_price.map(|p| p.to_string())),
        l.amount.to_string(),
        inv.sha256.clone(),
        inv.extensions
            .kind
            .map_or("invoice", crate::InvoiceKind::as_str)
            .to_string(),
        inv.extensions
            .supplement_of
            .as_ref()
            .map(|f| f.sha256.clone())
            .unwrap_or_default(),
    ]
}

fn kind_name(k: LineKind) -> &'static str {
    match k {
        LineKind::Usage => "usage",
        LineKind::Minimum => "minimum",
        LineKind::FlatFee => "flat_fee",
        LineKind::Reservation => "reservation",
    }
}

/// Text from the inputs for HTML: escaped for terminals first ([`printable`]: control and
/// bidirectional-override characters become visible `\u{…}` escapes, as in the text table),
/// then `&`, `<`, `>`, `"` and `'` become character references, so it is safe in element
/// content and in quoted attribute values.
pub fn html_text(text: &str) -> String {
    let text = printable(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:'DejaVu Sans',Arial,Helvetica,sans-serif;color:#1d2430;\
background:#fff;margin:24px 32px;font-size:14px}\
h1{font-size:22px;margin:0 0 16px}h2{font-size:18px;margin:28px 0 8px}\
h3{font-size:15px;margin:18px 0 6px}\
dl.head{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin:0 0 12px}\
dl.head dt{color:#5b6475}dl.head dd{margin:0}\
table{border-collapse:collapse;margin:8px 0}\
th,td{padding:4px 10px;border-bottom:1px solid #dde2ea;text-align:left;vertical-align:top}\
th{background:#eef2f8;font-weight:600}td.n,th.n{text-align:right;\
font-variant-numeric:tabular-nums;white-space:nowrap}\
tr.note td{color:#5b6475;font-size:12px;border-bottom:1px dashed #dde2ea}\
tfoot td{border-bottom:none;font-weight:600}tfoot tr.total td{border-top:2px solid #1d2430}\
.mono{font-family:'DejaVu Sans Mono',monospace;font-size:12px}\
ul.warn li{color:#8a4b00}figure{margin:12px 0 24px}\
figcaption{font-weight:600;margin-bottom:4px}\
svg text{font-family:'DejaVu Sans',Arial,sans-serif;font-size:11px;fill:#3a4250}\
.grid{stroke:#dde2ea;stroke-width:1}.axis{stroke:#3a4250;stroke-width:1}\
.busy{fill:#2f6fdb}.sm{fill:#f08c2e}";

/// The invoice document as one self-contained HTML page: per invoice a header (tenant,
/// period, currency, price book, digests), the lines table (SKU, meter, band, tier, quantity,
/// unit price, amount; a sub-row for a carried fragment), subtotal, credits and total, unpriced
/// usage and warnings; then, per device of `usage`, an SVG bar chart of its utilization over
/// the invoices' periods (their union; the usage's span when there are no invoices): per window
/// `gpu_busy_ns` ÷ the window and `sm_ns` ÷ (SMs × the window), 0–100 %, time in UTC
/// ([`utilization`]).
///
/// The page has inline CSS and inline SVG only: no script, no external resource, no URL. All
/// text from the inputs goes through [`html_text`]. Byte-stable: the same inputs give the same
/// bytes.
pub fn invoice_html(doc: &InvoiceDocument, usage: &UsageReport) -> String {
    let mut out = String::with_capacity(16 * 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<title>gpumeter invoice preview</title>\n<style>");
    out.push_str(STYLE);
    out.push_str("</style>\n</head>\n<body>\n<h1>Invoice preview</h1>\n");
    if doc.invoices.is_empty() {
        out.push_str("<p>No invoices: no usage in the period.</p>\n");
    }
    for inv in &doc.invoices {
        invoice_section(&mut out, inv);
    }
    let span = invoices_span(doc);
    let devices = utilization(usage, span);
    out.push_str("<h2>Utilization</h2>\n");
    let _ = writeln!(
        out,
        "<p>Per device and {} window (UTC): the share of the window the GPU was busy \
         (gpu_busy_ns ÷ window) and the share of its SM·time held (sm_ns ÷ (SMs × window)), \
         all tenants together.</p>",
        html_text(&window_text(usage.window_seconds))
    );
    if devices.is_empty() {
        out.push_str("<p>No devices in the usage report.</p>\n");
    }
    for d in &devices {
        chart(&mut out, d);
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// The union of the invoices' periods, or `None` when there are none (or one does not parse).
fn invoices_span(doc: &InvoiceDocument) -> Option<(u64, u64)> {
    let mut span: Option<(u64, u64)> = None;
    for inv in &doc.invoices {
        let f = parse_rfc3339(&inv.period.from).ok()?;
        let t = parse_rfc3339(&inv.period.to).ok()?;
        span = Some(match span {
            Some((a, b)) => (a.min(f), b.max(t)),
            None => (f, t),
        });
    }
    span
}

fn window_text(seconds: u64) -> String {
    match seconds {
        s if s > 0 && s % 86_400 == 0 => format!("{} d", s / 86_400),
        s if s > 0 && s % 3600 == 0 => format!("{} h", s / 3600),
        s if s > 0 && s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// One invoice: header, lines table with totals, unpriced usage, warnings.
fn invoice_section(out: &mut String, inv: &Invoice) {
    let _ = writeln!(
        out,
        "<section class=\"invoice\">\n<h2>Tenant {}{}</h2>",
        html_text(&inv.tenant),
        inv.extensions
            .kind
            .map_or_else(String::new, |k| format!(" ({})", k.label()))
    );
    invoice_header(out, inv);
    lines_table(out, inv);
    invoice_notes(out, inv);
    out.push_str("</section>\n");
}

/// Period, currency, price book and the digests.
fn invoice_header(out: &mut String, inv: &Invoice) {
    let h = html_text;
    out.push_str("<dl class=\"head\">\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(out, "<dt>{k}</dt><dd>{v}</dd>");
    };
    row(
        "Period",
        format!(
            "{} to {} (end exclusive)",
            h(&inv.period.from),
            h(&inv.period.to)
        ),
    );
    row("Currency", h(&inv.currency));
    row(
        "Price book",
        format!(
            "{} <span class=\"mono\">sha256 {}</span>",
            h(&inv.price_book.version),
            h(&inv.price_book.sha256)
        ),
    );
    row(
        "Usage report",
        format!(
            "<span class=\"mono\">sha256 {}</span>",
            h(&inv.usage_sha256)
        ),
    );
    row(
        "Invoice",
        format!("<span class=\"mono\">sha256 {}</span>", h(&inv.sha256)),
    );
    if let Some(first) = &inv.extensions.supplement_of {
        let note = inv.supplement_note(h).unwrap_or_default();
        row(
            "Supplement of",
            format!(
                "<span class=\"mono\">sha256 {}</span> ({note})",
                h(&first.sha256)
            ),
        );
    }
    out.push_str("</dl>\n");
}

/// The lines, then subtotal, credits and total.
fn lines_table(out: &mut String, inv: &Invoice) {
    let h = html_text;
    // Band and Tier columns only when a line has one, as in the text table.
    let cols = Columns {
        band: inv.lines.iter().any(|l| l.band.is_some()),
        tier: inv.lines.iter().any(|l| l.tier.is_some()),
    };
    let span = cols.count() - 1;
    let _ = write!(
        out,
        "<table class=\"lines\">\n<thead><tr><th>SKU</th><th>Meter</th>"
    );
    if cols.band {
        out.push_str("<th>Band</th>");
    }
    if cols.tier {
        out.push_str("<th>Tier</th>");
    }
    let _ = writeln!(
        out,
        "<th class=\"n\">Quantity</th><th class=\"n\">Unit price</th>\
         <th class=\"n\">Amount {}</th></tr></thead>\n<tbody>",
        h(&inv.currency)
    );
    if inv.lines.is_empty() {
        let _ = writeln!(
            out,
            "<tr><td colspan=\"{}\">No billable usage.</td></tr>",
            cols.count()
        );
    }
    for l in &inv.lines {
        line_row(out, l, cols);
    }
    out.push_str("</tbody>\n<tfoot>\n");
    let _ = writeln!(
        out,
        "<tr><td colspan=\"{span}\" class=\"n\">Subtotal</td><td class=\"n\">{}</td></tr>",
        inv.subtotal
    );
    for c in &inv.credits_applied {
        let _ = writeln!(
            out,
            "<tr><td colspan=\"{span}\" class=\"n\">{}</td>\
             <td class=\"n\">{}</td></tr>",
            crate::invoice::credit_label(c, h),
            crate::invoice::credit_amount(c)
        );
    }
    let _ = writeln!(
        out,
        "<tr class=\"total\"><td colspan=\"{span}\" class=\"n\">Total</td>\
         <td class=\"n\">{}</td></tr>\n</tfoot>\n</table>",
        inv.total
    );
}

/// Unpriced usage and warnings, when there are any.
fn invoice_notes(out: &mut String, inv: &Invoice) {
    let h = html_text;
    if !inv.unpriced.is_empty() {
        out.push_str("<h3>Unpriced usage (listed, not billed)</h3>\n<ul>\n");
        for u in &inv.unpriced {
            let _ = writeln!(
                out,
                "<li>{} ({}): {} {} {}: {}</li>",
                h(&u.device_key),
                h(u.name.as_deref().unwrap_or("no name")),
                u.meter,
                u.quantity,
                u.meter.canonical_unit(),
                h(&u.reason)
            );
        }
        out.push_str("</ul>\n");
    }
    if !inv.warnings.is_empty() {
        out.push_str("<h3>Warnings</h3>\n<ul class=\"warn\">\n");
        for w in &inv.warnings {
            let _ = writeln!(out, "<li>{}</li>", h(w));
        }
        out.push_str("</ul>\n");
    }
}

/// Which optional columns an invoice's lines table has.
#[derive(Clone, Copy)]
struct Columns {
    band: bool,
    tier: bool,
}

impl Columns {
    /// Columns in all: SKU, meter, [band], [tier], quantity, unit price, amount.
    fn count(self) -> usize {
        5 + usize::from(self.band) + usize::from(self.tier)
    }
}

fn line_row(out: &mut String, l: &Line, cols: Columns) {
    let h = html_text;
    let opt = |s: &Option<String>| s.as_deref().map(h).unwrap_or_default();
    let amount = l.amount;
    match l.kind {
        LineKind::Minimum => {
            let _ = writeln!(
                out,
                "<tr><td>minimum</td><td colspan=\"{}\">top-up to the invoice minimum</td>\
                 <td class=\"n\">{amount}</td></tr>",
                cols.count() - 2
            );
        }
        _ => {
            let meter = l.meter.map(|m| m.to_string()).unwrap_or_default();
            let meter = if l.kind == LineKind::Reservation {
                format!("reservation {meter}")
            } else {
                meter
            };
            let quantity = l.quantity_label(h);
            let price = l.unit_price.map(|p| p.to_string()).unwrap_or_default();
            let _ = write!(out, "<tr><td>{}</td><td>{meter}</td>", opt(&l.sku));
            if cols.band {
                let _ = write!(out, "<td>{}</td>", opt(&l.band));
            }
            if cols.tier {
                let _ = write!(out, "<td>{}</td>", opt(&l.tier));
            }
            let _ = writeln!(
                out,
                "<td class=\"n\">{quantity}</td><td class=\"n\">{price}</td>\
                 <td class=\"n\">{amount}</td></tr>"
            );
            if let Some(note) = l.carried_note(h) {
                let _ = writeln!(
                    out,
                    "<tr class=\"note\"><td></td><td colspan=\"{}\">\u{21b3} {note}</td></tr>",
                    cols.count() - 1
                );
            }
        }
    }
}
