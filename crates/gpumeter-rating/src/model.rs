//! The pricing models of a rate, in one place: their names in price books and how
//! each turns a window's canonical quantity into invoice-line contributions.
//!
//! Adding a model touches this module (a variant, its name in [`MODELS`], its arm in
//! the one `match` of pricing) and the price book's parser (its fields), nothing else.

/// A rate's pricing model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum RateModel {
    /// One unit price for every unit (default).
    #[default]
    PerUnit,
    /// Tiers in the pricing unit; consumption accumulates in window order across the period,
    /// each unit priced by the tier it falls in (`up_to` inclusive).
    Graduated,
    /// One tier, picked by the period's billable total, prices every unit.
    Volume,
    /// Whole packages of `package_size` units, rounded up, `unit_price` per package.
    Package,
}

/// Every model with its name in price books; parsing and printing derive from this list.
pub const MODELS: &[(RateModel, &str)] = &[
    (RateModel::PerUnit, "per_unit"),
    (RateModel::Graduated, "graduated"),
    (RateModel::Volume, "volume"),
    (RateModel::Package, "package"),
];

impl RateModel {
    /// Parses a model name of [`MODELS`] (`"graduated"`).
    pub fn parse(text: &str) -> Option<RateModel> {
        MODELS.iter().find(|(_, n)| *n == text).map(|(m, _)| *m)
    }

    /// The model's name in price books.
    pub fn as_str(self) -> &'static str {
        MODELS
            .iter()
            .find(|(m, _)| *m == self)
            .map_or("", |(_, n)| n)
    }

    /// The names of all models, for messages: `per_unit, graduated, volume or package`.
    pub fn names() -> String {
        let names: Vec<&str> = MODELS.iter().map(|(_, n)| *n).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => names.join(""),
        }
    }
}

impl std::fmt::Display for RateModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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
    pub rate: &'a crate::book::Rate,
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
        let show = |t: Option<&crate::book::Tier>| match t.map(|t| t.up_to) {
            Some(crate::book::TierLimit::UpTo(d)) => d.to_string(),
            Some(crate::book::TierLimit::Unbounded) => "inf".to_string(),
            None => "0".to_string(),
        };
        let lo = k.checked_sub(1).and_then(|j| r.tiers.get(j));
        format!("{}: {}–{}", k + 1, show(lo), show(r.tiers.get(k)))
    }
}
