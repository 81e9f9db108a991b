//! Pricing one tenant's series of one SKU and meter: window pieces in time order, the billing
//! increment on the total, the model's parts, one line per (rate, tier, band), then the flat
//! fees of the tiers reached.

use std::collections::{BTreeMap, BTreeSet};

use gpumeter_core::{MeterKind, Quantity, Warning, WarningCode};
use num_bigint::BigUint;
use num_traits::Zero;
use rust_decimal::Decimal;

use crate::book::{PriceBook, Rate};
use crate::error::RatingError;
use crate::invoice::{Line, LineExtensions, LineKind};
use crate::money::{amount_minor_units, exact_product, minor_units_to_decimal, quantity_in_unit};

use super::checks::check_rate_edges;
use super::{Context, PRICING_UNIT_DECIMALS};

/// One invoice line being summed: canonical quantities and the priced count.
struct LineAcc {
    quantity: u128,
    billable: u128,
    count: u128,
    /// Unit price times the band's multiplier, exactly.
    unit_price: Decimal,
    factor: (u128, u128),
}

/// The lines of one (tenant, SKU, meter) series, and its fragment carried out.
pub(super) struct SeriesLines {
    pub(super) lines: Vec<Line>,
    /// Sum of the lines' amounts, minor units.
    pub(super) minor: BigUint,
    pub(super) fragment_out: u128,
}

/// A (piece of) usage in time order: (rate index, band, canonical quantity).
type Piece = (usize, Option<usize>, u128);

/// Which series: the tenant, the SKU id, the meter, and the SKU's rates for the meter.
struct Series<'a> {
    tenant: &'a str,
    sku: &'a str,
    meter: MeterKind,
    candidates: Vec<&'a Rate>,
}

impl Series<'_> {
    /// The error of a canonical quantity of the series beyond `u128`.
    fn overflow(&self) -> RatingError {
        RatingError::QuantityOverflow {
            tenant: self.tenant.to_string(),
            sku: self.sku.to_string(),
            meter: self.meter,
        }
    }
}

/// The series' lines keyed by (validity start, rate index, tier, band), so they print in
/// time order, and its flat fees by (validity start, rate index, tier) of the rate where
/// each was charged.
struct Priced {
    accs: BTreeMap<(u64, usize, Option<usize>, Option<usize>), LineAcc>,
    fees: BTreeSet<(u64, usize, usize)>,
}

/// Rates one tenant's series of one SKU and meter: window pieces in time order (the carried-in
/// fragment first), the increment on the total, the model's parts, one line per (rate, tier,
/// band), then the flat fees of the tiers reached.
pub(super) fn rate_series(
    ctx: &mut Context<'_>,
    tenant: &str,
    (s, meter): (usize, MeterKind),
    windows: &BTreeMap<u64, u128>,
    fragment_in: u128,
    warnings: &mut Vec<Warning>,
) -> Result<SeriesLines, RatingError> {
    let book = ctx.book;
    let se = Series {
        tenant,
        sku: book.skus().get(s).map_or("", |k| k.id.as_str()),
        meter,
        candidates: ctx.rates_of.get(&(s, meter)).cloned().unwrap_or_default(),
    };
    let (pieces, unbilled_in) = series_pieces(ctx, &se, windows, fragment_in, warnings)?;

    // One increment per SKU and meter (the price book refuses rates that differ).
    let increment = se
        .candidates
        .iter()
        .find_map(|r| r.increment_canonical)
        .unwrap_or(1)
        .max(1);
    let mut total = 0u128;
    for &(_, _, q) in &pieces {
        total = total.checked_add(q).ok_or_else(|| se.overflow())?;
    }
    let billable_total = total - total % increment;

    let priced = price_pieces(ctx, &se, &pieces, billable_total)?;
    series_lines(ctx, &se, priced, unbilled_in)
}

