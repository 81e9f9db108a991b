//! The price book, `gpumeter.pricebook/v1`: its TOML format, its types and its
//! validation.
//!
//! A price book is parsed and validated in one step ([`PriceBook::from_toml_str`],
//! [`PriceBook::from_path`]); a [`PriceBook`] value is always valid: the rater relies on every
//! rule (tier order, model/field consistency, whole canonical increments, package sizes and
//! tier edges, one increment per SKU and meter, bands that never meet on one rate, exact
//! price × multiplier products). Every error names the file, the line and column of the
//! offending key, the table (`rate[3]`, counting each `[[rate]]` from 0 in file order), the
//! field and the value ([`PriceBookError`]); `docs/DECISIONS.md` "Price book validation" lists
//! the rules.
//!
//! Every price-book feature is rated: the models ([`RateModel`], in [`crate::model`]), tiers with
//! their flat fees, time-of-use bands, billing increments and effective dating.

use std::collections::HashMap;
use std::path::Path;

use chrono::Weekday;
use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::{MeterKind, Warning, WarningCode};
use rust_decimal::Decimal;
use sha2::{Digest, Sha256};

use crate::currency::Currency;
use crate::error::RatingError;
pub use crate::model::RateModel;
use crate::money::{decimal_to_minor_units, Rounding};
use crate::units::PricingUnit;

/// Schema id a price book must declare (`schema = "gpumeter.pricebook/v1"`).
pub const PRICEBOOK_SCHEMA: &str = "gpumeter.pricebook/v1";

/// Top-level keys a price book may have. `extensions` is a free table for the book's owner
/// (extra keys only under `extensions`); it is ignored.
const TOP_KEYS: &[&str] = &[
    "schema",
    "version",
    "currency",
    "rounding",
    "invoice_minimum",
    "sku",
    "rate",
    "band",
    "extensions",
];
const SKU_KEYS: &[&str] = &["id", "match"];
const RATE_KEYS: &[&str] = &[
    "sku",
    "meter",
    "unit",
    "unit_price",
    "increment",
    "model",
    "tiers",
    "package_size",
    "valid_from",
    "valid_to",
];
const TIER_KEYS: &[&str] = &["up_to", "unit_price", "flat_fee"];
const BAND_KEYS: &[&str] = &[
    "name",
    "tz",
    "days",
    "hours",
    "multiplier",
    "meters",
    "skus",
];

/// Errors reading or validating a price book. Each names the file, the line and column of the
/// offending key in the text (1-based; the column counts characters), the table (`""` for the
/// top level, else `sku[i]`, `rate[i]`, `rate[i].tiers[j]`, `band[i]`, counted from 0 in file
/// order), the field and the offending value as written in TOML, and prints as
/// `file:line:column: rate[3].unit_price = "-1": reason`. A price-book error never yields a
/// partial invoice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PriceBookError {
    /// The file could not be read.
    #[error("{file}: cannot read the price book: {source}")]
    Io {
        /// The path as given.
        file: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not UTF-8 text.
    #[error("{file}: the price book is not UTF-8 text: {reason}")]
    NotUtf8 {
        /// The path as given.
        file: String,
        /// Where the first bad byte is.
        reason: String,
    },
    /// The text is not a TOML document.
    #[error("{file}:{line}:{column}: not a TOML document: {message}")]
    Syntax {
        /// The file name as given.
        file: String,
        /// Line of the error, from 1 (1 when the parser gives no place).
        line: u32,
        /// Column of the error in characters, from 1.
        column: u32,
        /// The TOML parser's message.
        message: String,
    },
    /// A key that the format does not have (a typo is never ignored).
    #[error(
        "{file}:{line}:{column}: {}: unknown key `{key}` (known keys: {known})",
        place(table)
    )]
    UnknownKey {
        /// The file name as given.
        file: String,
        /// The table (`""` for the top level, `rate[3]`, `rate[3].tiers[1]`).
        table: String,
        /// The unknown key.
        key: String,
        /// The keys that table may have, comma-separated.
        known: String,
        /// Line of the unknown key, from 1.
        line: u32,
        /// Column of the unknown key in characters, from 1.
        column: u32,
    },
    /// A required field is absent.
    #[error("{file}:{line}:{column}: {} is missing", at(table, field))]
    Missing {
        /// The file name as given.
        file: String,
        /// The table (`""` for the top level).
        table: String,
        /// The field.
        field: &'static str,
        /// Line of the table's header (`[[rate]]`, `{` of an inline table), from 1; 1 for
        /// the top level.
        line: u32,
        /// Column of the table's header in characters, from 1.
        column: u32,
    },
    /// A field has a value the format does not allow, or conflicts with another table.
    #[error("{file}:{line}:{column}: {} = {value}: {reason}", at(table, field))]
    Invalid {
        /// The file name as given.
        file: String,
        /// The table (`""` for the top level).
        table: String,
        /// The field (`unit_price`; `""` when the whole table is wrong).
        field: &'static str,
        /// The value as written in TOML (strings quoted).
        value: String,
        /// What is wrong, for people (boxed to keep the error small: `Result`s of it are
        /// returned everywhere).
        reason: Box<str>,
        /// Line of the field's key (of the table's header when the field is absent or
        /// `""`), from 1.
        line: u32,
        /// Column of that key in characters, from 1.
        column: u32,
    },
}

impl PriceBookError {
    /// Where in the text the error is, `(line, column)` from 1 (column in characters), for
    /// every error about the book's content; `None` for [`PriceBookError::Io`] and
    /// [`PriceBookError::NotUtf8`].
    pub fn location(&self) -> Option<(u32, u32)> {
        match self {
            PriceBookError::Io { .. } | PriceBookError::NotUtf8 { .. } => None,
            PriceBookError::Syntax { line, column, .. }
            | PriceBookError::UnknownKey { line, column, .. }
            | PriceBookError::Missing { line, column, .. }
            | PriceBookError::Invalid { line, column, .. } => Some((*line, *column)),
        }
    }
}

/// Where each key and table of the TOML text starts, by path (`rate[3].unit_price`,
/// `rate[3]`, `rate[3].tiers[0].up_to`, `currency`), as `(line, column)` from 1.
#[derive(Debug, Default)]
struct Locator {
    places: HashMap<String, (u32, u32)>,
}

impl Locator {
    /// Indexes `text`; a text that does not parse yields an empty index (the caller has
    /// already refused it).
    fn new(text: &str) -> Locator {
        let mut loc = Locator::default();
        let lines = LineIndex::new(text);
        if let Ok(doc) = toml::de::DeTable::parse(text) {
            loc.walk(&lines, "", doc.get_ref());
        }
        loc
    }

    fn walk(&mut self, lines: &LineIndex<'_>, prefix: &str, table: &toml::de::DeTable<'_>) {
        for (key, value) in table.iter() {
            let path = if prefix.is_empty() {
                key.get_ref().to_string()
            } else {
                format!("{prefix}.{}", key.get_ref())
            };
            self.places
                .insert(path.clone(), lines.place(key.span().start));
            self.walk_value(lines, &path, value);
        }
    }

    fn walk_value(
        &mut self,
        lines: &LineIndex<'_>,
        path: &str,
        value: &toml::Spanned<toml::de::DeValue<'_>>,
    ) {
        match value.get_ref() {
            toml::de::DeValue::Table(t) => self.walk(lines, path, t),
            toml::de::DeValue::Array(items) => {
                for (j, item) in items.iter().enumerate() {
                    let p = format!("{path}[{j}]");
                    self.places
                        .insert(p.clone(), lines.place(item.span().start));
                    self.walk_value(lines, &p, item);
                }
            }
            _ => {}
        }
    }

