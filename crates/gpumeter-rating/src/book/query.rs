//! What a valid price book answers: its fields, the SKU of a device, the rate in force,
//! the checks of `prices check` against a device catalog, its summary for people, and
//! whether a band applies to a rate at a local time.

use chrono::Weekday;
use gpumeter_core::time::rfc3339;
use gpumeter_core::{MeterKind, Warning, WarningCode};
use rust_decimal::Decimal;

use crate::currency::Currency;
use crate::error::RatingError;
use crate::money::Rounding;

use super::error::{at, PriceBookError};
use super::{Band, MatchRank, PriceBook, Rate, Sku, TierLimit, PRICEBOOK_SCHEMA};

impl PriceBook {
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
    let price = match (
        r.model.priced_per_package(),
        r.package_size,
        r.package_size_canonical,
    ) {
        (true, Some(size), Some(c)) => format!(
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
}