/// The series' pieces in time order: the carried-in fragment first, as usage of the period's
/// first window (carried on whole, with a warning, when no rate of the series is in force in
/// the period), then each window with a rate in force; and the carried-in units no rate
/// prices.
fn series_pieces(
    ctx: &mut Context<'_>,
    se: &Series<'_>,
    windows: &BTreeMap<u64, u128>,
    fragment_in: u128,
    warnings: &mut Vec<Warning>,
) -> Result<(Vec<Piece>, u128), RatingError> {
    let book = ctx.book;
    let (sku, meter, candidates) = (se.sku, se.meter, &se.candidates);
    // Pieces in time order: (rate index, band, canonical quantity).
    let mut pieces: Vec<Piece> = Vec::with_capacity(windows.len() + 1);
    let mut unbilled_in = 0u128;
    if fragment_in > 0 {
        let (from, _) = ctx.period;
        // Usage of the period's first window: the rate in force there, else the first rate
        // in force in a window of the period that has usage.
        let at_start = candidates
            .iter()
            .find(|r| r.valid_at(from))
            .map(|r| (r.index, from));
        let first_used = windows.keys().find_map(|&ws| {
            candidates
                .iter()
                .find(|r| r.valid_at(ws))
                .map(|r| (r.index, ws))
        });
        match at_start.or(first_used) {
            Some((r, ws)) => {
                check_rate_edges(book, candidates, ws, ctx.bands.window)?;
                let band = ctx.bands.band_for(sku, meter, ws)?;
                pieces.push((r, band, fragment_in));
            }
            None => {
                unbilled_in = fragment_in;
                warnings.push(Warning::new(
                    WarningCode::FragmentNotRated,
                    format!(
                        "a carried-in fragment of {fragment_in} {} of {meter} on sku `{sku}` is \
                     carried on whole: no rate of the sku for the meter is in force in the \
                     period",
                        meter.canonical_unit()
                    ),
                ));
            }
        }
    }
    for (&ws, &q) in windows {
        let Some(r) = candidates.iter().find(|r| r.valid_at(ws)) else {
            continue;
        };
        let band = ctx.bands.band_for(sku, meter, ws)?;
        pieces.push((r.index, band, q));
    }
    Ok((pieces, unbilled_in))
}

/// The model's parts of each piece summed per line (rate, tier, band), and the flat fees
/// charged: graduated once per tier reached, volume once for the tier chosen.
fn price_pieces(
    ctx: &Context<'_>,
    se: &Series<'_>,
    pieces: &[Piece],
    billable_total: u128,
) -> Result<Priced, RatingError> {
    let book = ctx.book;
    let overflow = || se.overflow();
    // Lines keyed by (validity start, rate index, tier, band), so they print in time order.
    let mut accs: BTreeMap<(u64, usize, Option<usize>, Option<usize>), LineAcc> = BTreeMap::new();
    // Flat fees: tier → rate index where first reached.
    // Flat fees, by (validity start, rate index, tier) of the rate where each was charged.
    // Graduated: once per tier reached; volume: once, for the tier chosen (docs/ARCHITECTURE.md, "Rating in brief").
    let mut fees: BTreeSet<(u64, usize, usize)> = BTreeSet::new();
    let mut tiers_reached: BTreeSet<usize> = BTreeSet::new();
    let mut volume_fee_charged = false;
    let mut cum = 0u128;
    // Where the package span in progress began (`None` outside one): a run of pieces priced
    // by package rates, which a piece of usage under another model ends. Packages are
    // counted from the span's start, so usage under another model earlier in the period
    // never fills them.
    let mut span_start: Option<u128> = None;
    for &(ri, band, q) in pieces {
        let Some(terms) = ctx.terms.get(ri) else {
            continue;
        };
        let r = terms.rate;
        let span = if r.model.priced_per_package() {
            *span_start.get_or_insert(cum)
        } else {
            if q > 0 {
                span_start = None;
            }
            cum
        };
        let multiplier = band.and_then(|b| book.bands().get(b)).map(|b| b.multiplier);
        for part in terms.parts(cum, q, billable_total, span) {
            let unit_price = banded_price(book, part.unit_price, (band, multiplier), r.index)?;
            let key = (r.valid_from.unwrap_or(0), r.index, part.tier, band);
            let acc = accs.entry(key).or_insert(LineAcc {
                quantity: 0,
                billable: 0,
                count: 0,
                unit_price,
                factor: part.factor,
            });
            acc.quantity = acc
                .quantity
                .checked_add(part.quantity)
                .ok_or_else(overflow)?;
            acc.billable = acc
                .billable
                .checked_add(part.billable)
                .ok_or_else(overflow)?;
            acc.count = acc.count.checked_add(part.count).ok_or_else(overflow)?;
            if let (Some(k), true) = (part.tier, part.billable > 0) {
                let first = if r.model.one_flat_fee_per_period() {
                    !std::mem::replace(&mut volume_fee_charged, true)
                } else {
                    tiers_reached.insert(k)
                };
                let has_fee = r.tiers.get(k).is_some_and(|t| t.flat_fee.is_some());
                if first && has_fee {
                    fees.insert((r.valid_from.unwrap_or(0), r.index, k));
                }
            }
        }
        cum = cum.checked_add(q).ok_or_else(overflow)?;
    }
    Ok(Priced { accs, fees })
}

