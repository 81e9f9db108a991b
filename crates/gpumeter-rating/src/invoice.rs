//! The invoice document, `gpumeter.invoice/v1`, and its text rendering (in `invoice/text.rs`).

use std::collections::BTreeMap;

use gpumeter_core::{document_sha256, MeterKind, Quantity, Warning};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::error::RatingError;

mod text;

pub(crate) use text::{credit_amount, credit_label};

/// Schema id of the invoice document.
pub const INVOICE_SCHEMA: &str = "gpumeter.invoice/v1";

/// `gpumeter.invoice/v1`: one invoice per tenant and period, sorted by tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceDocument {
    /// Always [`INVOICE_SCHEMA`].
    pub schema: String,
    /// The invoices, by tenant name (bytewise).
    pub invoices: Vec<Invoice>,
    /// Extra facts of the document (extra keys only under `extensions`): the usage of
    /// [`gpumeter_core::IDLE`], listed apart and never invoiced. Absent when empty, so a
    /// document without idle usage is unchanged.
    #[serde(default, skip_serializing_if = "DocumentExtensions::is_empty")]
    pub extensions: DocumentExtensions,
}

/// An invoice document's `extensions` object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentExtensions {
    /// The usage of [`gpumeter_core::IDLE`] in the period (a report tenant, never
    /// invoiced nor finalized), `None` when the report has none there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleUsage>,
}

impl DocumentExtensions {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.idle.is_none()
    }
}

/// `extensions.idle` of an invoice document: what the GPUs measured while no tenant's kernel
/// ran (energy, PM-sampled SM activity, DRAM bytes), per device and meter, summed over the
/// period; listed for the provider, billed to no one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleUsage {
    /// The period the quantities are summed over (that of the document's invoices).
    pub period: Period,
    /// Quantities by device key and meter.
    pub usage: Vec<IdleRow>,
    /// Why it is listed apart (code `idle_not_invoiced`).
    pub warnings: Vec<Warning>,
}

/// One device and meter of [`IdleUsage`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleRow {
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
    /// Credits burned against the subtotal (empty until the credit bank applies grants); on a
    /// credit note, the credits it gives back of those its period burned, as entries with
    /// negative `credits` and `amount`. `total = subtotal − Σ amount` either way.
    pub credits_applied: Vec<CreditApplied>,
    /// `subtotal` − credits applied, never below zero.
    pub total: Decimal,
    /// Warnings: a code to act on and a message for people (loss, unpriced usage, the usage
    /// report's own warnings with their codes, the bank's reservations and credits). In JSON
    /// `{"code", "message"}`; a plain string is a warning of an invoice written before codes
    /// ([`gpumeter_core::WarningCode::Uncoded`]), read and written back as it was, so its
    /// `sha256` and the ledger's hash chain still verify.
    pub warnings: Vec<Warning>,
    /// The rated usage report's `sha256`.
    pub usage_sha256: String,
    /// Head of the bank's ledger hash chain after finalization; `null` for a preview.
    pub ledger_head: Option<String>,
    /// SHA-256 over the RFC 8785 canonical JSON of this invoice without this field.
    pub sha256: String,
    /// Extra facts (extra keys only under `extensions`): the billing-increment
    /// fragments carried in and out; on a supplement or credit note its kind and the invoices
    /// it supplements. Absent when empty, so invoices without increments are unchanged.
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
    /// `supplement` or `credit_note` on a later invoice of a finalized (tenant, period);
    /// absent on the period's first invoice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<InvoiceKind>,
    /// On a supplement or credit note: the period's first invoice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supplement_of: Option<InvoiceRef>,
    /// On a supplement or credit note: every earlier invoice of the period, in the order they
    /// were finalized (the first one first), each with its subtotal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<InvoiceRef>,
}

impl InvoiceExtensions {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.fragments_in.is_empty()
            && self.fragments_out.is_empty()
            && self.kind.is_none()
            && self.supplement_of.is_none()
            && self.earlier.is_empty()
    }
}

/// What a later invoice of a finalized (tenant, period) is: the
/// invoice's `extensions.kind`, absent on the period's first invoice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvoiceKind {
    /// Bills what the period's usage adds: the period rated on its cumulative usage, less what
    /// its earlier invoices billed; a subtotal of zero or more.
    Supplement,
    /// A supplement whose subtotal is negative (a volume tier re-chosen at a lower price, an
    /// invoice minimum no longer topped up): money owed back, never paid by credits.
    CreditNote,
}

impl InvoiceKind {
    /// `supplement` or `credit_note`, as in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            InvoiceKind::Supplement => "supplement",
            InvoiceKind::CreditNote => "credit_note",
        }
    }

    /// For people: `supplement`, `credit note`.
    pub fn label(self) -> &'static str {
        match self {
            InvoiceKind::Supplement => "supplement",
            InvoiceKind::CreditNote => "credit note",
        }
    }
}

