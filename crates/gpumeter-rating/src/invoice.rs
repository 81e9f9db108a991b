//! The invoice document, `gpumeter.invoice/v1` (DESIGN §7), and its text rendering.

use gpumeter_core::text::printable;
use gpumeter_core::{document_sha256, MeterKind, Quantity};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::rating::RatingError;

/// Schema id of the invoice document.
pub const INVOICE_SCHEMA: &str = "gpumeter.invoice/v1";

/// `gpumeter.invoice/v1`: one invoice per tenant and period, sorted by tenant (DESIGN §7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceDocument {
    /// Always [`INVOICE_SCHEMA`].
    pub schema: String,
    /// The invoices, by tenant name (bytewise).
    pub invoices: Vec<Invoice>,
}

/// One tenant's invoice for one period.
///
/// Amounts are decimal strings at the currency's scale (`"12.30"`, JPY `"5"`); quantities
/// are decimal strings of integers in the meter's canonical unit. `sha256` is the SHA-256 of
/// the RFC 8785 canonical JSON of this object without `sha256` ([`Invoice::seal`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invoice {
    /// The tenant billed.
    pub tenant: String,
    /// ISO 4217 code of the book's currency.
    pub currency: String,
    /// The period, half-open.
    pub period: Period,
    /// The price book used.
    pub price_book: PriceBookRef,
    /// Usage lines (by SKU id, meter, validity), then the minimum line if any.
    pub lines: Vec<Line>,
    /// Usage that could not be priced, by device key, meter and reason; not billed.
    pub unpriced: Vec<Unpriced>,
    /// Σ `lines[].amount`, at the currency's scale.
    pub subtotal: Decimal,
    /// Credits burned against the subtotal (always empty in rating v0: no bank).
    pub credits_applied: Vec<CreditApplied>,
    /// `subtotal` − credits applied, never below zero.
    pub total: Decimal,
    /// Warnings for people (loss, unpriced usage, the usage report's own warnings).
    pub warnings: Vec<String>,
    /// The rated usage report's `sha256`.
    pub usage_sha256: String,
    /// Head of the bank's ledger hash chain after finalization; `null` for a preview.
    pub ledger_head: Option<String>,
    /// SHA-256 over the RFC 8785 canonical JSON of this invoice without this field.
    pub sha256: String,
    /// Extra facts (DESIGN §7: extra keys only under `extensions`): the billing-increment
    /// fragments carried in and out. Absent when empty, so invoices without increments are
    /// unchanged.
    #[serde(default, skip_serializing_if = "InvoiceExtensions::is_empty")]
    pub extensions: InvoiceExtensions,
}

/// An invoice's `extensions` object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceExtensions {
    /// Fragments carried into this period (the previous period's unbilled tails), per SKU
    /// and meter, canonical units; included in the `quantity` of the period's first line of
    /// that SKU and meter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fragments_in: Vec<Fragment>,
    /// Fragments carried out of this period to the next, per SKU and meter, canonical units:
    /// Σ `fragment_carried` of the lines of that SKU and meter, plus any carried-in fragment
    /// that no rate in force could bill.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fragments_out: Vec<Fragment>,
}

impl InvoiceExtensions {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.fragments_in.is_empty() && self.fragments_out.is_empty()
    }
}

/// A billing-increment fragment of one SKU and meter (DESIGN §5 "Increments").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fragment {
    /// The SKU id.
    pub sku: String,
    /// The meter.
    pub meter: MeterKind,
    /// Canonical units of the meter.
    pub quantity: Quantity,
}

/// An invoice line's `extensions` object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineExtensions {
    /// Whole packages billed on a `package` line (`amount` = packages × `unit_price`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<Quantity>,
}

impl LineExtensions {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.packages.is_none()
    }
}

/// An invoice's period: `[from, to)`, RFC 3339 UTC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Period {
    /// Start, inclusive.
    pub from: String,
    /// End, exclusive.
    pub to: String,
}

/// The price book an invoice was rated with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriceBookRef {
    /// The book's `version`.
    pub version: String,
    /// SHA-256 of the book's bytes, lowercase hex.
    pub sha256: String,
}

/// What an invoice line bills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    /// Metered usage of one meter on one SKU.
    Usage,
    /// The pre-credit top-up to the book's invoice minimum.
    Minimum,
    /// A tier's flat fee, charged once per period (DESIGN §5 `flat_fee`): `sku`, `meter` and
    /// `tier` say which; `unit_price` and `amount` are the fee; quantities are `null`.
    FlatFee,
    /// A reservation fee (comes with the bank).
    Reservation,
}

