//! The price book, `gpumeter.pricebook/v1` (DESIGN §5): its TOML format, its types and its
//! validation.
//!
//! A price book is parsed and validated in one step ([`PriceBook::from_toml_str`],
//! [`PriceBook::from_path`]); a [`PriceBook`] value is always valid. Every error names the
//! file, the table (`rate[3]`, counting each `[[rate]]` from 0 in file order), the field and
//! the value ([`PriceBookError`]).
//!
//! Every §5 feature is rated: the models ([`RateModel`], in [`crate::model`]), tiers with
//! their flat fees, time-of-use bands, billing increments and effective dating.

use std::collections::HashMap;
use std::path::Path;

use chrono::Weekday;
use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::MeterKind;
use rust_decimal::Decimal;
use sha2::{Digest, Sha256};

use crate::currency::Currency;
pub use crate::model::RateModel;
use crate::money::{decimal_to_minor_units, Rounding};
use crate::rating::RatingError;
use crate::units::PricingUnit;

/// Schema id a price book must declare (`schema = "gpumeter.pricebook/v1"`).
pub const PRICEBOOK_SCHEMA: &str = "gpumeter.pricebook/v1";

/// Top-level keys a price book may have. `extensions` is a free table for the book's owner
/// (DESIGN §7: extra keys only under `extensions`); it is ignored.
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

/// Errors reading or validating a price book. Each names the file, the table (`""` for the
/// top level, else `sku[i]`, `rate[i]`, `band[i]`, counted from 0 in file order), the field
/// and the offending value as written in TOML. A price-book error never yields a partial
/// invoice (DESIGN §11).
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
    /// The text is not a TOML document (the message has the line and column).
    #[error("{file}: not a TOML document: {message}")]
    Syntax {
        /// The file name as given.
        file: String,
        /// The TOML parser's message.
        message: String,
    },
    /// A key that the format does not have (a typo is never ignored).
    #[error("{file}: {}: unknown key `{key}` (known keys: {known})", place(table))]
    UnknownKey {
        /// The file name as given.
        file: String,
        /// The table (`""` for the top level, `rate[3]`, `rate[3].tiers[1]`).
        table: String,
        /// The unknown key.
        key: String,
        /// The keys that table may have, comma-separated.
        known: String,
    },
    /// A required field is absent.
    #[error("{file}: {} is missing", at(table, field))]
    Missing {
        /// The file name as given.
        file: String,
        /// The table (`""` for the top level).
        table: String,
        /// The field.
        field: &'static str,
    },
    /// A field has a value the format does not allow, or conflicts with another table.
    #[error("{file}: {} = {value}: {reason}", at(table, field))]
    Invalid {
        /// The file name as given.
        file: String,
        /// The table (`""` for the top level).
        table: String,
        /// The field (`unit_price`; `""` when the whole table is wrong).
        field: &'static str,
        /// The value as written in TOML (strings quoted).
        value: String,
        /// What is wrong, for people.
        reason: String,
    },
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

/// One SKU match pattern (DESIGN §5).
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

/// One tier of a tiered rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Tier {
    /// Inclusive upper bound in the pricing unit.
    pub up_to: TierLimit,
    /// Price per pricing unit (per package for [`RateModel::Package`]) in this tier.
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
    /// Price per `unit`, non-negative, in the book's currency, as written (its scale kept).
    /// With tiers and no `unit_price`, the first tier's price.
    pub unit_price: Decimal,
    /// The pricing model.
    pub model: RateModel,
    /// Tiers, ordered, the last one unbounded; empty for `per_unit` and `package`.
    pub tiers: Vec<Tier>,
    /// Billing increment in `unit`, a whole number of canonical units; `None`: one canonical
    /// unit.
    pub increment: Option<Decimal>,
    /// Package size in `unit` for [`RateModel::Package`], a whole number of canonical units.
    pub package_size: Option<Decimal>,
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

/// A validated price book (DESIGN §5).
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
    rates: Vec<Rate>,
    bands: Vec<Band>,
}

/// Reads the fields of one TOML table and turns bad ones into [`PriceBookError`]s.
struct Reader<'a> {
    file: &'a str,
    table: String,
    map: &'a toml::Table,
}

impl<'a> Reader<'a> {
    fn new(file: &'a str, table: String, map: &'a toml::Table) -> Self {
        Reader { file, table, map }
    }

