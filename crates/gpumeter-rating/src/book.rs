//! The price book, `gpumeter.pricebook/v1`: its TOML format, its types and its
//! validation.
//!
//! A price book is parsed and validated in one step ([`PriceBook::from_toml_str`],
//! [`PriceBook::from_path`]); a [`PriceBook`] value is always valid: the rater relies on every
//! rule (tier order, model/field consistency, whole canonical increments, package sizes and
//! tier edges, one increment per SKU and meter, bands that never meet on one rate, exact
//! price × multiplier products). Every error names the file, the line and column of the
//! offending key, the table (`rate[3]`, counting each `[[rate]]` from 0 in file order), the
//! field and the value ([`PriceBookError`]);
//! `docs/decisions/rating-price-book-validation.md` lists the rules.
//!
//! The parts, in the order a book is read: `error.rs` ([`PriceBookError`] and the line and
//! column of each key), `read.rs` (typed fields of one TOML table), `parse.rs` (the tables
//! into [`Sku`]s, [`Rate`]s and [`Band`]s), `validate.rs` (the rules between fields and
//! tables) and `query.rs` (what a valid book answers).
//!
//! Every price-book feature is rated: the models ([`RateModel`], in [`crate::model`]), tiers with
//! their flat fees, time-of-use bands, billing increments and effective dating.

use std::path::Path;

use chrono::Weekday;
use gpumeter_core::MeterKind;
use rust_decimal::Decimal;
use sha2::{Digest, Sha256};

use crate::currency::Currency;
pub use crate::model::RateModel;
use crate::money::Rounding;
use crate::units::PricingUnit;

use error::{at, Ctx, LineIndex, Locator};
use parse::parse_book;

/// Schema id a price book must declare (`schema = "gpumeter.pricebook/v1"`).
pub const PRICEBOOK_SCHEMA: &str = "gpumeter.pricebook/v1";

mod error;
mod parse;
mod query;
mod read;
#[cfg(test)]
mod tests;
mod validate;

pub use error::PriceBookError;

/// One SKU match pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SkuPattern {
    /// The exact device name (`"NVIDIA H100 80GB HBM3"`).
    Exact(String),
    /// A prefix of the device name, written with a trailing `*` (`"NVIDIA H100*"`); the
    /// string held is the prefix without the `*`.
    Prefix(String),
    /// `"*"`: a deliberate fallback matching every named device.
    Any,
}

/// How strongly a pattern matches a device name; a greater rank wins: an exact name beats
/// every prefix, a longer prefix beats a shorter one, and `"*"` is the last resort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MatchRank {
    /// Matched by `"*"`.
    Fallback,
    /// Matched by a prefix of this many bytes.
    Prefix(usize),
    /// Matched by the exact name.
    Exact,
}

impl SkuPattern {
    /// Parses a pattern: `"*"`, a prefix ending in `*`, or an exact name. A `*` anywhere
    /// but at the end, and an empty pattern, are errors (the message says why).
    ///
    /// # Errors
    /// A reason for people when the pattern is empty or has a `*` before its end.
    pub fn parse(text: &str) -> Result<SkuPattern, String> {
        if text.is_empty() {
            return Err("an empty pattern matches nothing".to_string());
        }
        if text == "*" {
            return Ok(SkuPattern::Any);
        }
        let (body, prefix) = match text.strip_suffix('*') {
            Some(p) => (p, true),
            None => (text, false),
        };
        if body.contains('*') {
            return Err(
                "`*` may only end a pattern (a prefix such as \"NVIDIA H100*\") or be the whole \
                 pattern (\"*\")"
                    .to_string(),
            );
        }
        Ok(if prefix {
            SkuPattern::Prefix(body.to_string())
        } else {
            SkuPattern::Exact(body.to_string())
        })
    }

    /// How this pattern matches `device_name`, `None` when it does not.
    pub fn rank(&self, device_name: &str) -> Option<MatchRank> {
        match self {
            SkuPattern::Exact(n) => (n == device_name).then_some(MatchRank::Exact),
            SkuPattern::Prefix(p) => device_name
                .starts_with(p.as_str())
                .then_some(MatchRank::Prefix(p.len())),
            SkuPattern::Any => Some(MatchRank::Fallback),
        }
    }
}

impl std::fmt::Display for SkuPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkuPattern::Exact(n) => f.write_str(n),
            SkuPattern::Prefix(p) => write!(f, "{p}*"),
            SkuPattern::Any => f.write_str("*"),
        }
    }
}

/// A `[[sku]]`: what a device is sold as, and which device names it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sku {
    /// Position among the book's `[[sku]]` tables, from 0.
    pub index: usize,
    /// The SKU's id (`"h100-sxm"`), unique in the book.
    pub id: String,
    /// Its match patterns, as written.
    pub patterns: Vec<SkuPattern>,
}

