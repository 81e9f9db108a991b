//! The invoice document as aligned text for people ([`InvoiceDocument::to_text_table`]):
//! each invoice's header, its lines grouped by SKU and meter in columns, unpriced usage and
//! warnings, and the document's `idle` usage.

use gpumeter_core::text::printable;

use gpumeter_core::MeterKind;

use super::{
    short_hash, CreditApplied, IdleUsage, Invoice, InvoiceDocument, InvoiceKind, Line, LineKind,
};

impl InvoiceDocument {
    /// The document as aligned text for people: per invoice a header (tenant, period,
    /// currency, price book), a table of lines (SKU | meter | band | tier | quantity in the
    /// pricing unit | unit price | amount, numbers right-aligned), subtotal and total, then
    /// unpriced usage and warnings. Ends with a newline; an empty document is one line saying
    /// there are no invoices.
    ///
    /// Lines are grouped by SKU and meter (in order of first appearance; the SKU and meter are
    /// written on a group's first row only), so the rows of one meter's bands and tiers sit
    /// together. The `Band` and `Tier` columns appear only when some line of the invoice has
    /// one. A `flat_fee` line shows `flat fee` as its quantity and the fee as its unit price; a
    /// `minimum` line shows `minimum (top-up to the invoice minimum)`. A line whose
    /// `fragment_carried` is non-zero gets a `↳ carried to the next period: …` row under it with
    /// the billed and metered quantities in the canonical unit.
    ///
    /// Text from the inputs (tenant, SKU ids, the book's version, device keys and names,
    /// reasons, warnings) is escaped with [`gpumeter_core::text::printable`], so control
    /// characters and bidirectional overrides show as `\u{1b}`-style escapes and never reach a
    /// terminal raw; column widths are those of the escaped text.
    pub fn to_text_table(&self) -> String {
        let idle = self.extensions.idle.as_ref().map(idle_text);
        if self.invoices.is_empty() {
            let none = "no invoices: no usage in the period\n".to_string();
            return match idle {
                Some(idle) => format!("no invoices: no tenant's usage in the period\n\n{idle}"),
                None => none,
            };
        }
        let mut parts: Vec<String> = self.invoices.iter().map(invoice_text).collect();
        parts.extend(idle);
        parts.join("\n")
    }
}

#[derive(Clone, Copy)]
enum Align {
    Left,
    Right,
}

fn width(s: &str) -> usize {
    s.chars().count()
}

fn pad(s: &str, w: usize, align: Align) -> String {
    let fill = " ".repeat(w.saturating_sub(width(s)));
    match align {
        Align::Left => format!("{s}{fill}"),
        Align::Right => format!("{fill}{s}"),
    }
}

/// Input text for the table: escaped ([`printable`]) and owned.
fn esc(s: &str) -> String {
    printable(s).into_owned()
}

fn invoice_text(inv: &Invoice) -> String {
    let mut out = String::new();
    let title = match inv.extensions.kind {
        None => "Invoice",
        Some(InvoiceKind::Supplement) => "Supplement",
        Some(InvoiceKind::CreditNote) => "Credit note",
    };
    out.push_str(&format!("{title} for tenant {}\n", esc(&inv.tenant)));
    out.push_str(&format!(
        "  period      {} to {} (end exclusive)\n",
        esc(&inv.period.from),
        esc(&inv.period.to)
    ));
    out.push_str(&format!("  currency    {}\n", esc(&inv.currency)));
    out.push_str(&format!(
        "  price book  {} (sha256 {}…)\n",
        esc(&inv.price_book.version),
        esc(short_hash(&inv.price_book.sha256))
    ));
    out.push_str(&format!(
        "  usage       sha256 {}…\n",
        esc(short_hash(&inv.usage_sha256))
    ));
    if let Some(head) = &inv.ledger_head {
        out.push_str(&format!("  ledger head {} (finalized)\n", esc(head)));
    }
    if let Some(note) = inv.supplement_note(esc) {
        out.push_str(&format!("  {note}\n"));
    }
    out.push('\n');

    out.push_str(&lines_table(inv));
    if !inv.unpriced.is_empty() {
        out.push_str("\n  Unpriced usage (listed, not billed):\n");
        for u in &inv.unpriced {
            out.push_str(&format!(
                "    {} ({}): {} {} {}: {}\n",
                esc(&u.device_key),
                esc(u.name.as_deref().unwrap_or("no name")),
                u.meter,
                u.quantity,
                u.meter.canonical_unit(),
                esc(&u.reason)
            ));
        }
    }
    if !inv.warnings.is_empty() {
        out.push_str("\n  Warnings:\n");
        for w in &inv.warnings {
            out.push_str(&format!("    - {}\n", esc(w)));
        }
    }
    out
}