    /// The place of `table.field`, else of `table`, else the start of the file.
    fn find(&self, table: &str, field: &str) -> (u32, u32) {
        let key = at(table, field);
        self.places
            .get(&key)
            .or_else(|| self.places.get(table))
            .copied()
            .unwrap_or((1, 1))
    }
}

/// Byte offsets to `(line, column)`, both from 1, the column in characters.
struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, starts }
    }

    fn place(&self, offset: usize) -> (u32, u32) {
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        let start = self.starts.get(line - 1).copied().unwrap_or(0);
        let column = self
            .text
            .get(start..offset.min(self.text.len()))
            .map_or(0, |s| s.chars().count());
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        (narrow(line), narrow(column + 1))
    }
}

/// The file name and the places of its keys, for building errors.
struct Ctx<'a> {
    file: &'a str,
    loc: &'a Locator,
}

impl Ctx<'_> {
    fn invalid(
        &self,
        table: &str,
        field: &'static str,
        value: String,
        reason: impl Into<String>,
    ) -> PriceBookError {
        let (line, column) = self.loc.find(table, field);
        PriceBookError::Invalid {
            file: self.file.to_string(),
            table: table.to_string(),
            field,
            value,
            reason: reason.into().into_boxed_str(),
            line,
            column,
        }
    }
}

/// `rate[3].unit_price`, or `currency` at the top level, or `band[0]` for a whole table.
fn at(table: &str, field: &str) -> String {
    match (table.is_empty(), field.is_empty()) {
        (true, _) => field.to_string(),
        (false, true) => table.to_string(),
        (false, false) => format!("{table}.{field}"),
    }
}

fn place(table: &str) -> String {
    if table.is_empty() {
        "top level".to_string()
    } else {
        table.to_string()
    }
}

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

    fn overlaps(&self, other: &Rate) -> bool {
        let a_from = self.valid_from.unwrap_or(0);
        let b_from = other.valid_from.unwrap_or(0);
        let a_before_b_ends = other.valid_to.is_none_or(|t| a_from < t);
        let b_before_a_ends = self.valid_to.is_none_or(|t| b_from < t);
        a_before_b_ends && b_before_a_ends
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

/// Reads the fields of one TOML table and turns bad ones into [`PriceBookError`]s.
struct Reader<'a> {
    ctx: &'a Ctx<'a>,
    table: String,
    map: &'a toml::Table,
}

impl<'a> Reader<'a> {
    fn new(ctx: &'a Ctx<'a>, table: String, map: &'a toml::Table) -> Self {
        Reader { ctx, table, map }
    }

    fn check_keys(&self, known: &[&str]) -> Result<(), PriceBookError> {
        for key in self.map.keys() {
            if !known.contains(&key.as_str()) {
                let (line, column) = self.ctx.loc.find(&self.table, key);
                return Err(PriceBookError::UnknownKey {
                    file: self.ctx.file.to_string(),
                    table: self.table.clone(),
                    key: key.clone(),
                    known: known.join(", "),
                    line,
                    column,
                });
            }
        }
        Ok(())
    }

    fn invalid(
        &self,
        field: &'static str,
        value: &toml::Value,
        reason: impl Into<String>,
    ) -> PriceBookError {
        self.ctx
            .invalid(&self.table, field, value.to_string(), reason)
    }

    /// An error about `field` whether or not the table has it (its value, or `(absent)`).
    fn invalid_field(&self, field: &'static str, reason: impl Into<String>) -> PriceBookError {
        let value = self
            .get(field)
            .map_or_else(|| "(absent)".to_string(), |v| v.to_string());
        self.ctx.invalid(&self.table, field, value, reason)
    }

    fn missing(&self, field: &'static str) -> PriceBookError {
        let (line, column) = self.ctx.loc.find(&self.table, "");
        PriceBookError::Missing {
            file: self.ctx.file.to_string(),
            table: self.table.clone(),
            field,
            line,
            column,
        }
    }

    fn get(&self, field: &str) -> Option<&'a toml::Value> {
        self.map.get(field)
    }

    fn required(&self, field: &'static str) -> Result<&'a toml::Value, PriceBookError> {
        self.get(field).ok_or_else(|| self.missing(field))
    }

    fn string(&self, field: &'static str) -> Result<Option<&'a str>, PriceBookError> {
        match self.get(field) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(self.invalid(field, v, format!("expected a string, found {}", kind(v)))),
        }
    }

    fn required_string(&self, field: &'static str) -> Result<&'a str, PriceBookError> {
        self.string(field)?.ok_or_else(|| self.missing(field))
    }

    /// A decimal written as a string (`"0.0175"`) or a TOML integer; never a float.
    fn decimal(&self, field: &'static str) -> Result<Option<Decimal>, PriceBookError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => parse_decimal(v)
                .map(Some)
                .map_err(|reason| self.invalid(field, v, reason)),
        }
    }

    /// An RFC 3339 time with an offset, as a string or a TOML offset date-time.
    fn time(&self, field: &'static str) -> Result<Option<u64>, PriceBookError> {
        let Some(v) = self.get(field) else {
            return Ok(None);
        };
        let text = match v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Datetime(d) => d.to_string(),
            _ => {
                return Err(self.invalid(
                    field,
                    v,
                    format!(
                        "expected an RFC 3339 time such as \"2026-12-01T00:00:00Z\", found {}",
                        kind(v)
                    ),
                ))
            }
        };
        parse_rfc3339(&text)
            .map(Some)
            .map_err(|e| self.invalid(field, v, format!("{e} (an RFC 3339 time with a UTC offset between 1970 and 2554, e.g. \"2026-12-01T00:00:00Z\")")))
    }

    /// A band filter (`days`, `meters`, `skus`): a list of strings, empty when the key is
    /// absent (every one). An empty list is refused: it would read as "none", but a band
    /// without the key applies to every one.
    fn filter_list(&self, field: &'static str) -> Result<Vec<&'a str>, PriceBookError> {
        match self.strings(field)? {
            Some(list) if list.is_empty() => Err(self.invalid_field(
                field,
                format!(
                    "an empty list would read as none, but a band without `{field}` means \
                     every one: omit the key, or list at least one"
                ),
            )),
            list => Ok(list.unwrap_or_default()),
        }
    }

    /// A list of strings; a single string counts as a list of one.
    fn strings(&self, field: &'static str) -> Result<Option<Vec<&'a str>>, PriceBookError> {
        match self.get(field) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(vec![s.as_str()])),
            Some(v @ toml::Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        toml::Value::String(s) => out.push(s.as_str()),
                        other => {
                            return Err(self.invalid(
                                field,
                                v,
                                format!("expected strings, found {}", kind(other)),
                            ))
                        }
                    }
                }
                Ok(Some(out))
            }
            Some(v) => Err(self.invalid(
                field,
                v,
                format!("expected a list of strings, found {}", kind(v)),
            )),
        }
    }
}