/// An earlier invoice of the same (tenant, period), as a supplement names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvoiceRef {
    /// The invoice's `sha256`, as finalized (with its `ledger_head`).
    pub sha256: String,
    /// Its finalization key (SHA-256, lowercase hex), as the bank's `finalize:` transaction
    /// names it.
    pub finalization: String,
    /// Its subtotal; present in `extensions.earlier`, absent in `extensions.supplement_of`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtotal: Option<Decimal>,
}

/// A billing-increment fragment of one SKU and meter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fragment {
    /// The SKU id.
    pub sku: String,
    /// The meter.
    pub meter: MeterKind,
    /// Canonical units of the meter.
    pub quantity: Quantity,
}

/// Fragments below one billing increment carried between periods, per (tenant, SKU, meter),
/// in the meter's canonical units.
pub type CarriedFragments = BTreeMap<FragmentKey, u128>;

/// Whose fragment: a tenant's usage of one meter on one SKU.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FragmentKey {
    /// The tenant.
    pub tenant: String,
    /// The SKU id.
    pub sku: String,
    /// The meter.
    pub meter: MeterKind,
}

/// An invoice line's `extensions` object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineExtensions {
    /// Whole packages billed on a `package` line (`amount` = packages × `unit_price`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<Quantity>,
    /// On a usage line of a supplement or credit note: the signed changes of the line's
    /// quantities (its `quantity`, `billable_quantity` and `fragment_carried` are `null` there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<LineChange>,
}

impl LineExtensions {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.packages.is_none() && self.change.is_none()
    }
}

/// What a usage line of a supplement changes: per line key, the
/// period's cumulative rating less the sum of its earlier invoices, canonical units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineChange {
    /// The change of `quantity`.
    pub quantity: SignedQuantity,
    /// The change of `billable_quantity`.
    pub billable_quantity: SignedQuantity,
    /// The change of `fragment_carried`.
    pub fragment_carried: SignedQuantity,
    /// The change of the whole packages billed, on a `package` line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<SignedQuantity>,
}

/// A signed whole number of canonical units, `-(2^128 − 1)` to `2^128 − 1`: a decimal string
/// of digits with a leading `-` when negative (never `-0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SignedQuantity {
    /// Whether it is below zero (never for zero).
    pub negative: bool,
    /// Its absolute value.
    pub magnitude: u128,
}

impl SignedQuantity {
    /// `magnitude`, negative when `negative` and not zero.
    pub fn new(negative: bool, magnitude: u128) -> Self {
        SignedQuantity {
            negative: negative && magnitude != 0,
            magnitude,
        }
    }

    /// Whether it is zero.
    pub fn is_zero(self) -> bool {
        self.magnitude == 0
    }

    /// The value as a big integer.
    pub fn to_bigint(self) -> num_bigint::BigInt {
        let m = num_bigint::BigInt::from(self.magnitude);
        if self.negative {
            -m
        } else {
            m
        }
    }

    /// `v`, or `None` when its absolute value exceeds `u128`.
    pub fn from_bigint(v: &num_bigint::BigInt) -> Option<Self> {
        let magnitude = u128::try_from(v.magnitude().clone()).ok()?;
        Some(SignedQuantity::new(
            v.sign() == num_bigint::Sign::Minus,
            magnitude,
        ))
    }
}

impl std::fmt::Display for SignedQuantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.negative {
            write!(f, "-{}", self.magnitude)
        } else {
            write!(f, "{}", self.magnitude)
        }
    }
}

impl Serialize for SignedQuantity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for SignedQuantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let (negative, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s.as_str()),
        };
        let bad = || serde::de::Error::custom(format!("`{s}` is not a signed quantity"));
        if digits.is_empty()
            || !digits.bytes().all(|b| b.is_ascii_digit())
            || (digits.len() > 1 && digits.starts_with('0'))
        {
            return Err(bad());
        }
        let magnitude: u128 = digits.parse().map_err(|_| bad())?;
        if negative && magnitude == 0 {
            return Err(bad());
        }
        Ok(SignedQuantity::new(negative, magnitude))
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
    /// A tier's flat fee, charged once per period (`flat_fee`): `sku`, `meter` and
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