    fn check_keys(&self, known: &[&str]) -> Result<(), PriceBookError> {
        for key in self.map.keys() {
            if !known.contains(&key.as_str()) {
                return Err(PriceBookError::UnknownKey {
                    file: self.file.to_string(),
                    table: self.table.clone(),
                    key: key.clone(),
                    known: known.join(", "),
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
        PriceBookError::Invalid {
            file: self.file.to_string(),
            table: self.table.clone(),
            field,
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    fn missing(&self, field: &'static str) -> PriceBookError {
        PriceBookError::Missing {
            file: self.file.to_string(),
            table: self.table.clone(),
            field,
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
            .map_err(|e| self.invalid(field, v, format!("{e} (write a UTC offset, e.g. `Z`)")))
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
    file: &str,
    top: &'a toml::Table,
    key: &'static str,
) -> Result<Vec<&'a toml::Table>, PriceBookError> {
    let Some(v) = top.get(key) else {
        return Ok(Vec::new());
    };
    let bad = |reason: String| PriceBookError::Invalid {
        file: file.to_string(),
        table: String::new(),
        field: key,
        value: v.to_string(),
        reason,
    };
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
    /// of another dimension, overlapping validity of two rates for one SKU and meter, and the
    /// rules of tiers, increments and bands.
    pub fn from_toml_str(name: &str, text: &str) -> Result<PriceBook, PriceBookError> {
        let sha256 = hex::encode(Sha256::digest(text.as_bytes()));
        let top: toml::Table = toml::from_str(text).map_err(|e| PriceBookError::Syntax {
            file: name.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let mut book = parse_book(name, &top)?;
        book.sha256 = sha256;
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

    /// The rates, in file order.
    pub fn rates(&self) -> &[Rate] {
        &self.rates
    }

    /// The bands, in file order.
    pub fn bands(&self) -> &[Band] {
        &self.bands
    }

    /// The SKU a device named `device_name` is sold as (DESIGN §5): an exact name beats a
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

    /// For `prices check`: lines for people describing the book (header, then each SKU with
    /// its patterns and its rates), without trailing newlines.
    pub fn summary(&self) -> Vec<String> {
        let mut out = vec![
            format!(
                "price book {} (schema {PRICEBOOK_SCHEMA}, version {})",
                self.name, self.version
            ),
            format!("  sha256 {}", self.sha256),
            format!(
                "  currency {} ({} decimal places), rounding {} once per line, invoice minimum {}",
                self.currency.code(),
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
                let validity = match (r.valid_from, r.valid_to) {
                    (None, None) => String::new(),
                    (f, t) => format!(
                        ", valid [{}, {})",
                        f.map_or_else(|| "-∞".to_string(), rfc3339),
                        t.map_or_else(|| "∞".to_string(), rfc3339)
                    ),
                };
                out.push(format!(
                    "  rate[{}] {}: {} {} per {}{}",
                    r.index,
                    r.meter,
                    r.unit_price,
                    self.currency.code(),
                    r.unit.name(),
                    validity
                ));
            }
        }
        out
    }
}

fn parse_book(file: &str, top: &toml::Table) -> Result<PriceBook, PriceBookError> {
    let r = Reader::new(file, String::new(), top);
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

    let skus = parse_skus(file, top)?;
    let rates = parse_rates(file, top, &skus)?;
    let bands = parse_bands(file, top, &skus)?;

    Ok(PriceBook {
        name: file.to_string(),
        sha256: String::new(),
        version: version.to_string(),
        currency,
        rounding,
        invoice_minimum,
        invoice_minimum_minor,
        skus,
        rates,
        bands,
    })
}

fn parse_skus(file: &str, top: &toml::Table) -> Result<Vec<Sku>, PriceBookError> {
    let mut skus: Vec<Sku> = Vec::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut seen: HashMap<SkuPattern, usize> = HashMap::new();
    for (i, t) in tables(file, top, "sku")?.into_iter().enumerate() {
        let r = Reader::new(file, format!("sku[{i}]"), t);
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

fn parse_tiers(r: &Reader<'_>) -> Result<Vec<Tier>, PriceBookError> {
    let Some(v) = r.get("tiers") else {
        return Ok(Vec::new());
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
    let mut tiers = Vec::with_capacity(items.len());
    for (j, item) in items.iter().enumerate() {
        let tier_table = format!("{}.tiers[{j}]", r.table);
        let toml::Value::Table(t) = item else {
            return Err(PriceBookError::Invalid {
                file: r.file.to_string(),
                table: tier_table,
                field: "",
                value: item.to_string(),
                reason: format!(
                    "expected a {{ up_to, unit_price }} table, found {}",
                    kind(item)
                ),
            });
        };
        let tr = Reader::new(r.file, tier_table, t);
        tr.check_keys(TIER_KEYS)?;
        let up_v = tr.required("up_to")?;
        let up_to = match up_v {
            toml::Value::String(s) if s == "inf" => TierLimit::Unbounded,
            other => TierLimit::UpTo(
                parse_decimal(other).map_err(|reason| tr.invalid("up_to", other, reason))?,
            ),
        };
        let unit_price = tr
            .decimal("unit_price")?
            .ok_or_else(|| tr.missing("unit_price"))?;
        let flat_fee = tr.decimal("flat_fee")?;
        tiers.push(Tier {
            up_to,
            unit_price,
            flat_fee,
        });
    }
    Ok(tiers)
}

fn parse_rates(file: &str, top: &toml::Table, skus: &[Sku]) -> Result<Vec<Rate>, PriceBookError> {
    let mut rates: Vec<Rate> = Vec::new();
    for (i, t) in tables(file, top, "rate")?.into_iter().enumerate() {
        let r = Reader::new(file, format!("rate[{i}]"), t);
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
        let unit = PricingUnit::parse(unit_text).ok_or_else(|| {
            let names: Vec<&str> = PricingUnit::all()
                .filter(|u| u.dimension() == meter.dimension())
                .map(|u| u.name())
                .collect();
            r.invalid(
                "unit",
                unit_value,
                format!(
                    "not a pricing unit; units for {meter}: {} (ASCII `*` may stand for `·`)",
                    names.join(", ")
                ),
            )
        })?;
        if unit.dimension() != meter.dimension() {
            let names: Vec<&str> = PricingUnit::all()
                .filter(|u| u.dimension() == meter.dimension())
                .map(|u| u.name())
                .collect();
            return Err(r.invalid(
                "unit",
                unit_value,
                format!(
                    "{meter} is measured in {}, which {} cannot price; use one of: {}",
                    meter.canonical_unit(),
                    unit.name(),
                    names.join(", ")
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
        let tiers = parse_tiers(&r)?;
        let unit_price = match (r.decimal("unit_price")?, tiers.first()) {
            (Some(p), _) => p,
            (None, Some(first)) => first.unit_price,
            (None, None) => return Err(r.missing("unit_price")),
        };
        let increment = r.decimal("increment")?;
        let package_size = r.decimal("package_size")?;
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
            tiers,
            increment,
            package_size,
            valid_from,
            valid_to,
        };
        if let Some(other) = rates
            .iter()
            .find(|o| o.sku == rate.sku && o.meter == rate.meter && o.overlaps(&rate))
        {
            let field = if rate.valid_from.is_some() {
                "valid_from"
            } else {
                "meter"
            };
            return Err(r.invalid(
                field,
                r.required(field)?,
                format!(
                    "rate[{}] prices {} on sku `{}` over an overlapping validity span; give them \
                     disjoint valid_from/valid_to",
                    other.index, rate.meter, rate.sku
                ),
            ));
        }
        rates.push(rate);
    }
    Ok(rates)
}

fn parse_bands(file: &str, top: &toml::Table, skus: &[Sku]) -> Result<Vec<Band>, PriceBookError> {
    let mut bands = Vec::new();
    for (i, t) in tables(file, top, "band")?.into_iter().enumerate() {
        let r = Reader::new(file, format!("band[{i}]"), t);
        r.check_keys(BAND_KEYS)?;
        let name = r.required_string("name")?.to_string();
        let tz_text = r.required_string("tz")?;
        let tz: chrono_tz::Tz = tz_text.parse().map_err(|_| {
            r.invalid(
                "tz",
                r.get("tz").unwrap_or(&toml::Value::String(String::new())),
                "not an IANA time zone of the tz database (such as \"America/New_York\", \"UTC\")",
            )
        })?;
        let mut days = Vec::new();
        for d in r.strings("days")?.unwrap_or_default() {
            let v = toml::Value::String(d.to_string());
            days.push(parse_weekday(d).ok_or_else(|| {
                r.invalid("days", &v, "expected mon, tue, wed, thu, fri, sat or sun")
            })?);
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
        for m in r.strings("meters")?.unwrap_or_default() {
            let v = toml::Value::String(m.to_string());
            meters.push(MeterKind::parse(m).ok_or_else(|| r.invalid("meters", &v, "not a meter"))?);
        }
        let mut band_skus = Vec::new();
        for s in r.strings("skus")?.unwrap_or_default() {
            if !skus.iter().any(|k| k.id == s) {
                let v = toml::Value::String(s.to_string());
                return Err(r.invalid("skus", &v, "no [[sku]] has this id"));
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