fn kind(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date-time",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// Parses a non-negative decimal from a TOML value: a string of digits with an optional
/// fractional part (`"0.0175"`, `"12"`), or a non-negative TOML integer. Floats are refused:
/// they are binary and inexact.
fn parse_decimal(v: &toml::Value) -> Result<Decimal, String> {
    match v {
        toml::Value::String(s) => parse_decimal_text(s),
        toml::Value::Integer(i) => {
            if *i < 0 {
                Err("must not be negative".to_string())
            } else {
                Ok(Decimal::from(*i))
            }
        }
        toml::Value::Float(_) => Err(
            "write decimals as strings (\"0.0175\"): a TOML float is binary and cannot hold \
             money exactly"
                .to_string(),
        ),
        other => Err(format!(
            "expected a decimal string such as \"0.0175\", found {}",
            kind(other)
        )),
    }
}

fn parse_decimal_text(s: &str) -> Result<Decimal, String> {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if s.starts_with('-') {
        return Err("must not be negative".to_string());
    }
    if !digits(int) || !frac.is_none_or(digits) {
        return Err(
            "expected a non-negative decimal: digits with an optional `.` and digits (\"0.0175\")"
                .to_string(),
        );
    }
    Decimal::from_str_exact(s).map_err(|e| {
        format!("cannot be held exactly (at most 28 decimal places and 28 digits): {e}")
    })
}

fn parse_weekday(s: &str) -> Option<Weekday> {
    match s {
        "mon" => Some(Weekday::Mon),
        "tue" => Some(Weekday::Tue),
        "wed" => Some(Weekday::Wed),
        "thu" => Some(Weekday::Thu),
        "fri" => Some(Weekday::Fri),
        "sat" => Some(Weekday::Sat),
        "sun" => Some(Weekday::Sun),
        _ => None,
    }
}

/// `"08:30"` → 510; `"24:00"` → 1440 (only as an end).
fn parse_clock(s: &str) -> Option<u32> {
    let (h, m) = s.split_once(':')?;
    let two_digits = |t: &str| t.len() == 2 && t.bytes().all(|b| b.is_ascii_digit());
    if !two_digits(h) || !two_digits(m) {
        return None;
    }
    let h: u32 = h.parse().ok()?;
    let m: u32 = m.parse().ok()?;
    if m >= 60 || h > 24 || (h == 24 && m != 0) {
        return None;
    }
    Some(h * 60 + m)
}

/// The array of tables under `key` (`[[rate]]`), empty when absent.
fn tables<'a>(
    ctx: &Ctx<'_>,
    top: &'a toml::Table,
    key: &'static str,
) -> Result<Vec<&'a toml::Table>, PriceBookError> {
    let Some(v) = top.get(key) else {
        return Ok(Vec::new());
    };
    let bad = |reason: String| ctx.invalid("", key, v.to_string(), reason);
    match v {
        toml::Value::Array(items) => items
            .iter()
            .map(|item| match item {
                toml::Value::Table(t) => Ok(t),
                other => Err(bad(format!(
                    "expected tables written [[{key}]], found {}",
                    kind(other)
                ))),
            })
            .collect(),
        other => Err(bad(format!(
            "expected tables written [[{key}]], found {}",
            kind(other)
        ))),
    }
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

    /// The file name the book was read under (as given to the constructor).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// SHA-256 of the book's bytes as given, lowercase hex (64 characters). Invoices cite it.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The book's `version` string.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The book's one currency.
    pub fn currency(&self) -> Currency {
        self.currency
    }

    /// How each line is rounded.
    pub fn rounding(&self) -> Rounding {
        self.rounding
    }

    /// The invoice minimum at the currency's scale (`"0.50"`), `None` when the book has none.
    pub fn invoice_minimum(&self) -> Option<Decimal> {
        self.invoice_minimum
    }

    /// The invoice minimum in minor units of the currency (`"0.50"` USD → 50), `None` when
    /// the book has none.
    pub fn invoice_minimum_minor_units(&self) -> Option<u128> {
        self.invoice_minimum_minor
    }

    /// The SKUs, in file order.
    pub fn skus(&self) -> &[Sku] {
        &self.skus
    }

    /// `(line, column)` from 1 of `rate[i].valid_from`, `rate[i].valid_to` or
    /// `band[i].hours` in the book's text (`table` = `"rate[3]"`, `field` = `"valid_to"`),
    /// for errors that rating finds against the usage's windows; `None` for other keys.
    pub fn place_of(&self, table: &str, field: &str) -> Option<(u32, u32)> {
        self.window_keys_at.get(&at(table, field)).copied()
    }

    /// The rates, in file order.
    pub fn rates(&self) -> &[Rate] {
        &self.rates
    }

    /// The bands, in file order.
    pub fn bands(&self) -> &[Band] {
        &self.bands
    }

    /// The SKU a device named `device_name` is sold as: an exact name beats a
    /// prefix, the longest prefix wins, `"*"` is the fallback. `Ok(None)` when no SKU matches.
    ///
    /// # Errors
    /// [`RatingError::AmbiguousSku`] when two SKUs match equally well (validation refuses
    /// equal patterns, so this needs two distinct patterns of equal rank).
    pub fn sku_for(&self, device_name: &str) -> Result<Option<&Sku>, RatingError> {
        let mut best: Option<(MatchRank, &Sku)> = None;
        let mut tie: Option<&Sku> = None;
        for sku in &self.skus {
            let Some(rank) = sku.rank(device_name) else {
                continue;
            };
            match best {
                Some((b, _)) if rank < b => {}
                Some((b, _)) if rank == b => tie = Some(sku),
                _ => {
                    best = Some((rank, sku));
                    tie = None;
                }
            }
        }
        match (best, tie) {
            (Some((_, first)), Some(second)) => Err(RatingError::AmbiguousSku {
                device: device_name.to_string(),
                first: first.id.clone(),
                second: second.id.clone(),
            }),
            (best, _) => Ok(best.map(|(_, s)| s)),
        }
    }

    /// For `prices check`: each device name with the id of the SKU it maps to, `None` when
    /// no SKU matches (or, which validation prevents, two match equally). Input order kept.
    pub fn check_devices<S: AsRef<str>>(&self, names: &[S]) -> Vec<(String, Option<String>)> {
        names
            .iter()
            .map(|n| {
                let n = n.as_ref();
                let sku = self.sku_for(n).ok().flatten().map(|s| s.id.clone());
                (n.to_string(), sku)
            })
            .collect()
    }

    /// The rate of `sku` for `meter` in force at `t_ns` (ns since the epoch), if any.
    /// Validation guarantees at most one.
    pub fn rate_at(&self, sku: &str, meter: MeterKind, t_ns: u64) -> Option<&Rate> {
        self.rates
            .iter()
            .find(|r| r.sku == sku && r.meter == meter && r.valid_at(t_ns))
    }

    /// For `prices check --devices`: the SKU-level checks that need the device catalog.
    /// `names` are the catalog's device names. Returns warnings (code [`WarningCode::SkuDeviceUnknown`]), one per SKU that
    /// no name matches (`sku[0] `v100` (line 29): no device of the catalog matches it`), in
    /// SKU order.
    ///
    /// # Errors
    /// [`PriceBookError::Invalid`] at the second SKU's `match` key when two SKUs match a
    /// name at equal rank (validation already refuses equal patterns, and two distinct
    /// patterns cannot tie on one name, so this is a guard rather than an expected outcome).
    pub fn check_catalog<S: AsRef<str>>(
        &self,
        names: &[S],
    ) -> Result<Vec<Warning>, PriceBookError> {
        for name in names {
            if let Err(RatingError::AmbiguousSku { first, second, .. }) =
                self.sku_for(name.as_ref())
            {
                let sku = self.skus.iter().find(|s| s.id == second);
                let index = sku.map_or(0, |s| s.index);
                let (line, column) = self.sku_match_at.get(index).copied().unwrap_or((1, 1));
                return Err(PriceBookError::Invalid {
                    file: self.name.clone(),
                    table: format!("sku[{index}]"),
                    field: "match",
                    value: format!("\"{}\"", name.as_ref()),
                    reason: format!(
                        "the catalog device {:?} matches SKUs `{first}` and `{second}` equally \
                         well",
                        name.as_ref()
                    )
                    .into_boxed_str(),
                    line,
                    column,
                });
            }
        }
        let mut warnings = Vec::new();
        for sku in &self.skus {
            if !names.iter().any(|n| sku.rank(n.as_ref()).is_some()) {
                let (line, _) = self.sku_match_at.get(sku.index).copied().unwrap_or((1, 1));
                warnings.push(Warning::new(
                    WarningCode::SkuDeviceUnknown,
                    format!(
                        "sku[{}] `{}` (line {line}): no device of the catalog matches it",
                        sku.index, sku.id
                    ),
                ));
            }
        }
        Ok(warnings)
    }

    /// For `prices check`: lines for people describing the book (header, then each SKU with
    /// its patterns and its rates with their model, tiers, increment, package size and
    /// validity, then the bands), without trailing newlines.
    pub fn summary(&self) -> Vec<String> {
        let code = self.currency.code();
        let mut out = vec![
            format!(
                "price book {} (schema {PRICEBOOK_SCHEMA}, version {})",
                self.name, self.version
            ),
            format!("  sha256 {}", self.sha256),
            format!(
                "  currency {} ({} decimal places), rounding {} once per line, invoice minimum {}",
                code,
                self.currency.scale(),
                self.rounding,
                self.invoice_minimum
                    .map_or_else(|| "none".to_string(), |m| m.to_string())
            ),
        ];
        for sku in &self.skus {
            let patterns: Vec<String> = sku.patterns.iter().map(|p| format!("\"{p}\"")).collect();
            out.push(format!("sku {} matches {}", sku.id, patterns.join(", ")));
            let rates: Vec<&Rate> = self.rates.iter().filter(|r| r.sku == sku.id).collect();
            if rates.is_empty() {
                out.push("  (no rates: its devices' usage is not billed)".to_string());
            }
            for r in rates {
                out.extend(rate_summary(r, code));
            }
        }
        for b in &self.bands {
            out.push(band_summary(b));
        }
        out
    }
}