impl Line {
    /// The quantity column of the text and HTML renderings: the billable quantity in the
    /// pricing unit (`"2.663540640 SM·hour"`), `"flat fee"` for a flat-fee line, and for a
    /// `package` line the packages its amount multiplies (`"8.000000000 SM·hour = 1 package"`).
    /// Input text goes through `escape` (the rendering's own escaping).
    pub fn quantity_label(&self, escape: impl Fn(&str) -> String) -> String {
        let base = match (
            self.kind,
            &self.quantity_in_pricing_unit,
            &self.pricing_unit,
        ) {
            (LineKind::FlatFee, _, _) => return "flat fee".to_string(),
            (_, Some(q), Some(u)) => format!("{} {}", escape(q), escape(u)),
            (_, Some(q), None) => escape(q),
            _ => String::new(),
        };
        let changed = self.extensions.change.and_then(|c| c.packages);
        match (self.extensions.packages, changed) {
            (Some(Quantity(1)), _) => format!("{base} = 1 package"),
            (Some(p), _) => format!("{base} = {p} packages"),
            (None, Some(c)) if c.magnitude == 1 => format!("{base} = {} package", signed(c)),
            (None, Some(c)) => format!("{base} = {} packages", signed(c)),
            (None, None) => base,
        }
    }

    /// The note the text and HTML renderings write under a line that carries part of its usage
    /// to the next period (`None` when it carries nothing): `carried to the next period: 7 ns;
    /// billed 993 ns of 1000 ns`. On a supplement's line (`extensions.change`) the note gives
    /// the signed changes: `carried to the next period: -7 ns (change); billed +7 ns of +0 ns`.
    /// Input text (the unit) goes through `escape`.
    pub fn carried_note(&self, escape: impl Fn(&str) -> String) -> Option<String> {
        let unit = self.unit.as_deref().map(&escape).unwrap_or_default();
        if let Some(c) = &self.extensions.change {
            if c.fragment_carried.is_zero() {
                return None;
            }
            return Some(format!(
                "carried to the next period: {} {unit} (change); billed {} {unit} of {} {unit}",
                c.fragment_carried,
                signed(c.billable_quantity),
                signed(c.quantity)
            ));
        }
        let carried = self.fragment_carried.filter(|f| f.0 > 0)?;
        let billed = self
            .billable_quantity
            .map_or_else(String::new, |b| format!("; billed {b} {unit}"));
        let of = self
            .quantity
            .map_or_else(String::new, |q| format!(" of {q} {unit}"));
        Some(format!(
            "carried to the next period: {carried} {unit}{billed}{of}"
        ))
    }
}

/// A change with its sign written: `+7`, `-7`, `+0`.
fn signed(q: SignedQuantity) -> String {
    if q.negative {
        q.to_string()
    } else {
        format!("+{q}")
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

/// Credits burned against an invoice (filled by the credit bank; empty in a preview).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditApplied {
    /// The grant's id.
    pub grant: String,
    /// Credits burned (negative: given back by a credit note).
    pub credits: Decimal,
    /// Their value in the invoice's currency, at its scale (negative when given back).
    pub amount: Decimal,
}

impl Invoice {
    /// The digest this invoice should carry: SHA-256 (lowercase hex) over the RFC 8785
    /// canonical JSON of the invoice without `sha256`.
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

    /// For a supplement or credit note, what it supplements, for people: `supplement of invoice
    /// sha256 0123456789ab… (the period's first), after 2 earlier invoices billing 8.00`;
    /// `None` for the period's first invoice. Input text goes through `escape`.
    pub fn supplement_note(&self, escape: impl Fn(&str) -> String) -> Option<String> {
        let kind = self.extensions.kind?;
        let first = self.extensions.supplement_of.as_ref()?;
        let n = self.extensions.earlier.len();
        let billed: Decimal = self
            .extensions
            .earlier
            .iter()
            .filter_map(|e| e.subtotal)
            .sum();
        let mut billed = billed;
        if let Some(scale) = self.extensions.earlier.iter().find_map(|e| e.subtotal) {
            billed.rescale(scale.scale());
        }
        Some(format!(
            "{} of invoice sha256 {}… (the period's first), after {n} earlier invoice{} billing \
             {billed} {}",
            kind.label(),
            escape(short_hash(&first.sha256)),
            if n == 1 { "" } else { "s" },
            escape(&self.currency)
        ))
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
            extensions: DocumentExtensions::default(),
        }
    }

    /// The fragments every invoice carries out to the next period, per (tenant, SKU, meter),
    /// canonical units (from each invoice's `extensions.fragments_out`): what the bank keeps
    /// and passes back as the next period's `carried_in` ([`crate::rate`]).
    pub fn fragments_out(&self) -> CarriedFragments {
        let mut out = CarriedFragments::new();
        for inv in &self.invoices {
            for f in &inv.extensions.fragments_out {
                let key = FragmentKey {
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
}

fn short_hash(h: &str) -> &str {
    h.get(..12).unwrap_or(h)
}