/// The text of `extensions.idle`: its period, quantities and warnings.
fn idle_text(idle: &IdleUsage) -> String {
    let mut out = format!(
        "Idle usage (not invoiced), {} to {} (end exclusive):\n",
        esc(&idle.period.from),
        esc(&idle.period.to)
    );
    for r in &idle.usage {
        out.push_str(&format!(
            "    {} ({}): {} {} {}\n",
            esc(&r.device_key),
            esc(r.name.as_deref().unwrap_or("no name")),
            r.meter,
            r.quantity,
            r.meter.canonical_unit()
        ));
    }
    if !idle.warnings.is_empty() {
        out.push_str("\n  Warnings:\n");
        for w in &idle.warnings {
            out.push_str(&format!("    - {}\n", esc(w)));
        }
    }
    out
}

/// A row of the lines table: cells, or a note written under the previous row.
enum Row {
    Cells(Vec<String>),
    Note(String),
}

/// Which optional columns an invoice's lines table has: `Band` and `Tier` when a line has one.
#[derive(Clone, Copy)]
struct Optional {
    band: bool,
    tier: bool,
}

/// The lines table of one invoice: grouped by (SKU, meter) in order of first appearance, the
/// SKU and meter written on a group's first row only; `Band` and `Tier` columns when any line
/// has one; a sub-row under a line whose fragment carried is non-zero; subtotal, credits and
/// total under the amounts.
fn lines_table(inv: &Invoice) -> String {
    let opt = Optional {
        band: inv.lines.iter().any(|l| l.band.is_some()),
        tier: inv.lines.iter().any(|l| l.tier.is_some()),
    };
    let columns = table_columns(inv, opt);
    let rows = table_rows(inv, opt, columns.len());
    lay_out(inv, &columns, &rows)
}

fn table_columns(inv: &Invoice, opt: Optional) -> Vec<(String, Align)> {
    let mut columns: Vec<(String, Align)> =
        vec![("SKU".into(), Align::Left), ("Meter".into(), Align::Left)];
    if opt.band {
        columns.push(("Band".into(), Align::Left));
    }
    if opt.tier {
        columns.push(("Tier".into(), Align::Left));
    }
    columns.push(("Quantity".into(), Align::Right));
    columns.push(("Unit price".into(), Align::Right));
    columns.push((format!("Amount {}", esc(&inv.currency)), Align::Right));
    columns
}

/// The rows of the lines, `n` cells each, grouped ([`grouped_lines`]).
fn table_rows(inv: &Invoice, opt: Optional, n: usize) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut shown_group = None;
    for l in grouped_lines(&inv.lines) {
        if l.kind == LineKind::Minimum {
            let mut cells = vec!["minimum".into(), "(top-up to the invoice minimum)".into()];
            cells.resize(n - 1, String::new());
            cells.push(l.amount.to_string());
            rows.push(Row::Cells(cells));
            shown_group = None;
            continue;
        }
        // Reservations are their own group even on a SKU and meter with usage lines.
        let group = (l.sku.as_deref(), l.meter, l.kind == LineKind::Reservation);
        let first_of_group = shown_group != Some(group);
        shown_group = Some(group);
        rows.push(Row::Cells(line_cells(l, opt, first_of_group)));
        if let Some(note) = l.carried_note(esc) {
            rows.push(Row::Note(note));
        }
    }
    rows
}

/// The cells of a line other than `minimum`; SKU and meter only on a group's first row.
fn line_cells(l: &Line, opt: Optional, first_of_group: bool) -> Vec<String> {
    let mut cells = Vec::with_capacity(7);
    if first_of_group {
        let meter = l.meter.map_or_else(String::new, |m| m.to_string());
        cells.push(l.sku.as_deref().map(esc).unwrap_or_default());
        cells.push(if l.kind == LineKind::Reservation {
            format!("reservation {meter}")
        } else {
            meter
        });
    } else {
        cells.push(String::new());
        cells.push(String::new());
    }
    if opt.band {
        cells.push(l.band.as_deref().map(esc).unwrap_or_default());
    }
    if opt.tier {
        cells.push(l.tier.as_deref().map(esc).unwrap_or_default());
    }
    cells.push(l.quantity_label(esc));
    cells.push(l.unit_price.map_or_else(String::new, |p| p.to_string()));
    cells.push(l.amount.to_string());
    cells
}