/// A rate's lines in [`PriceBook::summary`].
fn rate_summary(r: &Rate, code: &str) -> Vec<String> {
    let unit = r.unit.name();
    let canonical = r.meter.canonical_unit();
    let price = match (r.model, r.package_size, r.package_size_canonical) {
        (RateModel::Package, Some(size), Some(c)) => format!(
            "{} {code} per package of {size} {unit} ({c} {canonical}), whole packages rounded up",
            r.unit_price
        ),
        _ => format!("{} {code} per {unit}", r.unit_price),
    };
    let mut head = format!("  rate[{}] {}: {price}, {}", r.index, r.meter, r.model);
    if let (Some(inc), Some(c)) = (r.increment, r.increment_canonical) {
        head.push_str(&format!(", increment {inc} {unit} ({c} {canonical})"));
    }
    if r.valid_from.is_some() || r.valid_to.is_some() {
        head.push_str(&format!(
            ", valid [{}, {})",
            r.valid_from.map_or_else(|| "-∞".to_string(), rfc3339),
            r.valid_to.map_or_else(|| "∞".to_string(), rfc3339)
        ));
    }
    let mut out = vec![head];
    for (j, t) in r.tiers.iter().enumerate() {
        let up_to = match (t.up_to, t.up_to_canonical) {
            (TierLimit::UpTo(d), Some(c)) => format!("up to {d} {unit} ({c} {canonical})"),
            _ => "up to inf".to_string(),
        };
        let fee = t
            .flat_fee
            .map_or_else(String::new, |f| format!(", flat fee {f} {code}"));
        out.push(format!(
            "    tier[{j}] {up_to}: {} {code} per {unit}{fee}",
            t.unit_price
        ));
    }
    out
}

/// A band's line in [`PriceBook::summary`].
fn band_summary(b: &Band) -> String {
    let days = if b.days.is_empty() {
        "every day".to_string()
    } else {
        let names: Vec<String> = b
            .days
            .iter()
            .map(|d| d.to_string().to_lowercase())
            .collect();
        names.join(" ")
    };
    let clock = |m: u32| format!("{:02}:{:02}", m / 60, m % 60);
    let wrap = if b.end_minute < b.start_minute {
        " (wraps midnight)"
    } else {
        ""
    };
    let meters = if b.meters.is_empty() {
        "every meter".to_string()
    } else {
        let names: Vec<&str> = b.meters.iter().map(|m| m.as_str()).collect();
        format!("meters {}", names.join(", "))
    };
    let skus = if b.skus.is_empty() {
        "every sku".to_string()
    } else {
        format!("skus {}", b.skus.join(", "))
    };
    format!(
        "band[{}] {}: {}, {days}, {}-{}{wrap}, multiplier {}, {meters}, {skus}",
        b.index,
        b.name,
        b.tz,
        clock(b.start_minute),
        clock(b.end_minute),
        b.multiplier
    )
}

fn parse_book(ctx: &Ctx<'_>, top: &toml::Table) -> Result<PriceBook, PriceBookError> {
    let r = Reader::new(ctx, String::new(), top);
    r.check_keys(TOP_KEYS)?;

    let schema = r.required_string("schema")?;
    if schema != PRICEBOOK_SCHEMA {
        return Err(r.invalid(
            "schema",
            r.required("schema")?,
            format!("expected \"{PRICEBOOK_SCHEMA}\""),
        ));
    }
    let version = r.required_string("version")?;
    if version.trim().is_empty() {
        return Err(r.invalid("version", r.required("version")?, "must not be empty"));
    }
    let code = r.required_string("currency")?;
    let currency = Currency::from_code(code).ok_or_else(|| {
        let v = toml::Value::String(code.to_string());
        r.invalid(
            "currency",
            &v,
            "not an ISO 4217 currency code in gpumeter's table (three upper-case letters, e.g. \"USD\")",
        )
    })?;
    let rounding = match r.string("rounding")? {
        None => Rounding::default(),
        Some(text) => Rounding::parse(text).ok_or_else(|| {
            let v = toml::Value::String(text.to_string());
            r.invalid("rounding", &v, "expected half_even, half_up, up or down")
        })?,
    };
    let (invoice_minimum, invoice_minimum_minor) = match r.decimal("invoice_minimum")? {
        None => (None, None),
        Some(m) => {
            let v = r.required("invoice_minimum")?;
            if m.scale() > currency.scale() {
                return Err(r.invalid(
                    "invoice_minimum",
                    v,
                    format!(
                        "has more decimal places than {}'s minor unit ({})",
                        currency.code(),
                        currency.scale()
                    ),
                ));
            }
            let minor = decimal_to_minor_units(m, &currency)
                .ok_or_else(|| r.invalid("invoice_minimum", v, "is too large"))?;
            let mut m = m;
            m.rescale(currency.scale());
            (Some(m), Some(minor))
        }
    };
    if let Some(v) = top.get("extensions") {
        if !matches!(v, toml::Value::Table(_)) {
            return Err(r.invalid(
                "extensions",
                v,
                format!("expected a table [extensions], found {}", kind(v)),
            ));
        }
    }

    let skus = parse_skus(ctx, top)?;
    let sku_match_at = skus
        .iter()
        .map(|s| ctx.loc.find(&format!("sku[{}]", s.index), "match"))
        .collect();
    let rate_tables = tables(ctx, top, "rate")?;
    let rates = parse_rates(ctx, &rate_tables, &skus, currency)?;
    let band_tables = tables(ctx, top, "band")?;
    let bands = parse_bands(ctx, &band_tables, &skus)?;
    check_bands(ctx, &band_tables, &bands, &rates)?;

    Ok(PriceBook {
        name: ctx.file.to_string(),
        sha256: String::new(),
        version: version.to_string(),
        currency,
        rounding,
        invoice_minimum,
        invoice_minimum_minor,
        skus,
        sku_match_at,
        rates,
        bands,
        window_keys_at: std::collections::BTreeMap::new(),
    })
}

