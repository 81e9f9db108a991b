//! Reading one TOML table of a price book: typed fields (strings, decimals, times, lists)
//! with the error that names the table, field and value when one is malformed.

use chrono::Weekday;
use gpumeter_core::time::parse_rfc3339;
use rust_decimal::Decimal;

use super::error::{Ctx, PriceBookError};

/// Reads the fields of one TOML table and turns bad ones into [`PriceBookError`]s.
pub(super) struct Reader<'a> {
    pub(super) ctx: &'a Ctx<'a>,
    pub(super) table: String,
    map: &'a toml::Table,
}

impl<'a> Reader<'a> {
    pub(super) fn new(ctx: &'a Ctx<'a>, table: String, map: &'a toml::Table) -> Self {
        Reader { ctx, table, map }
    }

    pub(super) fn check_keys(&self, known: &[&str]) -> Result<(), PriceBookError> {
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

    pub(super) fn invalid(
        &self,
        field: &'static str,
        value: &toml::Value,
        reason: impl Into<String>,
    ) -> PriceBookError {
        self.ctx
            .invalid(&self.table, field, value.to_string(), reason)
    }

    /// An error about `field` whether or not the table has it (its value, or `(absent)`).
    pub(super) fn invalid_field(
        &self,
        field: &'static str,
        reason: impl Into<String>,
    ) -> PriceBookError {
        let value = self
            .get(field)
            .map_or_else(|| "(absent)".to_string(), |v| v.to_string());
        self.ctx.invalid(&self.table, field, value, reason)
    }

    pub(super) fn missing(&self, field: &'static str) -> PriceBookError {
        let (line, column) = self.ctx.loc.find(&self.table, "");
        PriceBookError::Missing {
            file: self.ctx.file.to_string(),
            table: self.table.clone(),
            field,
            line,
            column,
        }
    }

    pub(super) fn get(&self, field: &str) -> Option<&'a toml::Value> {
        self.map.get(field)
    }

    pub(super) fn required(&self, field: &'static str) -> Result<&'a toml::Value, PriceBookError> {
        self.get(field).ok_or_else(|| self.missing(field))
    }

    pub(super) fn string(&self, field: &'static str) -> Result<Option<&'a str>, PriceBookError> {
        match self.get(field) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(self.invalid(field, v, format!("expected a string, found {}", kind(v)))),
        }
    }

    pub(super) fn required_string(&self, field: &'static str) -> Result<&'a str, PriceBookError> {
        self.string(field)?.ok_or_else(|| self.missing(field))
    }

    /// A decimal written as a string (`"0.0175"`) or a TOML integer; never a float.
    pub(super) fn decimal(&self, field: &'static str) -> Result<Option<Decimal>, PriceBookError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => parse_decimal(v)
                .map(Some)
                .map_err(|reason| self.invalid(field, v, reason)),
        }
    }

    /// An RFC 3339 time with an offset, as a string or a TOML offset date-time.
    pub(super) fn time(&self, field: &'static str) -> Result<Option<u64>, PriceBookError> {
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
    pub(super) fn filter_list(&self, field: &'static str) -> Result<Vec<&'a str>, PriceBookError> {
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
    pub(super) fn strings(
        &self,
        field: &'static str,
    ) -> Result<Option<Vec<&'a str>>, PriceBookError> {
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

pub(super) fn kind(v: &toml::Value) -> &'static str {
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
pub(super) fn parse_decimal(v: &toml::Value) -> Result<Decimal, String> {
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

pub(super) fn parse_decimal_text(s: &str) -> Result<Decimal, String> {
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

pub(super) fn parse_weekday(s: &str) -> Option<Weekday> {
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
pub(super) fn parse_clock(s: &str) -> Option<u32> {
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
pub(super) fn tables<'a>(
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
