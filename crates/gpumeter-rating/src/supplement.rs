//! Supplements: a later invoice of a finalized (tenant, period) bills
//! the period's usage rated at once, less what the period's earlier invoices billed, per line.
//!
//! The caller (the credit bank) rates the period's cumulative usage with [`crate::rate`] and
//! the carried-in fragments of the period's first invoice, then [`PeriodLines::supplement_lines`]
//! turns that rating and the earlier invoices into the supplement's lines: per [`LineKey`] the
//! cumulative amount less the sum already billed, each already rounded, so nothing is rounded
//! twice; the minimum and the flat fees are in the cumulative rating once, so their difference
//! is what is still owed; a volume tier re-chosen gives the old tier's line a negative change.
//! Quantities change likewise ([`crate::LineChange`]). The invoices of a period therefore sum,
//! per line key and in their subtotals, to the rating of all its usage at once, to the cent,
//! in any order and split.

use std::collections::BTreeMap;

use gpumeter_core::{MeterKind, Quantity};
use num_bigint::BigInt;
use num_traits::{Signed, Zero};
use rust_decimal::Decimal;

use crate::error::RatingError;
use crate::invoice::{
    Invoice, Line, LineChange, LineExtensions, LineKind, SignedQuantity, Unpriced,
};
use crate::money::quantity_in_unit;
use crate::rating::PRICING_UNIT_DECIMALS;
use crate::units::PricingUnit;

/// What identifies a line across the invoices of one (tenant, period): its kind, SKU, meter,
/// band, tier, unit price and pricing unit. Two rates of one SKU and meter in one period (a
/// price change) give two keys by their unit prices; two lines of one key in one invoice (two
/// rates of one price) are summed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LineKey {
    /// `usage`, `flat_fee`, `minimum` (as in the JSON).
    pub kind: &'static str,
    /// The SKU id.
    pub sku: Option<String>,
    /// The meter.
    pub meter: Option<MeterKind>,
    /// The band's name.
    pub band: Option<String>,
    /// The tier's label.
    pub tier: Option<String>,
    /// The unit price, normalized (`0.50` and `0.5` are one price).
    pub unit_price: Option<Decimal>,
    /// The pricing unit.
    pub pricing_unit: Option<String>,
}

impl LineKey {
    /// The key of `line`; `None` for a `reservation` line, which rating does not make (the
    /// bank bills a reservation's fee once per period).
    pub fn of(line: &Line) -> Option<LineKey> {
        let kind = match line.kind {
            LineKind::Usage => "usage",
            LineKind::FlatFee => "flat_fee",
            LineKind::Minimum => "minimum",
            LineKind::Reservation => return None,
        };
        Some(LineKey {
            kind,
            sku: line.sku.clone(),
            meter: line.meter,
            band: line.band.clone(),
            tier: line.tier.clone(),
            unit_price: line.unit_price.map(|p| p.normalize()),
            pricing_unit: line.pricing_unit.clone(),
        })
    }
}

/// What the invoices of a period billed under one [`LineKey`]: the first invoice's quantities
/// plus each supplement's changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineTotals {
    /// Σ `quantity`, canonical units.
    pub quantity: BigInt,
    /// Σ `billable_quantity`.
    pub billable_quantity: BigInt,
    /// Σ `fragment_carried`.
    pub fragment_carried: BigInt,
    /// Σ packages, on a `package` line.
    pub packages: Option<BigInt>,
    /// Σ `amount`.
    pub amount: Decimal,
}

/// The lines a (tenant, period) billed so far, summed per [`LineKey`] in order of first
/// appearance: what [`PeriodLines::supplement_lines`] subtracts from the cumulative rating.
#[derive(Debug, Clone, Default)]
pub struct PeriodLines {
    order: Vec<LineKey>,
    entries: BTreeMap<LineKey, (Line, LineTotals)>,
}

/// A quantity of a line as a big integer: the line's own, or its change on a supplement.
fn part(q: Option<Quantity>, change: Option<SignedQuantity>) -> BigInt {
    match (q, change) {
        (Some(q), _) => BigInt::from(q.0),
        (None, Some(c)) => c.to_bigint(),
        (None, None) => BigInt::zero(),
    }
}