/// One invoice line. For a `minimum` line every field but `kind` and `amount` is `null`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// What the line bills.
    pub kind: LineKind,
    /// The SKU id.
    pub sku: Option<String>,
    /// The meter.
    pub meter: Option<MeterKind>,
    /// The time-of-use band's name; `null` outside every band.
    pub band: Option<String>,
    /// The tier, `"2: 5000–inf"` (its number from 1 and its span in the pricing unit, lower
    /// edge excluded); `null` for untiered models.
    pub tier: Option<String>,
    /// Usage in the meter's canonical unit.
    pub quantity: Option<Quantity>,
    /// The canonical unit (`SM·ns`, `B`, …).
    pub unit: Option<String>,
    /// The book's pricing unit (`SM·hour`), with `·`.
    pub pricing_unit: Option<String>,
    /// `billable_quantity` in the pricing unit, 9 decimals, rounded half-even; for people
    /// only (the amount is computed from the canonical quantity).
    pub quantity_in_pricing_unit: Option<String>,
    /// Quantity billed, canonical unit: `quantity` less `fragment_carried`.
    pub billable_quantity: Option<Quantity>,
    /// Canonical units of this line's usage carried to the next period: the tail of the
    /// period's time-ordered usage below one billing increment.
    pub fragment_carried: Option<Quantity>,
    /// Price per pricing unit (per package), as written in the book, times the band's
    /// multiplier, exactly; the fee of a `flat_fee` line.
    pub unit_price: Option<Decimal>,
    /// round(billable_quantity × unit_price ÷ factor) at the currency's scale, rounded once
    /// (packages × unit_price for a `package` line; the fee for a `flat_fee` line).
    pub amount: Decimal,
    /// Extra facts (the packages of a `package` line); absent when empty.
    #[serde(default, skip_serializing_if = "LineExtensions::is_empty")]
    pub extensions: LineExtensions,
}

impl Line {
    /// A `minimum` line of `amount` (everything else `null`).
    pub fn minimum(amount: Decimal) -> Line {
        Line {
            kind: LineKind::Minimum,
            sku: None,
            meter: None,
            band: None,
            tier: None,
            quantity: None,
            unit: None,
            pricing_unit: None,
            quantity_in_pricing_unit: None,
            billable_quantity: None,
            fragment_carried: None,
            unit_price: None,
            amount,
            extensions: LineExtensions::default(),
        }
    }
}

/// Usage that no rate priced, listed so it is never silently dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unpriced {
    /// The device's id within its source, as in the usage report's rows.
    pub device: u32,
    /// The device's key in the usage report.
    pub device_key: String,
    /// The device's name, `null` when unknown.
    pub name: Option<String>,
    /// The meter.
    pub meter: MeterKind,
    /// Quantity in the meter's canonical unit, summed over the period.
    pub quantity: Quantity,
    /// Why it is not priced, for people.
    pub reason: String,
}

/// Credits burned against an invoice (filled by the bank; empty in rating v0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditApplied {
    /// The grant's id.
    pub grant: String,
    /// Credits burned.
    pub credits: Decimal,
    /// Their value in the invoice's currency, at its scale.
    pub amount: Decimal,
}

impl Invoice {
    /// The digest this invoice should carry: SHA-256 (lowercase hex) over the RFC 8785
    /// canonical JSON of the invoice without `sha256` (DESIGN §7).
    ///
    /// # Errors
    /// [`RatingError::Digest`] when serialization fails.
    pub fn digest(&self) -> Result<String, RatingError> {
        let v = serde_json::to_value(self).map_err(|e| RatingError::Digest(e.to_string()))?;
        document_sha256(&v, "sha256").map_err(|e| RatingError::Digest(e.to_string()))
    }

    /// Computes and stores `sha256`.
    ///
    /// # Errors
    /// [`RatingError::Digest`] when serialization fails.
    pub fn seal(&mut self) -> Result<(), RatingError> {
        self.sha256 = self.digest()?;
        Ok(())
    }

    /// Whether the stored `sha256` matches the invoice's content.
    pub fn verify_digest(&self) -> bool {
        self.digest().is_ok_and(|d| d == self.sha256)
    }
}

impl InvoiceDocument {
    /// A document of `invoices` with the schema id set.
    pub fn new(invoices: Vec<Invoice>) -> Self {
        InvoiceDocument {
            schema: INVOICE_SCHEMA.to_string(),
            invoices,
        }
    }

    /// The fragments every invoice carries out to the next period, per (tenant, SKU, meter),
    /// canonical units (from each invoice's `extensions.fragments_out`): what the bank keeps
    /// and passes back as the next period's `carried_in` ([`crate::rate`]).
    pub fn fragments_out(&self) -> crate::CarriedFragments {
        let mut out = crate::CarriedFragments::new();
        for inv in &self.invoices {
            for f in &inv.extensions.fragments_out {
                let key = crate::FragmentKey {
                    tenant: inv.tenant.clone(),
                    sku: f.sku.clone(),
                    meter: f.meter,
                };
                let slot = out.entry(key).or_insert(0);
                *slot = slot.saturating_add(f.quantity.0);
            }
        }
        out
    }

