//! From TOML tables to the book's values: the top level, `[[sku]]`, `[[rate]]` with its
//! tiers, and `[[band]]`, each field read and checked on its own; the rules between
//! fields and tables are in `validate.rs`.

use std::collections::HashMap;

use chrono::Weekday;
use gpumeter_core::time::rfc3339;
use gpumeter_core::MeterKind;
use rust_decimal::Decimal;

use crate::currency::Currency;
use crate::model::RateModel;
use crate::money::{decimal_to_minor_units, Rounding};
use crate::units::PricingUnit;

use super::error::{Ctx, PriceBookError};
use super::read::{kind, parse_clock, parse_decimal, parse_weekday, tables, Reader};
use super::validate::{check_against_earlier, check_bands, check_model};
use super::{Band, PriceBook, Rate, Sku, SkuPattern, Tier, TierLimit, PRICEBOOK_SCHEMA};

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

pub(super) fn parse_book(ctx: &Ctx<'_>, top: &toml::Table) -> Result<PriceBook, PriceBookError> {
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
        let last = j + 1 == items.len();
        let prev = tiers.last().and_then(|p| p.up_to_canonical);
        let (up_to, up_to_canonical) = tier_bound(&tr, j, last, prev, unit, meter)?;
        let unit_price = tr
            .decimal("unit_price")?
            .ok_or_else(|| tr.missing("unit_price"))?;
        let flat_fee = flat_fee(&tr, currency)?;
        tiers.push(Tier {
            up_to,
            up_to_canonical,
            unit_price,
            flat_fee,
        });
    }
    Ok(Some(tiers))
}

/// A tier's `up_to`: `"inf"` (the last tier only) or a whole number of canonical units above
/// the previous tier's (`prev`, canonical) and above 0; the last tier must be `"inf"`.
fn tier_bound(
    tr: &Reader<'_>,
    j: usize,
    last: bool,
    prev: Option<u128>,
    unit: PricingUnit,
    meter: MeterKind,
) -> Result<(TierLimit, Option<u128>), PriceBookError> {
    let up_v = tr.required("up_to")?;
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
            let d = parse_decimal(other).map_err(|reason| tr.invalid("up_to", other, reason))?;
            let c = whole_canonical(unit, meter, d)
                .map_err(|reason| tr.invalid("up_to", other, reason))?;
            (TierLimit::UpTo(d), Some(c))
        }
    };
    if let Some(c) = up_to_canonical {
        match prev {
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
    Ok((up_to, up_to_canonical))
}

/// A tier's `flat_fee`, if written: at most the currency's scale, and a number of minor units
/// that fits.
fn flat_fee(tr: &Reader<'_>, currency: Currency) -> Result<Option<Decimal>, PriceBookError> {
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
    Ok(flat_fee)
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
        let (meter, unit) = meter_and_unit(&r)?;
        let model = match r.string("model")? {
            None => RateModel::default(),
            Some(text) => RateModel::parse(text).ok_or_else(|| {
                let v = toml::Value::String(text.to_string());
                r.invalid("model", &v, format!("expected {}", RateModel::names()))
            })?,
        };
        let tiers = parse_tiers(&r, unit, meter, currency)?;
        let written_price = r.decimal("unit_price")?;
        let (increment, increment_canonical) = positive_canonical(
            &r,
            "increment",
            (unit, meter),
            "must be above 0 (leave increment out to bill every canonical unit)",
        )?;
        let (package_size, package_size_canonical) =
            positive_canonical(&r, "package_size", (unit, meter), "must be above 0")?;
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

/// A rate's `meter` and `unit`: a meter of gpumeter's, and a pricing unit of its dimension.
fn meter_and_unit(r: &Reader<'_>) -> Result<(MeterKind, PricingUnit), PriceBookError> {
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
    Ok((meter, unit))
}

/// An optional amount in the rate's pricing unit (`increment`, `package_size`) with the same
/// amount in canonical units, which must be whole and above 0 (`zero` says why not 0).
fn positive_canonical(
    r: &Reader<'_>,
    field: &'static str,
    (unit, meter): (PricingUnit, MeterKind),
    zero: &str,
) -> Result<(Option<Decimal>, Option<u128>), PriceBookError> {
    let amount = r.decimal(field)?;
    let canonical = match amount {
        None => None,
        Some(d) => {
            let v = r.required(field)?;
            let c =
                whole_canonical(unit, meter, d).map_err(|reason| r.invalid(field, v, reason))?;
            if c == 0 {
                return Err(r.invalid(field, v, zero));
            }
            Some(c)
        }
    };
    Ok((amount, canonical))
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
        let days = band_days(&r)?;
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
        let meters = band_meters(&r)?;
        let band_skus = band_skus(&r, skus)?;
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

/// A band's `days`: weekday names, each once; empty (every day) when absent.
fn band_days(r: &Reader<'_>) -> Result<Vec<Weekday>, PriceBookError> {
    let mut days = Vec::new();
    for d in r.filter_list("days")? {
        let v = toml::Value::String(d.to_string());
        let day = parse_weekday(d)
            .ok_or_else(|| r.invalid("days", &v, "expected mon, tue, wed, thu, fri, sat or sun"))?;
        if days.contains(&day) {
            return Err(r.invalid("days", &v, "listed twice"));
        }
        days.push(day);
    }
    Ok(days)
}

/// A band's `meters`: meter names, each once; empty (every meter) when absent.
fn band_meters(r: &Reader<'_>) -> Result<Vec<MeterKind>, PriceBookError> {
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
    Ok(meters)
}

/// A band's `skus`: ids of the book's SKUs, each once; empty (every SKU) when absent.
fn band_skus(r: &Reader<'_>, skus: &[Sku]) -> Result<Vec<String>, PriceBookError> {
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
    Ok(band_skus)
}