impl PeriodLines {
    /// No lines yet.
    pub fn new() -> Self {
        PeriodLines::default()
    }

    /// The lines of one invoice of the period, summed per key.
    ///
    /// # Errors
    /// As [`PeriodLines::add`].
    pub fn of(inv: &Invoice) -> Result<Self, RatingError> {
        let mut p = PeriodLines::new();
        p.add(inv)?;
        Ok(p)
    }

    /// Adds an invoice of the period: a first invoice's lines with their quantities, a
    /// supplement's with their changes. `reservation` lines are left out.
    ///
    /// # Errors
    /// [`RatingError::AmountOverflow`] when a key's amounts sum past what a decimal holds.
    pub fn add(&mut self, inv: &Invoice) -> Result<(), RatingError> {
        for line in &inv.lines {
            let Some(key) = LineKey::of(line) else {
                continue;
            };
            let change = line.extensions.change;
            let quantity = part(line.quantity, change.map(|c| c.quantity));
            let billable = part(line.billable_quantity, change.map(|c| c.billable_quantity));
            let fragment = part(line.fragment_carried, change.map(|c| c.fragment_carried));
            let packages = match (line.extensions.packages, change.and_then(|c| c.packages)) {
                (Some(p), _) => Some(BigInt::from(p.0)),
                (None, Some(c)) => Some(c.to_bigint()),
                (None, None) => None,
            };
            if !self.entries.contains_key(&key) {
                self.order.push(key.clone());
            }
            let (_, totals) = self.entries.entry(key).or_insert_with(|| {
                (
                    line.clone(),
                    LineTotals {
                        quantity: BigInt::zero(),
                        billable_quantity: BigInt::zero(),
                        fragment_carried: BigInt::zero(),
                        packages: None,
                        amount: Decimal::ZERO,
                    },
                )
            });
            totals.quantity += quantity;
            totals.billable_quantity += billable;
            totals.fragment_carried += fragment;
            if let Some(p) = packages {
                *totals.packages.get_or_insert_with(BigInt::zero) += p;
            }
            totals.amount = totals.amount.checked_add(line.amount).ok_or_else(|| {
                RatingError::AmountOverflow {
                    tenant: inv.tenant.clone(),
                    what: "the period's lines of one key".into(),
                    minor_units: "more than a decimal holds".into(),
                    currency: inv.currency.clone(),
                }
            })?;
        }
        Ok(())
    }

    /// The keys in order of first appearance, with their totals.
    pub fn totals(&self) -> impl Iterator<Item = (&LineKey, &LineTotals)> {
        self.order
            .iter()
            .filter_map(|k| self.entries.get(k).map(|(_, t)| (k, t)))
    }

    /// Σ the `quantity` of the `usage` lines of `sku` and `meter`, canonical units.
    pub fn usage_quantity(&self, sku: &str, meter: MeterKind) -> BigInt {
        self.totals()
            .filter(|(k, _)| k.kind == "usage" && k.sku.as_deref() == Some(sku))
            .filter(|(k, _)| k.meter == Some(meter))
            .map(|(_, t)| t.quantity.clone())
            .sum()
    }

