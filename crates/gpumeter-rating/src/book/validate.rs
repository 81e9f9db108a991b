//! The rules between fields and tables that make a book one rating can price exactly: a
//! rate's model against its fields, a rate against the earlier rates of its SKU and meter
//! (validity, increment, package size), and bands against rates (exact banded prices, no
//! two bands holding at one instant on one rate, across time zones).

use std::collections::HashMap;

use chrono::Weekday;
use gpumeter_core::time::rfc3339;
use rust_decimal::Decimal;

use crate::model::RateModel;

use super::error::{Ctx, PriceBookError};
use super::read::Reader;
use super::{Band, Rate, Tier};

/// The rules tying a rate's model to its fields: tiers exactly for `graduated`
/// and `volume`, `package_size` exactly for `package`, `unit_price` equal to the first
/// tier's when both are written. Returns the rate's unit price.
pub(super) fn check_model(
    r: &Reader<'_>,
    model: RateModel,
    tiers: Option<&[Tier]>,
    unit_price: Option<Decimal>,
    package_size: Option<u128>,
) -> Result<Decimal, PriceBookError> {
    let tiered = model.has_tiers();
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
                    if model.priced_per_package() {
                        " (one unit_price per package)"
                    } else {
                        ""
                    }
                ),
            ))
        }
        _ => {}
    }
    match (model.priced_per_package(), package_size) {
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

/// Rules between a rate and the earlier rates of its (SKU, meter): disjoint validity, and
/// one increment in canonical units (the increment is applied once per tenant, SKU, meter and
/// period, so the rates of one period must agree on it).
pub(super) fn check_against_earlier(
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

impl Rate {
    pub(super) fn overlaps(&self, other: &Rate) -> bool {
        let a_from = self.valid_from.unwrap_or(0);
        let b_from = other.valid_from.unwrap_or(0);
        let a_before_b_ends = other.valid_to.is_none_or(|t| a_from < t);
        let b_before_a_ends = self.valid_to.is_none_or(|t| b_from < t);
        a_before_b_ends && b_before_a_ends
    }
}

impl Band {
    /// The band as a set of minutes of the local week, Monday 00:00 = 0.
    pub(super) fn week_mask(&self) -> Vec<bool> {
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
pub(super) fn check_bands(
    ctx: &Ctx<'_>,
    band_tables: &[&toml::Table],
    bands: &[Band],
    rates: &[Rate],
) -> Result<(), PriceBookError> {
    check_band_prices(ctx, band_tables, bands, rates)?;
    check_band_overlaps(ctx, band_tables, bands, rates)
}

/// `band[i].field` as written in the book, `(absent)` when it is not.
fn written(band_tables: &[&toml::Table], i: usize, field: &str) -> String {
    band_tables
        .get(i)
        .and_then(|t| t.get(field))
        .map_or_else(|| "(absent)".to_string(), |v| v.to_string())
}

/// Every unit price × multiplier of a band that can apply to a rate is exact in a
/// [`Decimal`].
fn check_band_prices(
    ctx: &Ctx<'_>,
    band_tables: &[&toml::Table],
    bands: &[Band],
    rates: &[Rate],
) -> Result<(), PriceBookError> {
    let value = |i: usize, field: &str| written(band_tables, i, field);
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
    Ok(())
}

/// No two bands that can apply to one rate hold at one instant (a window gets one
/// multiplier): compared minute by minute over the local week in one zone, and over the
/// zones' offset changes across zones.
fn check_band_overlaps(
    ctx: &Ctx<'_>,
    band_tables: &[&toml::Table],
    bands: &[Band],
    rates: &[Rate],
) -> Result<(), PriceBookError> {
    let value = |i: usize, field: &str| written(band_tables, i, field);
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