fn parse_skus(ctx: &Ctx<'_>, top: &toml::Table) -> Result<Vec<Sku>, PriceBookError> {
    let mut skus: Vec<Sku> = Vec::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut seen: HashMap<SkuPattern, usize> = HashMap::new();
    for (i, t) in tables(ctx, top, "sku")?.into_iter().enumerate() {
        let r = Reader::new(ctx, format!("sku[{i}]"), t);
        r.check_keys(SKU_KEYS)?;
        let id = r.required_string("id")?;
        let id_value = r.required("id")?;
        if id.trim().is_empty() {
            return Err(r.invalid("id", id_value, "must not be empty"));
        }
        if let Some(first) = ids.get(id) {
            return Err(r.invalid("id", id_value, format!("sku[{first}] has the same id")));
        }
        ids.insert(id.to_string(), i);
        let texts = r.strings("match")?.ok_or_else(|| r.missing("match"))?;
        let match_value = r.required("match")?;
        if texts.is_empty() {
            return Err(r.invalid(
                "match",
                match_value,
                "a SKU needs at least one pattern (exact name, prefix ending in `*`, or \"*\")",
            ));
        }
        let mut patterns = Vec::with_capacity(texts.len());
        for text in texts {
            let v = toml::Value::String(text.to_string());
            let p = SkuPattern::parse(text).map_err(|reason| r.invalid("match", &v, reason))?;
            if let Some(&other) = seen.get(&p) {
                let reason = if other == i {
                    "listed twice in this SKU".to_string()
                } else {
                    format!(
                        "sku[{other}] (`{}`) has the same pattern: two equal candidates are \
                         ambiguous",
                        skus.get(other).map_or("", |s| s.id.as_str())
                    )
                };
                return Err(r.invalid("match", &v, reason));
            }
            seen.insert(p.clone(), i);
            patterns.push(p);
        }
        skus.push(Sku {
            index: i,
            id: id.to_string(),
            patterns,
        });
    }
    Ok(skus)
}

/// A canonical-unit conversion that must succeed (tier edges, increments, package sizes),
/// or the reason it does not, for people.
fn whole_canonical(unit: PricingUnit, meter: MeterKind, amount: Decimal) -> Result<u128, String> {
    unit.to_canonical(amount).ok_or_else(|| {
        format!(
            "must be a whole number of {canonical} (1 {unit} = {num} {canonical}) no larger than \
             2^128 - 1 {canonical}: quantities are rated as integers in canonical units",
            canonical = meter.canonical_unit(),
            unit = unit.name(),
            num = unit.factor_num(),
        )
    })
}

fn parse_tiers(
    r: &Reader<'_>,
    unit: PricingUnit,
    meter: MeterKind,
    currency: Currency,
) -> Result<Option<Vec<Tier>>, PriceBookError> {
    let Some(v) = r.get("tiers") else {
        return Ok(None);
    };
    let toml::Value::Array(items) = v else {
        return Err(r.invalid(
            "tiers",
            v,
            format!(
                "expected a list of {{ up_to, unit_price }} tables, found {}",
                kind(v)
            ),
        ));
    };
    if items.is_empty() {
        return Err(r.invalid(
            "tiers",
            v,
            "needs at least one tier; the last one has up_to = \"inf\"",
        ));
    }
    let mut tiers: Vec<Tier> = Vec::with_capacity(items.len());
    for (j, item) in items.iter().enumerate() {
        let tier_table = format!("{}.tiers[{j}]", r.table);
        let toml::Value::Table(t) = item else {
            return Err(r.ctx.invalid(
                &tier_table,
                "",
                item.to_string(),
                format!(
                    "expected a {{ up_to, unit_price }} table, found {}",
                    kind(item)
                ),
            ));
        };
        let tr = Reader::new(r.ctx, tier_table, t);
        tr.check_keys(TIER_KEYS)?;
        let up_v = tr.required("up_to")?;
        let last = j + 1 == items.len();
        let (up_to, up_to_canonical) = match up_v {
            toml::Value::String(s) if s == "inf" => {
                if !last {
                    return Err(tr.invalid(
                        "up_to",
                        up_v,
                        "only the last tier may be unbounded (\"inf\"): the tiers after it \
                         could never be reached",
                    ));
                }
                (TierLimit::Unbounded, None)
            }
            other => {
                let d =
                    parse_decimal(other).map_err(|reason| tr.invalid("up_to", other, reason))?;
                let c = whole_canonical(unit, meter, d)
                    .map_err(|reason| tr.invalid("up_to", other, reason))?;
                (TierLimit::UpTo(d), Some(c))
            }
        };
        if let Some(c) = up_to_canonical {
            match tiers.last().and_then(|p| p.up_to_canonical) {
                None if c == 0 => {
                    return Err(tr.invalid(
                        "up_to",
                        up_v,
                        "the first tier would hold no unit (up_to is inclusive, from 0): an \
                         empty tier leaves a gap in the tiers",
                    ))
                }
                Some(prev) if c == prev => {
                    return Err(tr.invalid(
                        "up_to",
                        up_v,
                        format!(
                            "overlaps tiers[{}], which has the same up_to: bounds must strictly \
                             increase",
                            j - 1
                        ),
                    ))
                }
                Some(prev) if c < prev => {
                    return Err(tr.invalid(
                        "up_to",
                        up_v,
                        format!(
                            "is below tiers[{}]'s up_to: tiers must be ordered by strictly \
                             increasing up_to",
                            j - 1
                        ),
                    ))
                }
                _ => {}
            }
            if last {
                return Err(tr.invalid(
                    "up_to",
                    up_v,
                    "the last tier must be unbounded (up_to = \"inf\"), so every quantity has \
                     a price",
                ));
            }
        }
        let unit_price = tr
            .decimal("unit_price")?
            .ok_or_else(|| tr.missing("unit_price"))?;
        let flat_fee = tr.decimal("flat_fee")?;
        if let Some(fee) = flat_fee {
            let fv = tr.required("flat_fee")?;
            if fee.scale() > currency.scale() {
                return Err(tr.invalid(
                    "flat_fee",
                    fv,
                    format!(
                        "has more decimal places than {}'s minor unit ({}): a flat fee is \
                         charged as written, never rounded",
                        currency.code(),
                        currency.scale()
                    ),
                ));
            }
            if decimal_to_minor_units(fee, &currency).is_none() {
                return Err(tr.invalid("flat_fee", fv, "is too large"));
            }
        }
        tiers.push(Tier {
            up_to,
            up_to_canonical,
            unit_price,
            flat_fee,
        });
    }
    Ok(Some(tiers))
}