/// `unit_price` times the multiplier of the band that holds (`band`, `multiplier`), exactly,
/// shown to at least the book's decimals; `unit_price` itself outside every band.
fn banded_price(
    book: &PriceBook,
    unit_price: Decimal,
    (band, multiplier): (Option<usize>, Option<Decimal>),
    rate: usize,
) -> Result<Decimal, RatingError> {
    let price = match multiplier {
        None => unit_price,
        Some(m) => {
            let exact = exact_product(unit_price, m).ok_or_else(|| RatingError::Unrateable {
                book: book.name().to_string(),
                table: format!("band[{}]", band.unwrap_or_default()),
                field: "multiplier".into(),
                reason: format!(
                    "{m} × {} (rate[{}]) cannot be held exactly in a decimal",
                    unit_price, rate
                ),
            })?;
            // Shown without the multiplier's trailing zeros, never with fewer
            // decimals than the book wrote the price with (0.019000 × 0.60 shows
            // 0.011400); the value is the same exact product.
            let mut shown = exact.normalize();
            if shown.scale() < unit_price.scale() {
                shown.rescale(unit_price.scale());
            }
            shown
        }
    };
    Ok(price)
}

/// One usage line per (rate, tier, band), in time order, each amount rounded once, then the
/// flat fees; with the sum of their amounts and the fragment carried out.
fn series_lines(
    ctx: &Context<'_>,
    se: &Series<'_>,
    priced: Priced,
    unbilled_in: u128,
) -> Result<SeriesLines, RatingError> {
    let book = ctx.book;
    let (sku, meter) = (se.sku, se.meter);
    let overflow = || se.overflow();
    let Priced { accs, fees } = priced;
    let mut lines = Vec::with_capacity(accs.len() + fees.len());
    let mut minor_sum = BigUint::zero();
    let mut fragment_out = unbilled_in;
    for ((_, ri, tier, band), acc) in accs {
        let Some(terms) = ctx.terms.get(ri) else {
            continue;
        };
        let r = terms.rate;
        let what = format!("sku {sku} {meter}");
        let (minor, amount) = line_amount(book, se, (acc.count, acc.unit_price, acc.factor), what)?;
        minor_sum += &minor;
        let fragment = acc.quantity - acc.billable;
        fragment_out = fragment_out.checked_add(fragment).ok_or_else(overflow)?;
        let packages = r.model.priced_per_package().then_some(Quantity(acc.count));
        lines.push(Line {
            kind: LineKind::Usage,
            sku: Some(r.sku.clone()),
            meter: Some(meter),
            band: band
                .and_then(|b| book.bands().get(b))
                .map(|b| b.name.clone()),
            tier: tier.map(|k| terms.tier_label(k)),
            quantity: Some(Quantity(acc.quantity)),
            unit: Some(meter.canonical_unit().to_string()),
            pricing_unit: Some(r.unit.name().to_string()),
            quantity_in_pricing_unit: Some(quantity_in_unit(
                acc.billable,
                &r.unit,
                PRICING_UNIT_DECIMALS,
            )),
            billable_quantity: Some(Quantity(acc.billable)),
            fragment_carried: Some(Quantity(fragment)),
            unit_price: Some(acc.unit_price),
            amount,
            extensions: LineExtensions {
                packages,
                ..LineExtensions::default()
            },
        });
    }
    for (_, ri, k) in fees {
        let Some(terms) = ctx.terms.get(ri) else {
            continue;
        };
        let r = terms.rate;
        let Some(fee) = r.tiers.get(k).and_then(|t| t.flat_fee) else {
            continue;
        };
        let what = format!("sku {sku} {meter} flat fee");
        let (minor, amount) = line_amount(book, se, (1, fee, (1, 1)), what)?;
        minor_sum += &minor;
        lines.push(Line {
            kind: LineKind::FlatFee,
            sku: Some(r.sku.clone()),
            meter: Some(meter),
            tier: Some(terms.tier_label(k)),
            unit_price: Some(fee),
            // Every other field null, as on a minimum line.
            ..Line::minimum(amount)
        });
    }
    Ok(SeriesLines {
        lines,
        minor: minor_sum,
        fragment_out,
    })
}

/// A line's amount, rounded once with the book's rounding: `count × unit_price ÷ factor`, in
/// minor units and as a decimal at the currency's scale; `what` names the line in the error
/// of an amount a decimal cannot hold.
fn line_amount(
    book: &PriceBook,
    se: &Series<'_>,
    (count, unit_price, factor): (u128, Decimal, (u128, u128)),
    what: String,
) -> Result<(BigUint, Decimal), RatingError> {
    let currency = book.currency();
    let amount_overflow = |what: String, minor: &BigUint| RatingError::AmountOverflow {
        tenant: se.tenant.to_string(),
        what,
        minor_units: minor.to_string(),
        currency: currency.code().to_string(),
    };
    let minor = amount_minor_units(count, unit_price, factor, &currency, book.rounding())
        .ok_or_else(|| amount_overflow(what.clone(), &BigUint::zero()))?;
    let amount =
        minor_units_to_decimal(&minor, &currency).ok_or_else(|| amount_overflow(what, &minor))?;
    Ok((minor, amount))
}