/// How a renderer labels an entry of `credits_applied`: `Credits <grant>` for a burn,
/// `Credits given back <grant>` for a credit note's give-back (a negative entry).
pub(crate) fn credit_label(c: &CreditApplied, esc: impl Fn(&str) -> String) -> String {
    if c.amount.is_sign_negative() {
        format!("Credits given back {}", esc(&c.grant))
    } else {
        format!("Credits {}", esc(&c.grant))
    }
}

/// An entry of `credits_applied` as the totals show it: what it takes off the subtotal (a
/// burn `-1.40`, a give-back `+1.40`).
pub(crate) fn credit_amount(c: &CreditApplied) -> String {
    if c.amount.is_sign_negative() {
        format!("+{}", c.amount.abs())
    } else {
        format!("-{}", c.amount)
    }
}

/// Header, rule, rows, rule and the totals under the last two columns, aligned.
fn lay_out(inv: &Invoice, columns: &[(String, Align)], rows: &[Row]) -> String {
    let n = columns.len();
    let subtotal = inv.subtotal.to_string();
    let total = inv.total.to_string();
    let credits: Vec<(String, String)> = inv
        .credits_applied
        .iter()
        .map(|c| (credit_label(c, esc), credit_amount(c)))
        .collect();
    let mut widths: Vec<usize> = columns.iter().map(|(h, _)| width(h)).collect();
    for row in rows {
        if let Row::Cells(cells) = row {
            for (w, cell) in widths.iter_mut().zip(cells) {
                *w = (*w).max(width(cell));
            }
        }
    }
    let (label_col, amount_col) = (n - 2, n - 1);
    widths[label_col] = widths[label_col].max(width("Subtotal"));
    for (label, amount) in &credits {
        widths[label_col] = widths[label_col].max(width(label));
        widths[amount_col] = widths[amount_col].max(width(amount));
    }
    widths[amount_col] = widths[amount_col].max(width(&subtotal)).max(width(&total));

    let render = |cells: &[String]| -> String {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .zip(columns)
            .map(|((c, &w), (_, a))| pad(c, w, *a))
            .collect();
        format!("  {}\n", parts.join("  ").trim_end())
    };
    let totals_row = |label: &str, amount: &str| {
        let mut cells = vec![String::new(); n - 2];
        cells.push(label.to_string());
        cells.push(amount.to_string());
        render(&cells)
    };
    let header: Vec<String> = columns.iter().map(|(h, _)| h.clone()).collect();
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    let rule = format!("  {}\n", rule.join("  "));
    let note_indent = " ".repeat(2 + widths[0] + 2);

    let mut out = render(&header);
    out.push_str(&rule);
    if rows.is_empty() {
        out.push_str("  (no billable usage)\n");
    }
    for row in rows {
        match row {
            Row::Cells(cells) => out.push_str(&render(cells)),
            Row::Note(note) => out.push_str(&format!("{note_indent}\u{21b3} {note}\n")),
        }
    }
    out.push_str(&rule);
    out.push_str(&totals_row("Subtotal", &subtotal));
    for (label, amount) in &credits {
        out.push_str(&totals_row(label, amount));
    }
    out.push_str(&totals_row("Total", &total));
    out
}

/// The lines with those of one (SKU, meter) together, groups in order of first appearance and
/// lines in their own order within a group; `minimum` lines last. The rating already writes
/// lines in this order; the table does not rely on it.
fn grouped_lines(lines: &[Line]) -> Vec<&Line> {
    // (SKU, meter, is a reservation) → the group's lines.
    type Key<'a> = (Option<&'a str>, Option<MeterKind>, bool);
    let mut groups: Vec<(Key<'_>, Vec<&Line>)> = Vec::new();
    let mut minimums: Vec<&Line> = Vec::new();
    for l in lines {
        if l.kind == LineKind::Minimum {
            minimums.push(l);
            continue;
        }
        let key = (l.sku.as_deref(), l.meter, l.kind == LineKind::Reservation);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some(g) => g.1.push(l),
            None => groups.push((key, vec![l])),
        }
    }
    groups
        .into_iter()
        .flat_map(|g| g.1)
        .chain(minimums)
        .collect()
}