    /// The lines of a supplement: per key, `cumulative`'s line less what this period billed,
    /// keys in `cumulative`'s order, then the keys it no longer has (their changes negative);
    /// a key that changes nothing is left out.
    ///
    /// A `usage` line of the supplement has `null` quantities and its signed changes in
    /// `extensions.change`; `quantity_in_pricing_unit` is the signed change of the billable
    /// quantity in the pricing unit (9 decimals). `flat_fee` and `minimum` lines change their
    /// amount only. Every other field is the line's, as in the cumulative rating (or, for a key
    /// it no longer has, as billed before).
    ///
    /// # Errors
    /// [`RatingError::QuantityOverflow`] for a change beyond ±(2^128 − 1);
    /// [`RatingError::AmountOverflow`] for an amount beyond a decimal.
    pub fn supplement_lines(&self, cumulative: &Invoice) -> Result<Vec<Line>, RatingError> {
        let now = PeriodLines::of(cumulative)?;
        let mut keys: Vec<&LineKey> = now.order.iter().collect();
        keys.extend(self.order.iter().filter(|k| !now.entries.contains_key(*k)));
        let zero = LineTotals {
            quantity: BigInt::zero(),
            billable_quantity: BigInt::zero(),
            fragment_carried: BigInt::zero(),
            packages: None,
            amount: Decimal::ZERO,
        };
        let mut out = Vec::new();
        for key in keys {
            let (template, after) = match now.entries.get(key) {
                Some((line, totals)) => (line, totals),
                None => match self.entries.get(key) {
                    Some((line, _)) => (line, &zero),
                    None => continue,
                },
            };
            let before = self.entries.get(key).map_or(&zero, |(_, t)| t);
            let overflow = || RatingError::QuantityOverflow {
                tenant: cumulative.tenant.clone(),
                sku: key.sku.clone().unwrap_or_default(),
                meter: key.meter.unwrap_or(MeterKind::KernelNs),
            };
            let signed =
                |a: &BigInt, b: &BigInt| SignedQuantity::from_bigint(&(a - b)).ok_or_else(overflow);
            let mut amount = after.amount.checked_sub(before.amount).ok_or_else(|| {
                RatingError::AmountOverflow {
                    tenant: cumulative.tenant.clone(),
                    what: "a supplement's line".into(),
                    minor_units: "more than a decimal holds".into(),
                    currency: cumulative.currency.clone(),
                }
            })?;
            amount.rescale(template.amount.scale());
            let mut line = Line {
                quantity: None,
                billable_quantity: None,
                fragment_carried: None,
                amount,
                extensions: LineExtensions::default(),
                ..template.clone()
            };
            if key.kind == "usage" {
                let packages = match (&after.packages, &before.packages) {
                    (None, None) => None,
                    (a, b) => {
                        let z = BigInt::zero();
                        Some(signed(a.as_ref().unwrap_or(&z), b.as_ref().unwrap_or(&z))?)
                    }
                };
                let change = LineChange {
                    quantity: signed(&after.quantity, &before.quantity)?,
                    billable_quantity: signed(&after.billable_quantity, &before.billable_quantity)?,
                    fragment_carried: signed(&after.fragment_carried, &before.fragment_carried)?,
                    packages,
                };
                line.quantity_in_pricing_unit = template
                    .pricing_unit
                    .as_deref()
                    .and_then(PricingUnit::parse)
                    .map(|u| {
                        let b = change.billable_quantity;
                        let text = quantity_in_unit(b.magnitude, &u, PRICING_UNIT_DECIMALS);
                        if b.negative {
                            format!("-{text}")
                        } else {
                            text
                        }
                    });
                let unchanged = change.quantity.is_zero()
                    && change.billable_quantity.is_zero()
                    && change.fragment_carried.is_zero()
                    && change.packages.is_none_or(SignedQuantity::is_zero);
                if unchanged && amount.is_zero() {
                    continue;
                }
                line.extensions.change = Some(change);
            } else if amount.is_zero() {
                continue;
            }
            out.push(line);
        }
        Ok(out)
    }
}

/// The unpriced usage a supplement adds: per (device key, meter, reason), `cumulative`'s
/// quantity less the sum of the `earlier` invoices' (what is new), in `cumulative`'s order;
/// only positive changes (unpriced usage only grows with the period's usage).
pub fn unpriced_change(earlier: &[&Invoice], cumulative: &Invoice) -> Vec<Unpriced> {
    let mut before: BTreeMap<(&str, MeterKind, &str), BigInt> = BTreeMap::new();
    for inv in earlier {
        for u in &inv.unpriced {
            *before
                .entry((u.device_key.as_str(), u.meter, u.reason.as_str()))
                .or_insert_with(BigInt::zero) += BigInt::from(u.quantity.0);
        }
    }
    cumulative
        .unpriced
        .iter()
        .filter_map(|u| {
            let had = before
                .get(&(u.device_key.as_str(), u.meter, u.reason.as_str()))
                .cloned()
                .unwrap_or_default();
            let added = BigInt::from(u.quantity.0) - had;
            if !added.is_positive() {
                return None;
            }
            let q = u128::try_from(added).ok()?;
            Some(Unpriced {
                quantity: Quantity(q),
                ..u.clone()
            })
        })
        .collect()
}