impl Sku {
    /// The best rank among this SKU's patterns for `device_name`, `None` when none matches.
    pub fn rank(&self, device_name: &str) -> Option<MatchRank> {
        self.patterns
            .iter()
            .filter_map(|p| p.rank(device_name))
            .max()
    }
}

/// A tier's upper bound, inclusive, in the rate's pricing unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TierLimit {
    /// Up to and including this many pricing units.
    UpTo(Decimal),
    /// `"inf"`: no upper bound (the last tier).
    Unbounded,
}

/// One tier of a tiered rate ([`RateModel::Graduated`] or [`RateModel::Volume`]).
///
/// Validation guarantees: the tiers of a rate have strictly increasing bounds, the first
/// bound is above 0, only the last is [`TierLimit::Unbounded`] and it is; every finite bound
/// is a whole number of canonical units that fits a `u128` ([`Tier::up_to_canonical`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Tier {
    /// Inclusive upper bound in the pricing unit.
    pub up_to: TierLimit,
    /// The same bound in the meter's canonical unit (ns, SM·ns, B, …), inclusive:
    /// `Some(n)` for [`TierLimit::UpTo`], `None` for [`TierLimit::Unbounded`] (`"inf"`).
    /// Computed once by validation with [`PricingUnit::to_canonical`], so the rater compares
    /// canonical quantities with it directly.
    pub up_to_canonical: Option<u128>,
    /// Price per pricing unit in this tier, non-negative.
    pub unit_price: Decimal,
    /// Charged once per period, as its own invoice line, for each tier the period's quantity
    /// reaches ([`RateModel::Graduated`]) or for the one tier it falls in
    /// ([`RateModel::Volume`]); at most the currency's scale (Stripe's and Lago's flat amount
    /// per tier).
    pub flat_fee: Option<Decimal>,
}

/// A `[[rate]]`: the price of one meter on one SKU, per pricing unit, over a validity span.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rate {
    /// Position among the book's `[[rate]]` tables, from 0.
    pub index: usize,
    /// The SKU's id.
    pub sku: String,
    /// The meter priced.
    pub meter: MeterKind,
    /// The pricing unit, of the meter's dimension.
    pub unit: PricingUnit,
    /// Price per `unit` (per package for [`RateModel::Package`]), non-negative, in the book's
    /// currency, as written (its scale kept). With tiers: the first tier's price (a written
    /// `unit_price` must equal it numerically).
    pub unit_price: Decimal,
    /// The pricing model.
    pub model: RateModel,
    /// Tiers, ordered, the last one unbounded: at least one for `graduated` and `volume`,
    /// empty for `per_unit` and `package` (see [`Tier`] for what validation guarantees).
    pub tiers: Vec<Tier>,
    /// Billing increment in `unit`, a whole number of canonical units above 0; `None`: one
    /// canonical unit. Every rate of one (SKU, meter) has the same increment in canonical
    /// units (it is applied once per tenant, SKU, meter and period).
    pub increment: Option<Decimal>,
    /// [`Rate::increment`] in the meter's canonical unit (`"0.001"` hour → 3 600 000 000 ns),
    /// always ≥ 1; `None` when the rate has no increment (which means 1 canonical unit).
    pub increment_canonical: Option<u128>,
    /// Package size in `unit`, present exactly for [`RateModel::Package`]: a whole number of
    /// canonical units above 0. `unit_price` is then the price of one package.
    pub package_size: Option<Decimal>,
    /// [`Rate::package_size`] in the meter's canonical unit, ≥ 1; `Some` exactly for
    /// [`RateModel::Package`].
    pub package_size_canonical: Option<u128>,
    /// Start of validity, ns since the Unix epoch, inclusive; `None`: always.
    pub valid_from: Option<u64>,
    /// End of validity, ns since the Unix epoch, exclusive; `None`: forever.
    pub valid_to: Option<u64>,
}

impl Rate {
    /// Whether the rate is in force at instant `t_ns` (ns since the epoch): the half-open
    /// span `[valid_from, valid_to)`.
    pub fn valid_at(&self, t_ns: u64) -> bool {
        self.valid_from.is_none_or(|f| f <= t_ns) && self.valid_to.is_none_or(|t| t_ns < t)
    }
}

/// A `[[band]]`: a time-of-use multiplier of unit prices in the windows it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Band {
    /// Position among the book's `[[band]]` tables, from 0.
    pub index: usize,
    /// The band's name (`"off-peak"`).
    pub name: String,
    /// IANA time zone (`"Asia/Shanghai"`) from the tz database compiled into `chrono-tz`.
    pub tz: chrono_tz::Tz,
    /// Local weekdays at window start; empty: every day.
    pub days: Vec<Weekday>,
    /// Local start of the band, minutes after midnight (0..1440).
    pub start_minute: u32,
    /// Local end of the band, minutes after midnight (0..=1440), exclusive; below
    /// `start_minute` when the band wraps midnight.
    pub end_minute: u32,
    /// Multiplier of unit prices in matching windows.
    pub multiplier: Decimal,
    /// Meters the band applies to; empty: every meter.
    pub meters: Vec<MeterKind>,
    /// SKU ids the band applies to; empty: every SKU.
    pub skus: Vec<String>,
}