/// The rules tying a rate's model to its fields: tiers exactly for `graduated`
/// and `volume`, `package_size` exactly for `package`, `unit_price` equal to the first
/// tier's when both are written. Returns the rate's unit price.
fn check_model(
    r: &Reader<'_>,
    model: RateModel,
    tiers: Option<&[Tier]>,
    unit_price: Option<Decimal>,
    package_size: Option<u128>,
) -> Result<Decimal, PriceBookError> {
    let tiered = matches!(model, RateModel::Graduated | RateModel::Volume);
    match (tiered, tiers) {
        (true, None) => {
            return Err(r.invalid_field(
                "model",
                format!(
                    "a {model} rate needs tiers = [{{ up_to = \"…\", unit_price = \"…\" }}, …, \
                     {{ up_to = \"inf\", … }}]"
                ),
            ))
        }
        (false, Some(_)) => {
            return Err(r.invalid_field(
                "tiers",
                format!(
                    "tiers are only for model = \"graduated\" or \"volume\", and this rate's \
                     model is {model}{}",
                    if model == RateModel::Package {
                        " (one unit_price per package)"
                    } else {
                        ""
                    }
                ),
            ))
        }
        _ => {}
    }
    match (model == RateModel::Package, package_size) {
        (true, None) => {
            return Err(r.invalid_field(
                "model",
                "a package rate needs package_size (in `unit`) and unit_price (per package)",
            ))
        }
        (false, Some(_)) => {
            return Err(r.invalid_field(
                "package_size",
                format!("package_size is only for model = \"package\"; this rate's is {model}"),
            ))
        }
        _ => {}
    }
    let first = tiers.and_then(|t| t.first()).map(|t| t.unit_price);
    match (unit_price, first) {
        (Some(p), Some(f)) if p != f => Err(r.invalid_field(
            "unit_price",
            format!(
                "contradicts tiers[0].unit_price = \"{f}\": with tiers, unit_price is absent or \
                 equal to the first tier's"
            ),
        )),
        (Some(p), _) => Ok(p),
        (None, Some(f)) => Ok(f),
        (None, None) => Err(r.missing("unit_price")),
    }
}

