//! The pricing models of a rate, in one place: their names in price books and how
//! each turns a window's canonical quantity into invoice-line contributions.
//!
//! Adding a model touches this module (a variant, its name in [`MODELS`], its arm in
//! the one `match` of pricing) and the price book's parser (its fields), nothing else.
//! The names live here; the pricing, which reads the price book's rates, in
//! `model/pricing.rs`.

mod pricing;

pub(crate) use pricing::Terms;

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
