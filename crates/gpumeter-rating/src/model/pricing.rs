//! How each model prices: a rate's [`Terms`] (its tier edges and package size in canonical
//! units) turn a stretch of a period's usage into [`Part`]s, in the one `match` on
//! [`RateModel`] of pricing. Apart from the model names (`model.rs`) because it reads the
//! price book's [`Rate`], which itself holds a [`RateModel`].

use crate::book::{Rate, Tier, TierLimit};

use super::RateModel;

/// What a rate's model makes of one stretch of a period's usage: one part per tier it touches
/// (one part for untiered models). Quantities are canonical units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Part {
    /// The tier, counted from 0; `None` for `per_unit` and `package`.
    pub tier: Option<usize>,
    /// Canonical units of the stretch in this part.
    pub quantity: u128,
    /// Of them, the units billed this period (the rest is the fragment carried on).
    pub billable: u128,
    /// What the line's amount multiplies by the unit price: `billable` canonical units, or
    /// the whole packages that begin in this part (`package`).
    pub count: u128,
    /// Price per pricing unit (per package), before a band's multiplier.
    pub unit_price: rust_decimal::Decimal,
    /// Canonical units per priced count: the pricing unit's factor, or `(1, 1)` for packages.
    pub factor: (u128, u128),
}

/// A rate with its tier edges and package size in canonical units (checked whole by the
/// price book).
#[derive(Debug, Clone)]
pub(crate) struct Terms<'a> {
    /// The rate.
    pub rate: &'a Rate,
    /// Each tier's inclusive upper edge in canonical units; `None` for `"inf"`.
    pub edges: Vec<Option<u128>>,
    /// `package_size` in canonical units (`package` only).
    pub package: Option<u128>,
}

/// `[lo, hi) ∩ [0, limit)` has this many units.
fn below(lo: u128, hi: u128, limit: u128) -> u128 {
    hi.min(limit).saturating_sub(lo)
}

impl Terms<'_> {
    /// The parts of the stretch `[cum, cum + q)` of the period's time-ordered usage (canonical
    /// units counted from the period's start, a carried-in fragment first), when the first
    /// `billable_total` units of the period are billed and the rest is carried on.
    /// `span_start` (`package` only) is where the package span holding the stretch began, in
    /// the same count (`span_start ≤ cum`).
    ///
    /// - `per_unit`: one part at the rate's unit price.
    /// - `graduated`: one part per tier the stretch crosses; tier `k` holds units
    ///   `(edge[k-1], edge[k]]` (`up_to` inclusive, as in Stripe, Lago and OpenMeter).
    /// - `volume`: one part in the tier that `billable_total` falls in (the first whose edge
    ///   is at least the total).
    /// - `package`: one part whose count is the packages that begin in the billed stretch,
    ///   counted from the span's start: with `s = cum − span_start`,
    ///   `⌈(s + billed) / size⌉ − ⌈s / size⌉`, so a span pays `⌈its billed units / size⌉`
    ///   packages however its usage is split into windows, bands and package rates.
    pub fn parts(&self, cum: u128, q: u128, billable_total: u128, span_start: u128) -> Vec<Part> {
        let r = self.rate;
        let units = (r.unit.factor_num(), r.unit.factor_den());
        let end = cum.saturating_add(q);
        let billable = below(cum, end, billable_total);
        let tier_price = |k: usize| r.tiers.get(k).map_or(r.unit_price, |t| t.unit_price);
        match r.model {
            RateModel::PerUnit => vec![Part {
                tier: None,
                quantity: q,
                billable,
                count: billable,
                unit_price: r.unit_price,
                factor: units,
            }],
            RateModel::Graduated => {
                let mut parts = Vec::new();
                let mut lo = 0u128;
                for (k, edge) in self.edges.iter().enumerate() {
                    let hi = edge.unwrap_or(u128::MAX);
                    let (a, b) = (cum.max(lo), end.min(hi));
                    if a < b {
                        let billed = below(a, b, billable_total);
                        parts.push(Part {
                            tier: Some(k),
                            quantity: b - a,
                            billable: billed,
                            count: billed,
                            unit_price: tier_price(k),
                            factor: units,
                        });
                    }
                    if edge.is_none() || hi >= end {
                        break;
                    }
                    lo = hi;
                }
                parts
            }
            RateModel::Volume => {
                let k = self
                    .edges
                    .iter()
                    .position(|e| e.is_none_or(|e| billable_total <= e))
                    .unwrap_or(self.edges.len().saturating_sub(1));
                vec![Part {
                    tier: Some(k),
                    quantity: q,
                    billable,
                    count: billable,
                    unit_price: tier_price(k),
                    factor: units,
                }]
            }
            RateModel::Package => {
                let size = self.package.unwrap_or(1).max(1);
                let before = cum.saturating_sub(span_start);
                let packages = (before + billable).div_ceil(size) - before.div_ceil(size);
                vec![Part {
                    tier: None,
                    quantity: q,
                    billable,
                    count: packages,
                    unit_price: r.unit_price,
                    factor: (1, 1),
                }]
            }
        }
    }

    /// The label of tier `k` on invoice lines: its number from 1 and its span in the pricing
    /// unit, `"1: 0–5000"`, `"2: 5000–inf"` (the lower edge excluded, the upper included).
    pub fn tier_label(&self, k: usize) -> String {
        let r = self.rate;
        let show = |t: Option<&Tier>| match t.map(|t| t.up_to) {
            Some(TierLimit::UpTo(d)) => d.to_string(),
            Some(TierLimit::Unbounded) => "inf".to_string(),
            None => "0".to_string(),
        };
        let lo = k.checked_sub(1).and_then(|j| r.tiers.get(j));
        format!("{}: {}–{}", k + 1, show(lo), show(r.tiers.get(k)))
    }
}