fn parse_rates(
    ctx: &Ctx<'_>,
    rate_tables: &[&toml::Table],
    skus: &[Sku],
    currency: Currency,
) -> Result<Vec<Rate>, PriceBookError> {
    let mut rates: Vec<Rate> = Vec::new();
    for (i, t) in rate_tables.iter().enumerate() {
        let r = Reader::new(ctx, format!("rate[{i}]"), t);
        r.check_keys(RATE_KEYS)?;
        let sku = r.required_string("sku")?;
        if !skus.iter().any(|s| s.id == sku) {
            return Err(r.invalid("sku", r.required("sku")?, "no [[sku]] has this id"));
        }
        let meter_text = r.required_string("meter")?;
        let meter = MeterKind::parse(meter_text).ok_or_else(|| {
            let names: Vec<&str> = MeterKind::ALL.iter().map(|m| m.as_str()).collect();
            let v = toml::Value::String(meter_text.to_string());
            r.invalid(
                "meter",
                &v,
                format!("not a meter; meters: {}", names.join(", ")),
            )
        })?;
        let unit_text = r.required_string("unit")?;
        let unit_value = r.required("unit")?;
        let unit_names = || -> String {
            PricingUnit::all()
                .filter(|u| u.dimension() == meter.dimension())
                .map(|u| u.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let unit = PricingUnit::parse(unit_text).ok_or_else(|| {
            r.invalid(
                "unit",
                unit_value,
                format!(
                    "not a pricing unit; units for {meter}: {} (ASCII `*` may stand for `·`)",
                    unit_names()
                ),
            )
        })?;
        if unit.dimension() != meter.dimension() {
            return Err(r.invalid(
                "unit",
                unit_value,
                format!(
                    "{meter} is measured in {}, which {} cannot price; use one of: {}",
                    meter.canonical_unit(),
                    unit.name(),
                    unit_names()
                ),
            ));
        }
        let model = match r.string("model")? {
            None => RateModel::default(),
            Some(text) => RateModel::parse(text).ok_or_else(|| {
                let v = toml::Value::String(text.to_string());
                r.invalid("model", &v, format!("expected {}", RateModel::names()))
            })?,
        };
        let tiers = parse_tiers(&r, unit, meter, currency)?;
        let written_price = r.decimal("unit_price")?;
        let increment = r.decimal("increment")?;
        let increment_canonical = match increment {
            None => None,
            Some(d) => {
                let v = r.required("increment")?;
                let c = whole_canonical(unit, meter, d)
                    .map_err(|reason| r.invalid("increment", v, reason))?;
                if c == 0 {
                    return Err(r.invalid(
                        "increment",
                        v,
                        "must be above 0 (leave increment out to bill every canonical unit)",
                    ));
                }
                Some(c)
            }
        };
        let package_size = r.decimal("package_size")?;
        let package_size_canonical = match package_size {
            None => None,
            Some(d) => {
                let v = r.required("package_size")?;
                let c = whole_canonical(unit, meter, d)
                    .map_err(|reason| r.invalid("package_size", v, reason))?;
                if c == 0 {
                    return Err(r.invalid("package_size", v, "must be above 0"));
                }
                Some(c)
            }
        };
        let unit_price = check_model(
            &r,
            model,
            tiers.as_deref(),
            written_price,
            package_size_canonical,
        )?;
        let valid_from = r.time("valid_from")?;
        let valid_to = r.time("valid_to")?;
        if let (Some(f), Some(to)) = (valid_from, valid_to) {
            if f >= to {
                return Err(r.invalid(
                    "valid_to",
                    r.required("valid_to")?,
                    format!("must be after valid_from ({})", rfc3339(f)),
                ));
            }
        }
        let rate = Rate {
            index: i,
            sku: sku.to_string(),
            meter,
            unit,
            unit_price,
            model,
            tiers: tiers.unwrap_or_default(),
            increment,
            increment_canonical,
            package_size,
            package_size_canonical,
            valid_from,
            valid_to,
        };
        check_against_earlier(&r, &rate, &rates)?;
        rates.push(rate);
    }
    Ok(rates)
}

/// Rules between a rate and the earlier rates of its (SKU, meter): disjoint validity, and
/// one increment in canonical units (the increment is applied once per tenant, SKU, meter and
/// period, so the rates of one period must agree on it).
fn check_against_earlier(
    r: &Reader<'_>,
    rate: &Rate,
    earlier: &[Rate],
) -> Result<(), PriceBookError> {
    let same = || {
        earlier
            .iter()
            .filter(|o| o.sku == rate.sku && o.meter == rate.meter)
    };
    if let Some(other) = same().find(|o| o.overlaps(rate)) {
        let field = if rate.valid_from.is_some() {
            "valid_from"
        } else {
            "meter"
        };
        return Err(r.invalid_field(
            field,
            format!(
                "rate[{}] prices {} on sku `{}` over an overlapping validity span; give them \
                 disjoint valid_from/valid_to",
                other.index, rate.meter, rate.sku
            ),
        ));
    }
    let step = rate.increment_canonical.unwrap_or(1);
    if let Some(other) = same().find(|o| o.increment_canonical.unwrap_or(1) != step) {
        return Err(r.invalid_field(
            "increment",
            format!(
                "rate[{}] prices {} on sku `{}` with an increment of {} {canonical}, this rate \
                 with {step} {canonical}: the increment is applied once per (tenant, SKU, meter, \
                 period), so every rate of one SKU and meter must have the same one",
                other.index,
                rate.meter,
                rate.sku,
                other.increment_canonical.unwrap_or(1),
                canonical = rate.meter.canonical_unit(),
            ),
        ));
    }
    // Packages are counted from the period's start across price changes (a package begins
    // where the period's consumption enters it), so every package rate of one SKU and meter
    // must cut the same packages.
    if let Some(size) = rate.package_size_canonical {
        if let Some(other) = same().find(|o| {
            o.package_size_canonical
                .is_some_and(|other_size| other_size != size)
        }) {
            return Err(r.invalid_field(
                "package_size",
                format!(
                    "rate[{}] prices {} on sku `{}` in packages of {} {canonical}, this rate in \
                     packages of {size} {canonical}: packages are counted across the period, \
                     so every package rate of one SKU and meter must have the same size",
                    other.index,
                    rate.meter,
                    rate.sku,
                    other.package_size_canonical.unwrap_or(0),
                    canonical = rate.meter.canonical_unit(),
                ),
            ));
        }
    }
    Ok(())
}

fn parse_bands(
    ctx: &Ctx<'_>,
    band_tables: &[&toml::Table],
    skus: &[Sku],
) -> Result<Vec<Band>, PriceBookError> {
    let mut bands: Vec<Band> = Vec::new();
    for (i, t) in band_tables.iter().enumerate() {
        let r = Reader::new(ctx, format!("band[{i}]"), t);
        r.check_keys(BAND_KEYS)?;
        let name = r.required_string("name")?.to_string();
        let name_value = r.required("name")?;
        if name.trim().is_empty() {
            return Err(r.invalid("name", name_value, "must not be empty"));
        }
        if let Some(other) = bands.iter().find(|b| b.name == name) {
            return Err(r.invalid(
                "name",
                name_value,
                format!(
                    "band[{}] has the same name: invoice lines are per band name",
                    other.index
                ),
            ));
        }
        let tz_text = r.required_string("tz")?;
        let tz: chrono_tz::Tz = tz_text.parse().map_err(|_| {
            r.invalid_field(
                "tz",
                "not an IANA time zone of the tz database (such as \"America/New_York\", \"UTC\")",
            )
        })?;
        let mut days = Vec::new();
        for d in r.filter_list("days")? {
            let v = toml::Value::String(d.to_string());
            let day = parse_weekday(d).ok_or_else(|| {
                r.invalid("days", &v, "expected mon, tue, wed, thu, fri, sat or sun")
            })?;
            if days.contains(&day) {
                return Err(r.invalid("days", &v, "listed twice"));
            }
            days.push(day);
        }
        let hours = r.required_string("hours")?;
        let hv = r.required("hours")?;
        let (start_minute, end_minute) = hours
            .split_once('-')
            .and_then(|(a, b)| Some((parse_clock(a)?, parse_clock(b)?)))
            .filter(|&(a, b)| a < 1440 && a != b)
            .ok_or_else(|| {
                r.invalid(
                    "hours",
                    hv,
                    "expected \"HH:MM-HH:MM\" (end-exclusive, may wrap midnight)",
                )
            })?;
        let multiplier = r
            .decimal("multiplier")?
            .ok_or_else(|| r.missing("multiplier"))?;
        let mut meters = Vec::new();
        for m in r.filter_list("meters")? {
            let v = toml::Value::String(m.to_string());
            let names: Vec<&str> = MeterKind::ALL.iter().map(|m| m.as_str()).collect();
            let meter = MeterKind::parse(m).ok_or_else(|| {
                r.invalid(
                    "meters",
                    &v,
                    format!("not a meter; meters: {}", names.join(", ")),
                )
            })?;
            if meters.contains(&meter) {
                return Err(r.invalid("meters", &v, "listed twice"));
            }
            meters.push(meter);
        }
        let mut band_skus: Vec<String> = Vec::new();
        for s in r.filter_list("skus")? {
            let v = toml::Value::String(s.to_string());
            if !skus.iter().any(|k| k.id == s) {
                return Err(r.invalid("skus", &v, "no [[sku]] has this id"));
            }
            if band_skus.iter().any(|b| b == s) {
                return Err(r.invalid("skus", &v, "listed twice"));
            }
            band_skus.push(s.to_string());
        }
        bands.push(Band {
            index: i,
            name,
            tz,
            days,
            start_minute,
            end_minute,
            multiplier,
            meters,
            skus: band_skus,
        });
    }
    Ok(bands)
}

impl Band {
    /// Whether the band's filters let it apply to `rate` (its `meters` and `skus`, each
    /// empty for every one).
    pub fn applies_to(&self, rate: &Rate) -> bool {
        (self.meters.is_empty() || self.meters.contains(&rate.meter))
            && (self.skus.is_empty() || self.skus.contains(&rate.sku))
    }

    /// Whether a window starting at local weekday `day` and local minute of the day
    /// `minute` (0..1440) is in the band: `day` is one of `days` (or `days` is empty) and
    /// `minute` is in `[start_minute, end_minute)`, wrapping midnight when the end is below
    /// the start. Days are local dates at window start, so the part of a wrapped
    /// band after midnight belongs to the weekday it is on, not to the day before.
    pub fn holds_at(&self, day: Weekday, minute: u32) -> bool {
        let day_ok = self.days.is_empty() || self.days.contains(&day);
        let minute_ok = if self.start_minute < self.end_minute {
            (self.start_minute..self.end_minute).contains(&minute)
        } else {
            minute >= self.start_minute || minute < self.end_minute
        };
        day_ok && minute_ok
    }

    /// The band as a set of minutes of the local week, Monday 00:00 = 0.
    fn week_mask(&self) -> Vec<bool> {
        (0..WEEK_MINUTES)
            .map(|m| {
                let day = Weekday::try_from((m / 1440) as u8).unwrap_or(Weekday::Mon);
                self.holds_at(day, (m % 1440) as u32)
            })
            .collect()
    }
}

/// Minutes in a week.
const WEEK_MINUTES: usize = 7 * 1440;
/// Cross-zone band overlap is searched over [1970-01-01, 2100-01-01) UTC (seconds).
const OVERLAP_FROM_S: i64 = 0;
const OVERLAP_TO_S: i64 = 4_102_444_800;
/// Offsets are sampled this often (seconds) to find each zone's transitions.
const OFFSET_STEP_S: i64 = 6 * 3600;

/// UTC offset of `tz` at `t` (seconds since the epoch), in seconds.
fn utc_offset(tz: chrono_tz::Tz, t: i64) -> i64 {
    use chrono::{Offset, TimeZone};
    chrono::DateTime::from_timestamp(t, 0).map_or(0, |d| {
        i64::from(
            tz.offset_from_utc_datetime(&d.naive_utc())
                .fix()
                .local_minus_utc(),
        )
    })
}

/// `tz`'s offsets over the overlap search span: `(from, offset)` pairs, the first at the
/// span's start, each transition found by sampling every [`OFFSET_STEP_S`] and bisecting to
/// the second.
fn transitions(tz: chrono_tz::Tz) -> Vec<(i64, i64)> {
    let mut t = OVERLAP_FROM_S;
    let mut cur = utc_offset(tz, t);
    let mut out = vec![(t, cur)];
    while t < OVERLAP_TO_S {
        let next = (t + OFFSET_STEP_S).min(OVERLAP_TO_S);
        if utc_offset(tz, next) == cur {
            t = next;
            continue;
        }
        let (mut lo, mut hi) = (t, next);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if utc_offset(tz, mid) == cur {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        cur = utc_offset(tz, hi);
        out.push((hi, cur));
        t = hi;
    }
    out
}

/// Minute of the local week (Monday 00:00 = 0) of local time `local_s` (seconds since
/// 1970-01-01T00:00 local, a Thursday).
fn week_minute(local_s: i64) -> usize {
    (local_s.div_euclid(60) + 3 * 1440).rem_euclid(WEEK_MINUTES as i64) as usize
}

/// The first UTC instant (seconds) in the search span at which band masks `a` (in zone
/// `tz_a`) and `b` (in `tz_b`) both hold, `None` when they never do.
fn cross_zone_overlap(a: (&[bool], &[(i64, i64)]), b: (&[bool], &[(i64, i64)])) -> Option<i64> {
    let mut edges: Vec<i64> = a.1.iter().chain(b.1).map(|&(t, _)| t).collect();
    edges.push(OVERLAP_TO_S);
    edges.sort_unstable();
    edges.dedup();
    let offset_at = |list: &[(i64, i64)], t: i64| {
        let i = list.partition_point(|&(s, _)| s <= t).max(1);
        list.get(i - 1).map_or(0, |&(_, o)| o)
    };
    let mut checked: Vec<(i64, i64)> = Vec::new();
    for pair in edges.windows(2) {
        let (from, to) = (pair[0], pair[1]);
        let (oa, ob) = (offset_at(a.1, from), offset_at(b.1, from));
        let week = (WEEK_MINUTES as i64) * 60;
        let long = to - from >= week;
        if long && checked.contains(&(oa, ob)) {
            continue;
        }
        // Every minute of the interval, or one week of them: the masks repeat weekly.
        let first = from.div_euclid(60) * 60 + if from.rem_euclid(60) == 0 { 0 } else { 60 };
        let mut t = first;
        while t < to.min(first + week) {
            if a.0[week_minute(t + oa)] && b.0[week_minute(t + ob)] {
                return Some(t);
            }
            t += 60;
        }
        if long {
            checked.push((oa, ob));
        }
    }
    None
}

/// Rules between bands and rates: no two bands that can apply to one rate can hold at one
/// instant (a window gets one multiplier), and every unit price × multiplier of a band that
/// can apply to a rate is exact in a [`Decimal`].
fn check_bands(
    ctx: &Ctx<'_>,
    band_tables: &[&toml::Table],
    bands: &[Band],
    rates: &[Rate],
) -> Result<(), PriceBookError> {
    let value = |i: usize, field: &str| {
        band_tables
            .get(i)
            .and_then(|t| t.get(field))
            .map_or_else(|| "(absent)".to_string(), |v| v.to_string())
    };
    for band in bands {
        for rate in rates.iter().filter(|r| band.applies_to(r)) {
            let prices = std::iter::once(("unit_price".to_string(), rate.unit_price)).chain(
                rate.tiers
                    .iter()
                    .enumerate()
                    .map(|(j, t)| (format!("tiers[{j}].unit_price"), t.unit_price)),
            );
            for (what, price) in prices {
                if !product_is_exact(price, band.multiplier) {
                    return Err(ctx.invalid(
                        &format!("band[{}]", band.index),
                        "multiplier",
                        value(band.index, "multiplier"),
                        format!(
                            "rate[{}].{what} = \"{price}\" × {} cannot be held exactly in a \
                             decimal (at most 28 decimal places and a 96-bit mantissa): write \
                             fewer digits",
                            rate.index, band.multiplier
                        ),
                    ));
                }
            }
        }
    }
    let masks: Vec<Vec<bool>> = bands.iter().map(Band::week_mask).collect();
    let mut zones: HashMap<chrono_tz::Tz, Vec<(i64, i64)>> = HashMap::new();
    for (j, b) in bands.iter().enumerate() {
        for (i, a) in bands.iter().enumerate().take(j) {
            let Some(rate) = rates.iter().find(|r| a.applies_to(r) && b.applies_to(r)) else {
                continue;
            };
            let when = if a.tz == b.tz {
                masks[i]
                    .iter()
                    .zip(&masks[j])
                    .position(|(x, y)| *x && *y)
                    .map(|m| {
                        let day = Weekday::try_from((m / 1440) as u8).unwrap_or(Weekday::Mon);
                        format!(
                            "both hold on {day} at {:02}:{:02} in {}",
                            m % 1440 / 60,
                            m % 60,
                            a.tz
                        )
                    })
            } else {
                for tz in [a.tz, b.tz] {
                    zones.entry(tz).or_insert_with(|| transitions(tz));
                }
                let offsets = |tz| zones.get(&tz).map_or(&[][..], Vec::as_slice);
                cross_zone_overlap((&masks[i], offsets(a.tz)), (&masks[j], offsets(b.tz))).map(
                    |t| {
                        let ns = u64::try_from(t).unwrap_or(0).saturating_mul(1_000_000_000);
                        format!("both hold at {}", rfc3339(ns))
                    },
                )
            };
            if let Some(when) = when {
                return Err(ctx.invalid(
                    &format!("band[{j}]"),
                    "hours",
                    value(j, "hours"),
                    format!(
                        "overlaps band[{i}] (`{}`) on rate[{}] ({} on sku `{}`): {when}; a \
                         window gets at most one band, so bands that can apply to one rate \
                         must not overlap",
                        a.name, rate.index, rate.meter, rate.sku
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Whether `a × b` is exact in a [`Decimal`]: the scales sum to at most 28 and the mantissas'
/// product fits 96 bits.
fn product_is_exact(a: Decimal, b: Decimal) -> bool {
    a.scale() + b.scale() <= 28
        && a.mantissa()
            .unsigned_abs()
            .checked_mul(b.mantissa().unsigned_abs())
            .is_some_and(|p| p < (1u128 << 96))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals() {
        assert_eq!(
            parse_decimal_text("0.0175").map(|d| d.to_string()),
            Ok("0.0175".into())
        );
        assert_eq!(
            parse_decimal_text("12").map(|d| d.to_string()),
            Ok("12".into())
        );
        assert_eq!(
            parse_decimal_text("2.50").map(|d| d.to_string()),
            Ok("2.50".into())
        );
        for bad in [
            "", ".5", "5.", "-1", "1e3", "1_000", "+1", " 1", "0x10", "1.2.3",
        ] {
            assert!(parse_decimal_text(bad).is_err(), "{bad}");
        }
        assert!(parse_decimal_text("0.00000000000000000000000000001").is_err());
    }

    #[test]
    fn clock() {
        assert_eq!(parse_clock("00:00"), Some(0));
        assert_eq!(parse_clock("08:30"), Some(510));
        assert_eq!(parse_clock("24:00"), Some(1440));
        assert_eq!(parse_clock("24:01"), None);
        assert_eq!(parse_clock("8:00"), None);
        assert_eq!(parse_clock("+8:00"), None);
    }

    #[test]
    fn patterns() {
        assert_eq!(SkuPattern::parse("*"), Ok(SkuPattern::Any));
        assert_eq!(SkuPattern::parse("A*"), Ok(SkuPattern::Prefix("A".into())));
        assert!(SkuPattern::parse("A*B").is_err());
        assert!(SkuPattern::parse("**").is_err());
        assert!(SkuPattern::parse("").is_err());
    }
}
