//! The pricing models of a rate, in one place: their names in price books and how
//! each turns a window's canonical quantity into invoice-line contributions.
//!
//! Adding a model touches this module: a variant, its name in [`MODELS`], its answers to the
//! questions the rest of the crate asks of a model ([`RateModel::has_tiers`],
//! [`RateModel::priced_per_package`], [`RateModel::one_flat_fee_per_period`], each an
//! exhaustive `match`, so the compiler asks for the new model's), and its arm in the one
//! `match` of pricing (`model/pricing.rs`); then the price book's parser for any field of its
//! own. No other code tests for a model by name.

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

    /// Whether rates of this model price by tiers (`tiers = [...]` in the price book, and no
    /// `unit_price` of their own): graduated and volume.
    pub fn has_tiers(self) -> bool {
        match self {
            RateModel::Graduated | RateModel::Volume => true,
            RateModel::PerUnit | RateModel::Package => false,
        }
    }

    /// Whether rates of this model sell whole packages of `package_size` units (a
    /// `package_size` in the price book, a unit price per package, packages counted from
    /// the start of a run of such rates, paid packages remembered at contract close).
    pub fn priced_per_package(self) -> bool {
        match self {
            RateModel::Package => true,
            RateModel::PerUnit | RateModel::Graduated | RateModel::Volume => false,
        }
    }

    /// Whether a tier's flat fee is charged once per period whichever tiers the usage
    /// reached (volume: one tier prices everything), rather than once per tier reached
    /// (graduated).
    pub fn one_flat_fee_per_period(self) -> bool {
        match self {
            RateModel::Volume => true,
            RateModel::PerUnit | RateModel::Graduated | RateModel::Package => false,
        }
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