    /// Whether every invoice's `sha256` verifies.
    pub fn verify_digests(&self) -> bool {
        self.invoices.iter().all(Invoice::verify_digest)
    }

    /// The document as aligned text for people: per invoice a header (tenant, period,
    /// currency, price book), a table of lines (SKU | meter | quantity in the pricing unit |
    /// unit price | amount, numbers right-aligned), subtotal and total, then unpriced usage
    /// and warnings. Ends with a newline; `"no invoices\n"` for an empty document.
    ///
    /// Text from the inputs (tenant, SKU ids, the book's version, device keys and names,
    /// reasons, warnings) is escaped with [`gpumeter_core::text::printable`], so control
    /// characters and bidirectional overrides show as `\u{1b}`-style escapes and never reach a
    /// terminal raw; column widths are those of the escaped text.
    pub fn to_text_table(&self) -> String {
        if self.invoices.is_empty() {
            return "no invoices: no usage in the period\n".to_string();
        }
        let parts: Vec<String> = self.invoices.iter().map(invoice_text).collect();
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

fn short_hash(h: &str) -> &str {
    h.get(..12).unwrap_or(h)
}

/// Input text for the table: escaped ([`printable`]) and owned.
fn esc(s: &str) -> String {
    printable(s).into_owned()
}

fn invoice_text(inv: &Invoice) -> String {
    let mut out = String::new();
    out.push_str(&format!("Invoice for tenant {}\n", esc(&inv.tenant)));
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
        "  usage       sha256 {}…\n\n",
        esc(short_hash(&inv.usage_sha256))
    ));

    const ALIGN: [Align; 5] = [
        Align::Left,
        Align::Left,
        Align::Right,
        Align::Right,
        Align::Right,
    ];
    let header = [
        "SKU".to_string(),
        "Meter".to_string(),
        "Quantity".to_string(),
        "Unit price".to_string(),
        format!("Amount {}", esc(&inv.currency)),
    ];
    let mut rows: Vec<[String; 5]> = Vec::new();
    for l in &inv.lines {
        let row = match l.kind {
            LineKind::Minimum => [
                "minimum".to_string(),
                "(top-up to the invoice minimum)".to_string(),
                String::new(),
                String::new(),
                l.amount.to_string(),
            ],
            LineKind::Usage | LineKind::Reservation | LineKind::FlatFee => {
                let mut meter = l.meter.map_or_else(String::new, |m| m.to_string());
                if let Some(b) = &l.band {
                    meter.push_str(&format!(", band {}", esc(b)));
                }
                if let Some(t) = &l.tier {
                    meter.push_str(&format!(", tier {}", esc(t)));
                }
                if l.kind == LineKind::Reservation {
                    meter = format!("reservation {meter}");
                }
                if l.kind == LineKind::FlatFee {
                    meter.push_str(" (flat fee)");
                }
                let quantity = match (&l.quantity_in_pricing_unit, &l.pricing_unit) {
                    (Some(q), Some(u)) => format!("{} {}", esc(q), esc(u)),
                    (Some(q), None) => esc(q),
                    _ => String::new(),
                };
                [
                    l.sku.as_deref().map(esc).unwrap_or_default(),
                    meter,
                    quantity,
                    l.unit_price.map_or_else(String::new, |p| p.to_string()),
                    l.amount.to_string(),
                ]
            }
        };
        rows.push(row);
    }
    let subtotal = inv.subtotal.to_string();
    let total = inv.total.to_string();
    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(rows.iter()) {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(width(cell));
        }
    }
    widths[3] = widths[3].max(width("Subtotal"));
    widths[4] = widths[4].max(width(&subtotal)).max(width(&total));

    let render = |cells: &[String; 5]| -> String {
        let parts: Vec<String> = cells
            .iter()
            .zip(widths.iter())
            .zip(ALIGN.iter())
            .map(|((c, &w), &a)| pad(c, w, a))
            .collect();
        format!("  {}\n", parts.join("  ").trim_end())
    };
    out.push_str(&render(&header));
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    out.push_str(&format!("  {}\n", rule.join("  ")));
    if rows.is_empty() {
        out.push_str("  (no billable usage)\n");
    }
    for row in &rows {
        out.push_str(&render(row));
    }
    out.push_str(&format!("  {}\n", rule.join("  ")));
    let totals_row = |label: &str, amount: &str| {
        render(&[
            String::new(),
            String::new(),
            String::new(),
            label.to_string(),
            amount.to_string(),
        ])
    };
    out.push_str(&totals_row("Subtotal", &subtotal));
    for c in &inv.credits_applied {
        out.push_str(&totals_row(
            &format!("Credits {}", esc(&c.grant)),
            &format!("-{}", c.amount),
        ));
    }
    out.push_str(&totals_row("Total", &total));

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