/// A validated price book.
///
/// Built only by [`PriceBook::from_toml_str`] or [`PriceBook::from_path`], which validate
/// everything, so every value of this type is a usable book.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriceBook {
    name: String,
    sha256: String,
    version: String,
    currency: Currency,
    rounding: Rounding,
    invoice_minimum: Option<Decimal>,
    invoice_minimum_minor: Option<u128>,
    skus: Vec<Sku>,
    /// `(line, column)` of each SKU's `match` key, for errors found after parsing.
    sku_match_at: Vec<(u32, u32)>,
    rates: Vec<Rate>,
    bands: Vec<Band>,
    /// `(line, column)` of the keys that rating checks against the usage's windows
    /// (`rate[i].valid_from`, `rate[i].valid_to`, `band[i].hours`), for its errors.
    window_keys_at: std::collections::BTreeMap<String, (u32, u32)>,
}

impl PriceBook {
    /// Parses and validates a price book from its TOML text. `name` names the file in
    /// errors (the path as the user gave it); [`PriceBook::sha256`] is taken over
    /// `text`'s UTF-8 bytes.
    ///
    /// ```
    /// let book = gpumeter_rating::PriceBook::from_toml_str("book.toml", r#"
    /// schema = "gpumeter.pricebook/v1"
    /// version = "2026-12"
    /// currency = "USD"
    /// [[sku]]
    /// id = "h100"
    /// match = ["NVIDIA H100*"]
    /// [[rate]]
    /// sku = "h100"
    /// meter = "sm_ns"
    /// unit = "SM*hour"
    /// unit_price = "0.0175"
    /// "#)?;
    /// assert_eq!(book.currency().scale(), 2);
    /// assert_eq!(book.rates()[0].unit.name(), "SM·hour");
    /// # Ok::<(), gpumeter_rating::PriceBookError>(())
    /// ```
    ///
    /// # Errors
    /// [`PriceBookError`] naming the file, table, field and value: TOML syntax, unknown
    /// keys, missing or malformed fields, a schema other than [`PRICEBOOK_SCHEMA`], a currency
    /// not in the ISO 4217 table, an invoice minimum finer than the currency's minor unit, a
    /// duplicate SKU id or match pattern, a rate naming an unknown SKU, meter or unit or a unit
    /// of another dimension, overlapping validity of two rates for one SKU and meter, tiers
    /// that are unordered, overlapping, empty or not ending in `"inf"`, fields that do not fit
    /// the model, tier edges, increments and package sizes that are not whole canonical units
    /// (or beyond `u128`), increments that differ between rates of one SKU and meter, flat fees
    /// finer than the minor unit, bands that can both apply to one rate at one instant, and a
    /// price × band multiplier a [`Decimal`] cannot hold exactly. Each error has the line and
    /// column of the offending key ([`PriceBookError::location`]).
    pub fn from_toml_str(name: &str, text: &str) -> Result<PriceBook, PriceBookError> {
        let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
        let top: toml::Table = toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map_or((1, 1), |span| LineIndex::new(text).place(span.start));
            PriceBookError::Syntax {
                file: name.to_string(),
                line,
                column,
                message: e.to_string().trim_end().to_string(),
            }
        })?;
        let loc = Locator::new(text);
        let ctx = Ctx {
            file: name,
            loc: &loc,
        };
        let mut book = parse_book(&ctx, &top)?;
        book.sha256 = sha256;
        for r in &book.rates {
            for field in ["valid_from", "valid_to"] {
                let table = format!("rate[{}]", r.index);
                book.window_keys_at
                    .insert(at(&table, field), loc.find(&table, field));
            }
        }
        for b in &book.bands {
            let table = format!("band[{}]", b.index);
            book.window_keys_at
                .insert(at(&table, "hours"), loc.find(&table, "hours"));
        }
        Ok(book)
    }

    /// Reads, parses and validates the price book at `path` (see
    /// [`PriceBook::from_toml_str`]); errors name the path as given.
    ///
    /// # Errors
    /// [`PriceBookError::Io`] when the file cannot be read, [`PriceBookError::NotUtf8`] when
    /// it is not UTF-8, and every error of [`PriceBook::from_toml_str`].
    pub fn from_path(path: &Path) -> Result<PriceBook, PriceBookError> {
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| PriceBookError::Io {
            file: file.clone(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|e| PriceBookError::NotUtf8 {
            file: file.clone(),
            reason: e.utf8_error().to_string(),
        })?;
        PriceBook::from_toml_str(&file, &text)
    }
}
